"""The worker's side of a report that brings the next task (docs/architecture.md §3.2):
it offers only with a slot to spare and not while stopping, runs what comes back in
the kept slot with nothing to acknowledge, and drains it like any task in flight."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

import composer_queue as cq
from composer_queue.testing import FakeQueue
from composer_rpc.v1 import worker_pb2 as pb
from composer_sdk import TaskContext
from tests.unit.sdk.fakes import FakeStub, granted
from tests.unit.sdk.test_worker import message, pending, publish, running, stored, until


def next_task(task_id: str) -> pb.ReportTaskResultResponse:
    """An accepted report's answer carrying ``task_id`` leased to the reporter."""
    return pb.ReportTaskResultResponse(
        accepted=True,
        next=pb.NextTask(
            message=cq.TaskMessage(task_id, "r1", 0).fields(),
            lease=granted(node_id=f"node-{task_id}", lease_token=f"token-{task_id}"),
        ),
    )


class HeldReports(FakeStub):
    """Holds every batched report call until ``go`` is set."""

    def __init__(self, **fields: Any) -> None:
        super().__init__(**fields)
        self.go = asyncio.Event()

    async def ReportTaskResults(self, request: pb.ReportTaskResultsRequest, **_: Any) -> Any:
        self.reported.set()
        await self.go.wait()
        return await super().ReportTaskResults(request)


async def test_a_task_that_comes_with_the_answer_runs_and_is_reported_with_its_lease() -> None:
    queue = FakeQueue()
    stub = FakeStub(reports=[next_task("t2"), pb.ReportTaskResultResponse(accepted=True)])
    ran: list[str] = []

    async def handler(ctx: TaskContext, input: Any) -> dict[str, Any]:
        ran.append(ctx.task_id)
        return {}

    async with running(handler, stub, queue) as worker:
        await publish(queue, message("t1"))
        await until(lambda: worker.completed == 2, "both tasks completed")
    assert ran == ["t1", "t2"]
    first, second = stub.report_requests
    assert first.HasField("take_next")
    assert (first.take_next.queue, list(first.take_next.node_types)) == ("q", ["TASK"])
    assert first.take_next.ttl_seconds == 5.0
    # t2's report presents the lease that came with the answer
    assert (second.task_id, second.node_id, second.lease_token) == (
        "t2",
        "node-t2",
        "token-t2",
    )
    assert worker.taken_next == 1 and len(stub.lease_requests) == 1
    assert await stored(queue) == 0 and await pending(queue) == 0  # t1's entry acknowledged


async def test_a_task_that_comes_with_an_answer_during_the_drain_is_run_before_stopping(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="composer.sdk")
    queue = FakeQueue()
    stub = HeldReports(reports=[next_task("t2"), pb.ReportTaskResultResponse(accepted=True)])
    ran: list[str] = []

    async def handler(ctx: TaskContext, input: Any) -> dict[str, Any]:
        ran.append(ctx.task_id)
        if ctx.task_id == "t2":
            await asyncio.sleep(0.2)  # still running when t1's processing has ended
        return {}

    async with running(handler, stub, queue) as worker:
        await publish(queue, message("t1"))
        await asyncio.wait_for(stub.reported.wait(), 5)  # t1's report, with its offer
        worker.stop()
        # the answer comes once the drain has begun, with t1's report in flight
        await until(lambda: "draining 1 in-flight task" in caplog.text, "the drain began")
        stub.go.set()
    # run() has returned: t2, leased with the answer during the drain, ran and reported
    assert ran == ["t1", "t2"]
    first, second = stub.report_requests
    assert first.HasField("take_next")
    assert second.task_id == "t2" and not second.HasField("take_next")  # no offer while stopping


async def test_no_offer_while_the_reader_waits_for_a_slot() -> None:
    queue = FakeQueue()
    stub = FakeStub(reports=[next_task("t9")])  # never taken: nothing offers
    release = asyncio.Event()

    async def handler(ctx: TaskContext, input: Any) -> dict[str, Any]:
        if ctx.task_id == "t1":
            await release.wait()
        return {}

    # one slot: while a task runs, the reader waits for it (entries may be waiting on
    # the stream, as t2 is), so no report offers to take a task
    async with running(handler, stub, queue, concurrency=1) as worker:
        await publish(queue, message("t1"))
        await until(lambda: len(stub.lease_requests) == 1, "t1 leased")
        await publish(queue, message("t2"))
        release.set()
        await until(lambda: worker.completed == 2, "both tasks completed")
    assert [r.task_id for r in stub.report_requests] == ["t1", "t2"]
    assert not any(r.HasField("take_next") for r in stub.report_requests)
    assert worker.taken_next == 0 and len(stub.lease_requests) == 2
