"""Long-poll waiters for finished runs, all woken through ONE Redis subscription.

The engine publishes the run id on ``<prefix>:wake:run-finished`` after the
commit that finished a run (DESIGN.md §5). One subscriber task per process
routes each message to the waiters of that run, however many requests wait:
a subscription per request would cost a Redis connection each.

Hints can be lost (Redis restarting, a subscriber reconnecting), so a waiter
also re-reads the run every ``poll_seconds``; and when the subscription
drops, every waiter is woken to look once, since its hint may be the one
that was missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from redis.exceptions import RedisError

from composer_common import hints

log = logging.getLogger("composer.api.waiters")
T = TypeVar("T")


class RunWaiters:
    def __init__(self, redis: Any, prefix: str, *, poll_seconds: float = 2.0) -> None:
        self._redis = redis
        self._channel = hints.channel(prefix, hints.RUN_FINISHED)
        self._poll = poll_seconds
        self._waiting: dict[str, set[asyncio.Event]] = {}
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        #: Set while the subscription is live (readiness and tests look at it).
        self.subscribed = asyncio.Event()
        self.hints_received = 0

    @property
    def waiting(self) -> int:
        return sum(len(events) for events in self._waiting.values())

    async def start(self) -> None:
        self._task = asyncio.create_task(self._listen(), name="run-finished-subscriber")

    async def close(self) -> None:
        self._closing = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._wake_all()  # shutting down: let every long-poll answer now

    async def wait(
        self,
        run_id: str,
        timeout: float,
        read: Callable[[], Awaitable[T]],
        done: Callable[[T], bool],
    ) -> tuple[T, bool]:
        """Read the run until ``done(value)`` or ``timeout`` seconds pass.

        Returns the last value read and whether it is done. The waiter is
        registered before the first read, so a hint arriving between the read
        and the wait is not lost.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        event = asyncio.Event()
        self._waiting.setdefault(run_id, set()).add(event)
        try:
            while True:
                event.clear()
                value = await read()
                if done(value):
                    return value, True
                remaining = deadline - loop.time()
                if remaining <= 0 or self._closing:
                    return value, False
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), min(remaining, self._poll))
        finally:
            events = self._waiting.get(run_id)
            if events is not None:
                events.discard(event)
                if not events:
                    del self._waiting[run_id]

    def _wake(self, run_id: str) -> None:
        for event in self._waiting.get(run_id, ()):
            event.set()

    def _wake_all(self) -> None:
        for events in self._waiting.values():
            for event in events:
                event.set()

    async def _listen(self) -> None:
        delay = 0.1
        while True:
            try:
                async with self._redis.pubsub() as pubsub:
                    await pubsub.subscribe(self._channel)
                    self.subscribed.set()
                    delay = 0.1
                    async for item in pubsub.listen():
                        if item.get("type") != "message":
                            continue
                        data = item.get("data")
                        run_id = data.decode() if isinstance(data, bytes) else str(data or "")
                        self.hints_received += 1
                        self._wake(run_id)
            except Exception as exc:  # Redis gone, or a bug: either way, keep hints coming
                self.subscribed.clear()
                if isinstance(exc, RedisError | OSError):
                    log.warning(
                        "run-finished subscription lost: %s; retrying in %.1fs (long-polls poll meanwhile)",
                        exc,
                        delay,
                    )
                else:
                    log.exception("run-finished subscriber failed; restarting in %.1fs", delay)
                self._wake_all()
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
