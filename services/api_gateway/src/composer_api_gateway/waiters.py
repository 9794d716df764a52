"""Long-poll waiters for finished runs, all woken through ONE hint subscription.

The engine publishes the run ids on the run-finished hint channel after the
commit that finished the runs (one message names up to ``RUN_IDS_PER_HINT``,
space-separated; docs/architecture.md). One ``composer_queue.Subscriber``
per process routes each message to the waiters of that run, however many
requests wait: a subscription per request would cost a Redis connection each.

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
from typing import TypeVar

import composer_queue as cq

log = logging.getLogger("composer.api.waiters")
T = TypeVar("T")


class RunWaiters:
    def __init__(self, queue: cq.Queue, prefix: str, *, poll_seconds: float = 2.0) -> None:
        self._poll = poll_seconds
        self._waiting: dict[str, set[asyncio.Event]] = {}
        self._closing = False
        self._subscriber = cq.Subscriber(
            queue,
            [cq.channel(prefix, cq.RUN_FINISHED)],
            lambda _channel, message: self._wake(cq.finished_runs(message)),
            on_gap=self._wake_all,
            name="run-finished",
        )

    @property
    def subscribed(self) -> asyncio.Event:
        """Set while the subscription is live (readiness and tests look at it)."""
        return self._subscriber.subscribed

    @property
    def hints_received(self) -> int:
        return self._subscriber.received

    @property
    def waiting(self) -> int:
        return sum(len(events) for events in self._waiting.values())

    async def start(self) -> None:
        self._subscriber.start()

    async def close(self) -> None:
        self._closing = True
        await self._subscriber.close()
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

    def _wake(self, run_ids: list[str]) -> None:
        for run_id in run_ids:
            for event in self._waiting.get(run_id, ()):
                event.set()

    def _wake_all(self) -> None:
        for events in self._waiting.values():
            for event in events:
                event.set()
