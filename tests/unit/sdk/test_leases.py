"""The worker runs a handler only while it knows it holds the lease.

Found by the chaos suite: a worker frozen (SIGSTOP) between asking for a lease and
getting the answer ran the handler on a grant whose TTL had long run out, after
another worker had finished the task; and a worker whose renewals could not get
through kept its handler running past the lease's end.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import composer_queue as cq
from composer_sdk import Outcome, TaskContext, Worker, WorkerConfig
from composer_sdk._client import Lease
from composer_sdk._handler import Handler

TTL = 0.3
MSG = cq.TaskMessage("t1", "r1", 0)


class FakeCoordinator:
    """Grants after ``grant_delay`` seconds; renewals answer ``renewals`` (None: no answer)."""

    def __init__(self, *, grant_delay: float = 0.0, renewals: bool | None = True) -> None:
        self.grant_delay = grant_delay
        self.renewals = renewals
        self.renewed = 0
        self.reported: list[Outcome] = []

    async def acquire(
        self,
        task_id: str,
        run_id: str,
        attempt: int,
        owner: str,
        ttl: float,
        *,
        claim: str,
        until: Any,
        queue: str = "",
        node_types: Any = (),
    ) -> Lease:
        asked = time.monotonic()
        await asyncio.sleep(self.grant_delay)  # the worker was frozen meanwhile
        return Lease(
            True, input_json="{}", asked_at=asked, token="tok", node_id="n1", node_type="TASK"
        )

    async def renew(
        self, task_id: str, run_id: str, attempt: int, owner: str, ttl: float, token: str
    ) -> bool | None:
        self.renewed += 1
        return self.renewals

    async def report(self, *args: Any, outcome: Outcome | None = None, **kwargs: Any) -> bool:
        self.reported.append(args[6])
        return True


async def run_one(
    coordinator: FakeCoordinator, handler: Callable[[TaskContext, Any], Any]
) -> tuple[Worker, list[str]]:
    worker = Worker(WorkerConfig(lease_ttl=TTL))
    acked: list[str] = []

    async def ack(entry: cq.Entry | None) -> None:
        assert entry is not None
        acked.append(entry.entry_id)

    worker._client = coordinator  # type: ignore[assignment]
    worker._ack = ack  # type: ignore[method-assign]
    entry = cq.Entry("s", "1-0", MSG.fields())
    await worker._lease_run_report(Handler.of("q", handler), entry, MSG, lambda: None)
    return worker, acked


async def test_a_grant_that_arrives_after_its_ttl_is_not_run_unless_renewed() -> None:
    ran: list[int] = []

    async def handler(ctx: TaskContext, input: Any) -> dict[str, Any]:
        ran.append(ctx.attempt)
        return {}

    coordinator = FakeCoordinator(grant_delay=TTL * 1.5, renewals=False)
    worker, acked = await run_one(coordinator, handler)

    assert ran == []
    assert coordinator.reported == []
    assert acked == ["1-0"] and worker.skipped == 1


async def test_a_late_grant_that_a_renewal_confirms_is_run() -> None:
    ran: list[int] = []

    async def handler(ctx: TaskContext, input: Any) -> dict[str, Any]:
        ran.append(ctx.attempt)
        return {}

    coordinator = FakeCoordinator(grant_delay=TTL * 1.5, renewals=True)
    await run_one(coordinator, handler)

    assert ran == [0]
    assert [o.status for o in coordinator.reported] == ["COMPLETED"]


async def test_a_handler_whose_renewals_get_no_answer_stops_when_the_lease_runs_out() -> None:
    cancelled: list[float] = []

    async def handler(ctx: TaskContext, input: Any) -> dict[str, Any]:
        began = time.monotonic()
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(time.monotonic() - began)
            raise
        return {}

    coordinator = FakeCoordinator(renewals=None)  # the coordinator is unreachable
    _, acked = await run_one(coordinator, handler)

    assert len(cancelled) == 1 and cancelled[0] < TTL * 2
    assert coordinator.reported == []
    assert acked == ["1-0"]


async def test_renewals_that_get_through_keep_a_long_handler_running() -> None:
    async def handler(ctx: TaskContext, input: Any) -> dict[str, Any]:
        await asyncio.sleep(TTL * 3)
        return {"done": True}

    coordinator = FakeCoordinator(renewals=True)
    await run_one(coordinator, handler)

    assert coordinator.renewed >= 6
    assert [o.output for o in coordinator.reported] == [{"done": True}]
