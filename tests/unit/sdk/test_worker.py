"""The worker on the queue fake and a fake coordinator stub: read, lease, run, report, ack.

The CoordinatorClient is the real one (its retries and caps are under test);
only the gRPC stub underneath and Redis (composer_queue.testing) are fakes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import grpc
import pytest

import composer_queue as cq
from composer_common.logs import ALERT
from composer_queue.testing import FakeQueue
from composer_rpc.v1 import worker_pb2 as pb
from composer_sdk import TaskContext, Worker, WorkerConfig
from composer_sdk.errors import SdkError
from tests.unit.sdk.fakes import FakeStub, client, granted

PREFIX = "unit"
SHARDS = 2


def message(task_id: str = "t1", attempt: int = 0) -> cq.TaskMessage:
    return cq.TaskMessage(task_id, "r1", attempt)


async def publish(queue: FakeQueue, *messages: cq.TaskMessage) -> None:
    await queue.publish(
        [(cq.task_stream(PREFIX, "q", m.task_id, SHARDS), m.fields()) for m in messages]
    )


async def until(check: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        await asyncio.sleep(0.005)


async def pending(queue: FakeQueue) -> int:
    return sum([len(await queue.pending(s)) for s in cq.queue_streams(PREFIX, "q", SHARDS)])


async def stored(queue: FakeQueue) -> int:
    return sum([await queue.length(s) for s in cq.queue_streams(PREFIX, "q", SHARDS)])


@asynccontextmanager
async def running(
    handler: Callable[[TaskContext, Any], Awaitable[Any]],
    stub: FakeStub,
    queue: FakeQueue,
    *,
    attempts: int = 3,
    lease_ttl: float = 5.0,
    concurrency: int = 16,
    prefetch: int | None = None,
) -> AsyncIterator[Worker]:
    config = WorkerConfig(
        concurrency=concurrency,
        prefetch=prefetch,
        redis_prefix=PREFIX,
        shards=SHARDS,
        read_block_ms=20,
        lease_ttl=lease_ttl,
        drain_seconds=1.0,
        owner="w1",
    )
    worker = Worker(config, queue=queue, coordinator=client(stub, attempts=attempts))
    worker.add_handler("q", handler)
    task = asyncio.create_task(worker.run())
    try:
        yield worker
    finally:
        worker.stop()
        await asyncio.wait_for(task, 5)


async def echo(ctx: TaskContext, input: Any) -> dict[str, Any]:
    return {"got": input, "attempt": ctx.attempt}


async def test_a_message_is_leased_run_reported_and_acknowledged() -> None:
    queue, stub = FakeQueue(), FakeStub()
    async with running(echo, stub, queue) as worker:
        await publish(queue, message("t1", attempt=2))
        await until(lambda: worker.completed == 1, "the task completed")
    [lease] = stub.lease_requests
    assert (lease.task_id, lease.attempt, lease.owner) == ("t1", 2, "w1")
    [report] = stub.report_requests
    assert report.status == pb.TASK_STATUS_COMPLETED
    assert report.output_json == '{"got":{"x":1},"attempt":2}'
    assert await stored(queue) == 0 and await pending(queue) == 0


async def test_a_lease_that_is_not_granted_is_acknowledged_without_running() -> None:
    queue = FakeQueue()
    stub = FakeStub(leases=[pb.AcquireTaskLeaseResponse(granted=False, reason="stale attempt")])
    ran: list[str] = []

    async def handler(ctx: TaskContext, input: Any) -> None:
        ran.append(ctx.task_id)

    async with running(handler, stub, queue) as worker:
        await publish(queue, message())
        await until(lambda: worker.skipped == 1, "the message was skipped")
    assert ran == [] and stub.report_requests == []
    assert await stored(queue) == 0


async def test_a_lost_lease_cancels_the_handler_reports_nothing_and_acknowledges() -> None:
    queue = FakeQueue()
    stub = FakeStub(renewals=[pb.RenewTaskLeaseResponse(ok=False)])
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def forever(ctx: TaskContext, input: Any) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async with running(forever, stub, queue, lease_ttl=0.06):  # renewals every 20 ms
        await publish(queue, message())
        await asyncio.wait_for(cancelled.wait(), 5)
        await until_async(lambda: stored(queue), 0, "the message was acknowledged")
    assert started.is_set() and stub.report_requests == []


async def until_async(read: Callable[[], Awaitable[int]], want: int, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + 5
    while await read() != want:
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        await asyncio.sleep(0.005)


async def test_an_unavailable_coordinator_is_retried_then_the_message_is_left_pending(
    caplog: pytest.LogCaptureFixture,
) -> None:
    queue = FakeQueue()
    stub = FakeStub(reports=[grpc.StatusCode.UNAVAILABLE])
    with caplog.at_level(logging.WARNING, logger="composer.sdk"):
        async with running(echo, stub, queue, attempts=4) as worker:
            await publish(queue, message())
            await until(lambda: worker.abandoned == 1, "the worker gave the message up")
            assert len(stub.report_requests) == 4  # the cap, not forever
            # not acknowledged: it stays pending for the lease-sweeper's reclaim
            assert await pending(queue) == 1
            # ...and the worker goes on serving other messages
            stub.reports = [pb.ReportTaskResultResponse(accepted=True)]
            await publish(queue, message("t2"))
            await until(lambda: worker.completed == 1, "the next task completed")
    assert "left pending for the lease-sweeper" in caplog.text
    assert "attempt 3 of 4" in caplog.text


async def test_a_transient_failure_then_success_is_acknowledged() -> None:
    queue = FakeQueue()
    stub = FakeStub(
        reports=[
            grpc.StatusCode.UNAVAILABLE,
            grpc.StatusCode.DEADLINE_EXCEEDED,
            pb.ReportTaskResultResponse(accepted=True),
        ]
    )
    async with running(echo, stub, queue, attempts=5) as worker:
        await publish(queue, message())
        await until(lambda: worker.completed == 1, "the task completed")
    assert len(stub.report_requests) == 3
    assert await stored(queue) == 0 and worker.abandoned == 0


async def test_an_internal_error_is_not_retried_and_leaves_the_message_pending(
    caplog: pytest.LogCaptureFixture,
) -> None:
    queue = FakeQueue()
    stub = FakeStub(reports=[grpc.StatusCode.INTERNAL])
    with caplog.at_level(logging.ERROR, logger="composer.sdk"):
        async with running(echo, stub, queue, attempts=5) as worker:
            await publish(queue, message())
            await until(lambda: worker.abandoned == 1, "the worker gave the message up")
            assert len(stub.report_requests) == 1
            assert await pending(queue) == 1
    assert "INTERNAL" in caplog.text and "not retried" in caplog.text


async def test_an_unavailable_lease_is_capped_too() -> None:
    queue = FakeQueue()
    stub = FakeStub(leases=[grpc.StatusCode.UNAVAILABLE])
    async with running(echo, stub, queue, attempts=2) as worker:
        await publish(queue, message())
        await until(lambda: worker.abandoned == 1, "the worker gave the message up")
        assert len(stub.lease_requests) == 2 and await pending(queue) == 1


async def test_the_worker_rides_out_a_queue_outage() -> None:
    queue, stub = FakeQueue(), FakeStub()
    async with running(echo, stub, queue) as worker:
        await publish(queue, message("before"))
        await until(lambda: worker.completed == 1, "the first task completed")
        queue.down = True
        failed = queue.refused
        await until(lambda: queue.refused >= failed + 2, "reads failed twice and were retried")
        queue.down = False
        await publish(queue, message("after"))
        await until(lambda: worker.completed == 2, "a task after the outage completed")


async def test_a_malformed_message_is_dropped() -> None:
    queue, stub = FakeQueue(), FakeStub()
    async with running(echo, stub, queue):
        await queue.publish([(cq.stream_name(PREFIX, "q", 0), {"task_id": "t"})])
        await until_async(lambda: stored(queue), 0, "the malformed entry was dropped")
    assert stub.lease_requests == []


async def test_a_worker_frozen_after_its_lease_check_does_not_start_the_handler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The process stops (SIGSTOP, a long GC pause) between the lease check and the
    handler's first line, for longer than the lease TTL: by then the lease may be
    another worker's, so the handler must not start (chaos seed 3654907645)."""
    ttl = 0.1
    create_task = asyncio.create_task

    def frozen_before_the_handler(coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        name = getattr(coro, "__qualname__", "")
        if name.endswith(("run_while_ours", "Handler.invoke")):
            time.sleep(ttl * 1.5)  # the freeze itself, not a wait for something
        return create_task(coro, **kwargs)

    monkeypatch.setattr(asyncio, "create_task", frozen_before_the_handler)
    queue, stub = FakeQueue(), FakeStub()
    ran: list[str] = []

    async def handler(ctx: TaskContext, input: Any) -> None:
        ran.append(ctx.task_id)

    async with running(handler, stub, queue, lease_ttl=ttl):
        await publish(queue, message())
        await until_async(lambda: stored(queue), 0, "the message was acknowledged")
    assert ran == [] and stub.report_requests == []


class SlowReports(FakeStub):
    """Reports wait until ``answer`` is set: a coordinator busy committing."""

    def __init__(self) -> None:
        super().__init__()
        self.answer = asyncio.Event()

    async def ReportTaskResults(self, request: pb.ReportTaskResultsRequest, **kw: Any) -> Any:
        await self.answer.wait()
        return await super().ReportTaskResults(request, **kw)


async def test_a_report_in_flight_does_not_keep_the_next_handler_waiting() -> None:
    queue, stub = FakeQueue(), SlowReports()
    started: list[str] = []

    async def handler(ctx: TaskContext, input: Any) -> dict[str, Any]:
        started.append(ctx.task_id)
        return {}

    await publish(queue, message("t1"), message("t2"))
    async with running(handler, stub, queue, concurrency=1, prefetch=2) as worker:
        # one handler at a time, yet the second runs while the first one's report waits
        await until(lambda: len(started) == 2, "both handlers ran")
        assert worker.completed == 0
        stub.answer.set()
        await until(lambda: worker.completed == 2, "both reports were taken")
    assert await pending(queue) == 0


def test_the_prefetch_holds_at_least_the_running_handlers() -> None:
    with pytest.raises(SdkError, match="prefetch"):
        Worker(WorkerConfig(concurrency=4, prefetch=2))


async def test_a_busy_worker_reads_no_more_entries_than_it_has_free_slots() -> None:
    """An entry read without a free slot would wait unleased, and the lease-sweeper
    would take it for one a dead worker left (and count a delivery)."""
    queue, stub = FakeQueue(), FakeStub()
    release = asyncio.Event()
    started: list[str] = []

    async def busy(ctx: TaskContext, input: Any) -> dict[str, Any]:
        started.append(ctx.task_id)
        await release.wait()
        return {}

    # on both shards (SHARDS=2), so a COUNT per stream would take one of each
    tasks = ["t1", "t2", "t3", "t4", "t5", "t6"]
    assert len({cq.shard_of(t, SHARDS) for t in tasks}) == 2
    await publish(queue, *(message(t) for t in tasks))
    async with running(busy, stub, queue, concurrency=2) as worker:
        await until(lambda: len(started) == 2, "two handlers started")
        assert await pending(queue) == 2  # the two running: nothing read ahead of a slot
        release.set()
        await until(lambda: worker.completed == len(tasks), "every task completed")
    assert await stored(queue) == 0


async def test_an_entry_the_worker_fails_on_is_acknowledged_with_an_alert_and_the_next_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Not the handler: the worker's own code. An attempt number no gRPC message can
    carry (anyone who can write to Redis can add such an entry) makes building the
    lease request raise."""
    queue, stub = FakeQueue(), FakeStub()
    poison = cq.TaskMessage("t-poison", "run-poisoned", 2**40)
    with caplog.at_level(logging.INFO, logger="composer.sdk"):
        async with running(echo, stub, queue, concurrency=1) as worker:
            await publish(queue, poison, message("t-good"))
            await until(lambda: worker.completed == 1, "the good task completed")
            await until_async(lambda: stored(queue), 0, "both entries were acknowledged")
    [alert] = [r for r in caplog.records if r.levelno == ALERT]
    assert "run run-poisoned" in alert.getMessage() and "ValueError" in alert.getMessage()
    assert worker.parked == 1
    assert [r.task_id for r in stub.lease_requests] == ["t-good"]


async def test_an_entry_that_is_no_task_message_does_not_stop_the_next(
    caplog: pytest.LogCaptureFixture,
) -> None:
    queue, stub = FakeQueue(), FakeStub()
    stream = cq.task_stream(PREFIX, "q", "t-good", SHARDS)
    [bad] = await queue.publish([(stream, message("t-bad").fields())])
    queue.poison.add(bad)  # handed out as an entry that is not UTF-8
    async with running(echo, stub, queue, concurrency=1) as worker:
        await publish(queue, message("t-good"))
        await until(lambda: worker.completed == 1, "the good task completed")
        await until_async(lambda: stored(queue), 0, "the bad entry was dropped")
    assert "not UTF-8" in caplog.text


async def test_the_heartbeat_keeps_a_busy_worker_alive_and_runs_out_after_it_stops() -> None:
    queue, stub = FakeQueue(), FakeStub()
    release = asyncio.Event()

    async def long(ctx: TaskContext, input: Any) -> dict[str, Any]:
        await release.wait()
        return {}

    ttl = 0.06
    async with running(long, stub, queue, lease_ttl=ttl, concurrency=1) as worker:
        await publish(queue, message())
        await until(lambda: len(stub.lease_requests) == 1, "the task was leased")
        for _ in range(5):  # a long task: its run lasts several TTLs
            assert await queue.alive(PREFIX, [worker.owner]) == {worker.owner}
            await asyncio.sleep(ttl)
        release.set()
        await until(lambda: worker.completed == 1, "the task completed")
    deadline = asyncio.get_running_loop().time() + 5
    while await queue.alive(PREFIX, [worker.owner]):
        assert asyncio.get_running_loop().time() < deadline, "the heartbeat did not run out"
        await asyncio.sleep(0.01)


class HeldThenReleased(FakeStub):
    """The first lease request waits for ``answer`` and is refused (its attempt was
    held, as a paused run's are); later ones are granted: the attempt released and
    sent again meanwhile."""

    def __init__(self) -> None:
        super().__init__(leases=[pb.AcquireTaskLeaseResponse(granted=False, reason="held")])
        self.answer = asyncio.Event()

    async def AcquireTaskLeases(self, request: pb.AcquireTaskLeasesRequest, **kw: Any) -> Any:
        if not self.lease_requests:
            self.lease_requests.extend(request.items)
            await self.answer.wait()
            return pb.AcquireTaskLeasesResponse(
                items=[self._answer(self.leases, 0) for _ in request.items]
            )
        self.leases = [granted()]
        return await super().AcquireTaskLeases(request, **kw)


async def test_a_second_delivery_while_the_first_is_refused_its_lease_runs_the_attempt() -> None:
    """A paused run's attempt has an entry on the stream; at the resume it is sent again.
    When both deliveries meet in one worker, the second must not be dropped as a
    duplicate while the first's lease is still being asked for: the first is refused,
    and the second is then the only entry left."""
    queue, stub = FakeQueue(), HeldThenReleased()
    ran: list[str] = []

    async def handler(ctx: TaskContext, input: Any) -> dict[str, Any]:
        ran.append(ctx.task_id)
        return {}

    async with running(handler, stub, queue) as worker:
        await publish(queue, message("t1"))
        await until(lambda: len(stub.lease_requests) == 1, "the first lease was asked for")
        await publish(queue, message("t1"))  # the same attempt, sent again
        # the worker has read both (pending in its consumer group) before the answer
        await until_async(lambda: pending(queue), 2, "both entries read")
        stub.answer.set()  # the first is refused: held
        await until(lambda: worker.completed == 1, "the second delivery ran the attempt")
    assert ran == ["t1"] and worker.skipped == 1
    assert await stored(queue) == 0
