"""Group commit: requests that arrive while a batch is in flight join the next one.

The hot path is many small, independent requests: a worker's report, a lease,
a renewal. Applying each in a transaction (or a call) of its own costs a
commit — a WAL flush — or a gRPC call per item. A ``Batcher`` gathers them:
the first request starts a batch at once (no added latency when idle); while
up to ``max_in_flight`` batches are running, new requests wait and go together
in the next, up to ``max_size`` of them (docs/architecture.md §3.1). Each
request gets its own answer or its own error. The coordinator batches its
transactions with it, the worker SDK its calls to the coordinator.

With ``linger``, a batch starts one loop iteration after the request that asks for
it, so requests made by tasks woken together go in one batch.

With a ``key`` (the coordinator's reports: their run), an item whose key is in
a batch in flight waits for that batch to end: two batches in flight never
hold items of one key, so they never queue on each other's row locks, and the
items of a key apply in the order they came.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Hashable, Sequence
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
        key: Callable[[I], Hashable] | None = None,
        linger: bool = False,
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
        self._key = key
        #: The keys of the items in the batches in flight (with ``key``).
        self._busy: Counter[Hashable] = Counter()
        self._waiting: list[tuple[I, asyncio.Future[R]]] = []
        self._in_flight = 0
        self._tasks: set[asyncio.Task[None]] = set()
        #: Start batches one loop iteration later, so that requests made by tasks
        #: woken together (a pass firing a hundred schedules) go in one batch rather
        #: than the first alone; a start is already asked for.
        self._linger = linger
        self._start_asked = False
        #: Batches run and items carried, for metrics and tests.
        self.batches = 0
        self.items = 0

    async def submit(self, item: I) -> R:
        """Apply ``item`` in the next batch; its result, or its error raised here."""
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._waiting.append((item, future))
        self._start()
        return await future

    async def settle(self) -> None:
        """Return once no batch is in flight and none waits to start: what a caller gave
        up waiting for (a cancelled RPC) is still applied, and a process closing its
        connections after this closes none a batch still uses."""
        while self._tasks or (self._waiting and self._start_asked):
            if self._tasks:
                await asyncio.wait(set(self._tasks))
            else:
                await asyncio.sleep(0)  # a lingering start runs on the next iteration

    def _start(self) -> None:
        if not self._linger:
            self._start_now()
        elif not self._start_asked:
            self._start_asked = True
            asyncio.get_running_loop().call_soon(self._start_now)

    def _start_now(self) -> None:
        self._start_asked = False
        while self._waiting and self._in_flight < self._max_in_flight:
            batch = self._next_batch()
            if not batch:  # every waiting item's key is in flight: the end of one starts it
                return
            self._in_flight += 1
            task = asyncio.create_task(self._apply(batch), name=f"{self._name}:{len(batch)}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _next_batch(self) -> list[tuple[I, asyncio.Future[R]]]:
        """The next batch, taken off the waiting list; with ``key``, only items whose
        key no batch in flight holds (the others keep their places)."""
        if self._key is None:
            batch = self._waiting[: self._max_size]
            del self._waiting[: self._max_size]
            return batch
        batch, left = [], []
        for waiting in self._waiting:
            if len(batch) < self._max_size and self._key(waiting[0]) not in self._busy:
                batch.append(waiting)
            else:
                left.append(waiting)
        self._waiting = left
        self._busy.update(self._key(item) for item, _ in batch)
        return batch

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
            if self._key is not None:
                self._busy.subtract(self._key(item) for item, _ in batch)
                self._busy += Counter()  # drops the keys down to zero
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
