"""Wake-up hints over pub/sub (docs/architecture.md).

A hint says "look now" to a polling loop: a committed dispatch wakes the
outbox-enqueuer, a nearer wait wakes the timer, a finished run wakes
long-poll waiters. Hints are sent after commit and may be lost; every loop
also polls, so a lost hint costs latency, never correctness. (NOTIFY would
take a database-wide lock at commit in every hot transaction.)

``Subscriber`` is the one subscription loop (reconnect with backoff, a "gap"
callback when hints may have been missed); ``Waker`` (the polling loops) and
the gateway's long-poll waiters are built on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence

from composer_queue._backoff import Backoff
from composer_queue._errors import QueueError
from composer_queue._port import Queue

#: composer_common.logs.ALERT (above ERROR), which services name "ALERT"; libs/queue
#: does not depend on composer_common.
ALERT = 60

log = logging.getLogger("composer.queue.hints")

ENQUEUER = "enqueuer"
TIMER = "timer"
RUN_FINISHED = "run-finished"
#: The most run ids one RUN_FINISHED hint carries (space-separated: ~3.7 KB).
RUN_IDS_PER_HINT = 100
#: The message of an ENQUEUER hint whose transaction wrote a webhook (dispatches send "").
WEBHOOK = "webhook"


def channel(prefix: str, loop: str) -> str:
    return f"{prefix}:wake:{loop}"


async def send_hint(queue: Queue, prefix: str, loop: str, message: str = "") -> None:
    """Publish a hint; a failure is logged and swallowed (the loop's poll covers it)."""
    try:
        await queue.notify(channel(prefix, loop), message)
    except QueueError as exc:
        log.warning(
            "could not send %s hint: %s (the loop will find the work on its next poll)", loop, exc
        )


def finished_runs(message: str) -> list[str]:
    """The run ids a RUN_FINISHED hint names (one or more, space-separated)."""
    return message.split()


async def send_hints(queue: Queue, prefix: str, hints: Sequence[tuple[str, str]]) -> None:
    """Publish several hints, each a (loop, message), in one round trip. RUN_FINISHED
    hints are merged, up to ``RUN_IDS_PER_HINT`` run ids a message, where the first
    of them stood: a group commit that finished 100 runs sends one message on that
    channel, not 100 (each costs Redis, and every subscriber, a message to parse).
    A failure is logged and swallowed."""
    if not hints:
        return
    messages: list[tuple[str, str]] = []
    finished = [message for loop, message in hints if loop == RUN_FINISHED]
    for loop, message in hints:
        if loop != RUN_FINISHED:
            messages.append((channel(prefix, loop), message))
        elif finished:  # the first: all of them, here
            messages.extend(
                (channel(prefix, RUN_FINISHED), " ".join(finished[i : i + RUN_IDS_PER_HINT]))
                for i in range(0, len(finished), RUN_IDS_PER_HINT)
            )
            finished = []
    try:
        await queue.notify_many(messages)
    except QueueError as exc:
        loops = ", ".join(sorted({loop for loop, _ in hints}))
        log.warning(
            "could not send %d hint(s) (%s): %s (the loops will find the work on their next poll)",
            len(hints),
            loops,
            exc,
        )


class Subscriber:
    """Listens on ``channels`` in a task of its own, reconnecting with backoff.

    ``on_message(channel, message)`` is called per hint; ``on_gap()`` when the
    subscription dropped (hints may have been missed meanwhile: look once).
    ``subscribed`` is set while the subscription is live.
    """

    def __init__(
        self,
        queue: Queue,
        channels: Sequence[str],
        on_message: Callable[[str, str], None],
        *,
        on_gap: Callable[[], None] = lambda: None,
        backoff: Backoff | None = None,
        name: str = "hints",
    ) -> None:
        self._queue = queue
        self._channels = list(channels)
        self._on_message = on_message
        self._on_gap = on_gap
        self._backoff = backoff or Backoff(0.1, 5.0)
        self._name = name
        self._task: asyncio.Task[None] | None = None
        self.subscribed = asyncio.Event()
        #: Hints received since start (tests and logs look at it).
        self.received = 0

    async def __aenter__(self) -> Subscriber:
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._listen(), name=f"{self._name}-subscriber")

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            # Cancel until it is done: redis-py can swallow a cancellation that lands
            # while its blocking read is being woken (seen in the gateway's teardown),
            # after which the task would go on reading forever.
            while not task.done():
                task.cancel()
                await asyncio.wait([task], timeout=0.1)
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.subscribed.clear()

    async def _listen(self) -> None:
        while True:
            try:
                async with self._queue.subscribe(self._channels) as subscription:
                    self.subscribed.set()
                    self._backoff.reset()
                    async for chan, message in subscription.messages():
                        self.received += 1
                        self._deliver(chan, message)
                delay = self._backoff.next()  # the subscription ended without an error
            except QueueError as exc:
                delay = self._backoff.next()
                log.warning(
                    "hint subscription to %s lost: %s; retrying in %.1fs (the loops poll meanwhile)",
                    ", ".join(self._channels),
                    exc,
                    delay,
                )
            except Exception:  # a bug here: keep hints coming, loudly
                delay = self._backoff.next()
                log.exception("hint subscriber %s failed; restarting in %.1fs", self._name, delay)
            self.subscribed.clear()
            self._on_gap()
            await asyncio.sleep(delay)

    def _deliver(self, chan: str, message: str) -> None:
        """One hint to the callback. A hint it cannot take (a bug, a malformed message)
        is an ALERT and is dropped; the subscription, and every other hint, goes on."""
        try:
            self._on_message(chan, message)
        except Exception as exc:
            log.log(
                ALERT,
                "hint subscriber %s could not take the hint %r on %s (%r); dropped it",
                self._name,
                message[:200],
                chan,
                exc,
            )


class Waker:
    """Waits for hints on one loop's channel, or a poll interval, whichever comes first."""

    def __init__(self, queue: Queue, prefix: str, loop: str) -> None:
        self._event = asyncio.Event()
        self._messages: set[str] = set()
        self._subscriber = Subscriber(
            queue,
            [channel(prefix, loop)],
            self._hinted,
            on_gap=self._event.set,
            name=f"wake:{loop}",
        )

    @property
    def subscribed(self) -> asyncio.Event:
        return self._subscriber.subscribed

    async def __aenter__(self) -> Waker:
        self._subscriber.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._subscriber.close()

    def _hinted(self, _channel: str, message: str) -> None:
        self._messages.add(message)
        self._event.set()

    def take_messages(self) -> set[str]:
        """The distinct hint messages received since the last call."""
        messages, self._messages = self._messages, set()
        return messages

    async def wait(self, max_wait: float) -> bool:
        """Wait up to ``max_wait`` seconds for a hint; True if one came."""
        try:
            await asyncio.wait_for(self._event.wait(), max_wait)
        except TimeoutError:
            return False
        finally:
            self._event.clear()
        return True

    async def wait_or_stop(self, stop: asyncio.Event, max_wait: float) -> None:
        """Until a hint, ``stop`` is set, or ``max_wait`` seconds, whichever comes first."""
        stopper = asyncio.create_task(stop.wait())
        hinted = asyncio.create_task(self.wait(max_wait))
        try:
            await asyncio.wait([hinted, stopper], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
            hinted.cancel()
