"""Long-poll waiters (composer_api_gateway.waiters) are woken by a run-finished hint
that names their run among others: the engine sends one message for the runs a
transaction finished."""

from __future__ import annotations

import asyncio

import composer_queue as cq
from composer_api_gateway.waiters import RunWaiters
from composer_queue.testing import FakeQueue


async def test_a_hint_naming_several_runs_wakes_the_waiter_of_each() -> None:
    queue = FakeQueue()
    waiters = RunWaiters(queue, "p", poll_seconds=60.0)  # only a hint can wake them in time
    await waiters.start()
    await asyncio.wait_for(waiters.subscribed.wait(), 5)
    finished: set[str] = set()

    async def wait(run_id: str) -> tuple[int, bool]:
        reads = 0

        async def read() -> int:
            nonlocal reads
            reads += 1
            return reads

        return await waiters.wait(run_id, 30.0, read, lambda _: run_id in finished)

    async def registered() -> None:
        while waiters.waiting < 2:  # noqa: ASYNC110 - the waiters expose a count, no event
            await asyncio.sleep(0.01)

    try:
        both = asyncio.gather(wait("run-1"), wait("run-2"))
        await asyncio.wait_for(registered(), 5)
        finished |= {"run-1", "run-2"}
        tx_hints = [(cq.RUN_FINISHED, "run-1"), (cq.RUN_FINISHED, "run-2")]
        await cq.send_hints(queue, "p", tx_hints)
        assert len(queue.notified) == 1  # one message for both
        (_, first), (_, second) = await asyncio.wait_for(both, 10)
        assert first and second
    finally:
        await waiters.close()
