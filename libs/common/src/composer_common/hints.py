"""Wake-up hints over Redis pub/sub (DESIGN.md §5).

A hint says "look now" to a polling loop: a committed dispatch wakes the
outbox-enqueuer, a nearer wait wakes the timer, a finished run wakes
long-poll waiters. Hints are sent after commit and may be lost; every loop
also polls, so a lost hint costs latency, never correctness. (NOTIFY would
take a database-wide lock at commit in every hot transaction.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import redis.asyncio as aioredis
from redis.exceptions import RedisError

log = logging.getLogger(__name__)

ENQUEUER = "enqueuer"
TIMER = "timer"
RUN_FINISHED = "run-finished"
#: The message of an ENQUEUER hint whose transaction wrote a webhook (dispatches send "").
WEBHOOK = "webhook"


def channel(prefix: str, loop: str) -> str:
    return f"{prefix}:wake:{loop}"


async def send(client: aioredis.Redis, prefix: str, loop: str, message: str = "") -> None:
    """Publish a hint; a failure is logged and swallowed (the loop's poll covers it)."""
    try:
        await client.publish(channel(prefix, loop), message)
    except (RedisError, OSError) as exc:
        log.warning(
            "could not send %s hint: %s (the loop will find the work on its next poll)", loop, exc
        )


class Waker:
    """Waits for hints on one channel, or a poll interval, whichever comes first.

    Runs its own subscriber task; reconnects with backoff when Redis goes away
    (hints sent meanwhile are lost, which the poll covers).
    """

    def __init__(self, client: aioredis.Redis, prefix: str, loop: str) -> None:
        self._client = client
        self._channel = channel(prefix, loop)
        self._event = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._messages: set[str] = set()

    async def __aenter__(self) -> Waker:
        self._task = asyncio.create_task(self._listen(), name=f"hints:{self._channel}")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def take_messages(self) -> set[str]:
        """The distinct hint messages received since the last call."""
        messages, self._messages = self._messages, set()
        return messages

    async def wait_or_stop(self, stop: asyncio.Event, max_wait: float) -> None:
        """Until a hint, ``stop`` is set, or ``max_wait`` seconds, whichever comes first."""
        stopper = asyncio.create_task(stop.wait())
        hinted = asyncio.create_task(self.wait(max_wait))
        try:
            await asyncio.wait([hinted, stopper], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
            hinted.cancel()

    def poke(self) -> None:
        """Wake the waiter now (for in-process callers)."""
        self._event.set()

    async def wait(self, max_wait: float) -> bool:
        """Wait up to ``max_wait`` seconds for a hint; True if one came."""
        try:
            await asyncio.wait_for(self._event.wait(), max_wait)
        except TimeoutError:
            return False
        finally:
            self._event.clear()
        return True

    async def _listen(self) -> None:
        delay = 0.1
        while True:
            try:
                async with self._client.pubsub() as pubsub:
                    await pubsub.subscribe(self._channel)
                    delay = 0.1
                    async for message in _messages(pubsub):
                        self._messages.add(message)
                        self._event.set()
            except (RedisError, OSError) as exc:
                log.warning(
                    "hint subscription to %s lost: %s; retrying in %.1fs", self._channel, exc, delay
                )
                self._event.set()  # something may have been missed: look once
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)


async def _messages(pubsub: aioredis.client.PubSub) -> AsyncIterator[str]:
    async for item in pubsub.listen():
        if item.get("type") == "message":
            data = item.get("data")
            yield data.decode() if isinstance(data, bytes) else str(data or "")
