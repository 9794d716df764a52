"""Group commit: requests that arrive while a batch is in flight join the next one.

The hot path is many small, independent requests: a worker's report, a lease,
a renewal. Applying each in a transaction (or a call) of its own costs a
commit — a WAL flush — or a gRPC call per item. A ``Batcher`` gathers them:
the first request starts a batch at once (no added latency when idle); while
up to ``max_in_flight`` batches are running, new requests wait and go together
in the next, up to ``max_size`` of them (docs/architecture.md §3.1). Each
request gets its own answer or its own error. The coordinator batches its
transactions with it, the worker SDK its calls to the coordinator.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

I = TypeVar("I")  # noqa: E741 - the item type
R = TypeVar("R")


class Batcher(Generic[I, R]):
    def __init__(
        self,
        run: Callable[[Sequence[I]], Awaitable[Sequence[R | BaseException]]],
        *,
        max_size: int = 256,
        max_in_flight: int = 1,
        name: str = "batch",
    ) -> None:
        if max_size < 1 or max_in_flight < 1:
            raise ValueError(
                f"a batcher needs max_size >= 1 and max_in_flight >= 1, not {max_size}, "
                f"{max_in_flight}"
            )
        self._run = run
        self._max_size = max_size
        self._max_in_flight = max_in_flight
        self._name = name
        self._waiting: list[tuple[I, asyncio.Future[R]]] = []
        self._in_flight = 0
        self._tasks: set[asyncio.Task[None]] = set()
        #: Batches run and items carried, for metrics and tests.
        self.batches = 0
        self.items = 0

    async def submit(self, item: I) -> R:
        """Apply ``item`` in the next batch; its result, or its error raised here."""
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._waiting.append((item, future))
        self._start()
        return await future

    def _start(self) -> None:
        while self._waiting and self._in_flight < self._max_in_flight:
            batch = self._waiting[: self._max_size]
            del self._waiting[: self._max_size]
            self._in_flight += 1
            task = asyncio.create_task(self._apply(batch), name=f"{self._name}:{len(batch)}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _apply(self, batch: list[tuple[I, asyncio.Future[R]]]) -> None:
        answers: Sequence[R | BaseException]
        try:
            answers = await self._run([item for item, _ in batch])
            if len(answers) != len(batch):  # pragma: no cover - a bug in the batch function
                raise RuntimeError(f"{self._name}: {len(answers)} answers for {len(batch)} items")
        except asyncio.CancelledError:  # shutting down: nobody gets an answer
            for _, future in batch:
                future.cancel()
            raise
        except Exception as exc:  # every waiter hears of it
            answers = [exc] * len(batch)
        finally:
            self._in_flight -= 1
            self.batches += 1
            self.items += len(batch)
        for (_, future), answer in zip(batch, answers, strict=True):
            if future.done():  # its caller went away (a cancelled RPC)
                continue
            if isinstance(answer, BaseException):
                future.set_exception(answer)
            else:
                future.set_result(answer)
        self._start()
