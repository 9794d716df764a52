"""A report's answer carries the next task (docs/architecture.md §3.2): a worker that
offers to take one (``take_next``) is leased, in its report's own transaction, a task
that report dispatched on its handler's queue, and that task never goes through the
stream. What is not for it (another queue, a node type its handler does not run, an
input too large for a batched answer) is published as before."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc.aio
import pytest

import composer_queue as cq
import composer_repo as repo
from composer_core.model import RunStatus, TaskState
from composer_rpc.v1 import worker_pb2 as pb
from composer_rpc.v1.worker_pb2_grpc import WorkerServiceStub
from composer_sdk import TaskContext
from tests.integration.e2e.conftest import TOKEN, Stack
from tests.integration.e2e.test_group_commit import leased_tasks
from tests.integration.e2e.test_runs import add_one, chain

MD = (("authorization", f"Bearer {TOKEN}"),)


def two_steps(second: dict[str, Any]) -> dict[str, Any]:
    """``a`` on queue manual (nobody serves it here), then ``second``."""
    return {
        "id": "two-steps",
        "nodes": [{"id": "a", "type": "TASK", "queue": "manual", "spec": {}}, second],
        "edges": [{"from": "a", "to": second["id"]}],
    }


async def entries(stack: Stack, queue: str) -> int:
    """The entries on every stream of ``queue`` (all shards, all priority bands)."""
    total = 0
    for stream in cq.queue_streams(stack.prefix, queue, cq.DEFAULT_SHARDS):
        for _, name in cq.band_streams(stream):
            total += await stack.redis.length(name)
    return total


async def dispatch_rows(stack: Stack, run_id: str) -> int:
    async with repo.connection(stack.pool) as conn:
        return int(
            await conn.fetchval(
                "SELECT count(*) FROM outbox WHERE run_id = $1 AND kind = 'dispatch'", run_id
            )
        )


async def outbox_ids_taken(stack: Stack) -> int:
    """How many outbox ids were ever handed out: an outbox row written moves it."""
    async with repo.connection(stack.pool) as conn:
        return int(
            await conn.fetchval(
                "SELECT coalesce(pg_sequence_last_value(pg_get_serial_sequence('outbox', 'id')), 0)"
            )
        )


async def no_dispatch_rows(stack: Stack, run_id: str, timeout: float = 5.0) -> None:
    """Wait until the run has no dispatch row left in the outbox."""
    deadline = time.monotonic() + timeout
    while (left := await dispatch_rows(stack, run_id)) > 0:
        assert time.monotonic() < deadline, f"{left} dispatch row(s) of {run_id} still there"
        await asyncio.sleep(0.02)


async def report_a(
    stack: Stack,
    stub: Any,
    run_id: str,
    *,
    queue: str = "manual",
    node_types: list[str] | None = None,
) -> pb.ReportTaskResultResponse:
    """Lease ``a`` and report it done, offering to take a task of ``queue``."""
    [(task_id, token)] = await leased_tasks(stack, stub, [run_id], "a")
    request = pb.ReportTaskResultRequest(
        run_id=run_id,
        task_id=task_id,
        node_id="a",
        attempt=0,
        owner="w",
        lease_token=token,
        status=pb.TASK_STATUS_COMPLETED,
        output_json='{"big": "' + "x" * 20_000 + '"}',
        take_next=pb.TakeNext(queue=queue, node_types=node_types or ["TASK"], ttl_seconds=30),
    )
    reply = await stub.ReportTaskResults(pb.ReportTaskResultsRequest(items=[request]), metadata=MD)
    answer: pb.ReportTaskResultResponse = reply.items[0]
    assert len(reply.items) == 1 and answer.accepted, reply
    return answer


async def test_the_next_step_comes_leased_with_the_report_and_never_goes_through_the_stream(
    stack: Stack,
) -> None:
    await stack.deploy(two_steps({"id": "b", "type": "TASK", "queue": "manual", "spec": {"n": 1}}))
    run_id = (await stack.engine.start("two-steps")).run_id
    async with grpc.aio.insecure_channel(stack.grpc_target) as channel:
        stub = WorkerServiceStub(channel)
        before = await entries(stack, "manual")  # a's entry
        ids = await outbox_ids_taken(stack)
        answer = await report_a(stack, stub, run_id)
        assert answer.HasField("next")
        task_b = (await stack.tasks_of(run_id))["b"]
        assert answer.next.message["task_id"] == task_b.task_id
        assert answer.next.message["run_id"] == run_id
        assert answer.next.message["attempt"] == "0"
        lease = answer.next.lease
        assert lease.granted and lease.node_id == "b" and lease.node_type == "TASK"
        assert lease.input_json == '{"n":1}' and lease.lease_token
        # leased to the reporter in the report's transaction: running, no entry written,
        # and no outbox row ever written for it
        assert task_b.state is TaskState.RUNNING
        assert await entries(stack, "manual") == before
        assert await outbox_ids_taken(stack) == ids
        assert await dispatch_rows(stack, run_id) == 0
        # its lease is a lease like any other: the report with its token counts
        done = await stub.ReportTaskResult(
            pb.ReportTaskResultRequest(
                run_id=run_id,
                task_id=task_b.task_id,
                node_id="b",
                attempt=0,
                owner="w",
                lease_token=lease.lease_token,
                status=pb.TASK_STATUS_COMPLETED,
                output_json="{}",
            ),
            metadata=MD,
        )
    assert done.accepted and not done.HasField("next")
    assert (await stack.wait_run(run_id)).status is RunStatus.SUCCEEDED
    async with repo.connection(stack.pool) as conn:
        history = await repo.run_history(conn, run_id)
    leased = [h for h in history if h.kind == "task.leased" and h.node_id == "b"]
    assert [h.actor for h in leased] == ["w"]


async def test_the_next_task_is_stored_running_under_the_lease_its_answer_carries(
    stack: Stack,
) -> None:
    """Leased as its row is inserted (engine/_lease_ahead.py): the row holds the lease
    the answer names — the worker's, its token and expiry — started at the report's
    clock, and its history says it was scheduled, then leased."""
    await stack.deploy(two_steps({"id": "b", "type": "TASK", "queue": "manual", "spec": {}}))
    run_id = (await stack.engine.start("two-steps")).run_id
    async with grpc.aio.insecure_channel(stack.grpc_target) as channel:
        answer = await report_a(stack, WorkerServiceStub(channel), run_id)
    lease = answer.next.lease
    assert lease.granted
    async with repo.connection(stack.pool) as conn:
        row = await conn.fetchrow(
            "SELECT b.state, b.lease_owner, b.lease_token, b.lease_expires_at, b.started_at,"
            "       b.dispatched_at, a.finished_at"
            "  FROM task_instances b JOIN task_instances a USING (run_id)"
            " WHERE b.run_id = $1 AND b.node_id = 'b' AND a.node_id = 'a'",
            run_id,
        )
        history = await repo.run_history(conn, run_id)
    assert row is not None
    assert row["state"] == "RUNNING" and row["lease_owner"] == "w"
    assert row["lease_token"] == lease.lease_token
    assert row["lease_expires_at"].timestamp() == pytest.approx(lease.lease_expires_at, abs=1e-3)
    # leased for the 30 s the offer asked, from the report's clock
    assert (row["lease_expires_at"] - row["finished_at"]).total_seconds() == pytest.approx(30)
    assert row["started_at"] == row["dispatched_at"] == row["finished_at"]
    kinds = [h.kind for h in history if h.node_id == "b"]
    assert kinds[-1] == "task.leased" and len(kinds) == 2, kinds


async def test_a_next_task_that_goes_through_the_admission_step_comes_leased_too(
    stack: Stack,
) -> None:
    """A node with a concurrency key is admitted in the transaction first (its row is
    read then, after its insert): its task is leased by the lease statement, and the
    worker hears the same answer."""
    node = {
        "id": "b",
        "type": "TASK",
        "queue": "manual",
        "spec": {"n": 2},
        "concurrency": {"key": "next-admitted", "max": 1, "scope": "global"},
    }
    await stack.deploy({**two_steps(node), "id": "two-steps-limited"})
    run_id = (await stack.engine.start("two-steps-limited")).run_id
    async with grpc.aio.insecure_channel(stack.grpc_target) as channel:
        answer = await report_a(stack, WorkerServiceStub(channel), run_id)
    assert answer.HasField("next")
    lease = answer.next.lease
    assert lease.granted and lease.node_id == "b" and lease.input_json == '{"n":2}'
    task_b = (await stack.tasks_of(run_id))["b"]
    assert task_b.state is TaskState.RUNNING
    assert answer.next.message["task_id"] == task_b.task_id
    async with repo.connection(stack.pool) as conn:
        token = await conn.fetchval(
            "SELECT lease_token FROM task_instances WHERE run_id = $1 AND node_id = 'b'", run_id
        )
    assert token == lease.lease_token


async def test_the_next_task_of_a_run_with_a_priority_carries_its_band(stack: Stack) -> None:
    """The answer carries the message the entry would have been, its run's band too,
    though no outbox row (which the band is read with) was written for it."""
    spec = two_steps({"id": "b", "type": "TASK", "queue": "manual", "spec": {}})
    await stack.deploy({**spec, "id": "two-steps-first", "priority": 2})
    run_id = (await stack.engine.start("two-steps-first")).run_id
    async with grpc.aio.insecure_channel(stack.grpc_target) as channel:
        answer = await report_a(stack, WorkerServiceStub(channel), run_id)
    assert answer.HasField("next") and answer.next.lease.granted
    assert answer.next.message["priority"] == "2"


async def test_a_next_task_on_another_queue_is_published_not_leased(stack: Stack) -> None:
    await stack.deploy(two_steps({"id": "b", "type": "TASK", "queue": "other", "spec": {}}))
    run_id = (await stack.engine.start("two-steps")).run_id
    async with grpc.aio.insecure_channel(stack.grpc_target) as channel:
        answer = await report_a(stack, WorkerServiceStub(channel), run_id)
    assert not answer.HasField("next")
    assert (await stack.tasks_of(run_id))["b"].state in (TaskState.PENDING, TaskState.QUEUED)
    assert await entries(stack, "other") == 1


async def test_a_next_task_of_a_node_type_the_handler_does_not_run_is_published(
    stack: Stack,
) -> None:
    await stack.deploy(two_steps({"id": "b", "type": "TASK", "queue": "manual", "spec": {}}))
    run_id = (await stack.engine.start("two-steps")).run_id
    async with grpc.aio.insecure_channel(stack.grpc_target) as channel:
        answer = await report_a(stack, WorkerServiceStub(channel), run_id, node_types=["HTTP"])
    assert not answer.HasField("next")
    assert (await stack.tasks_of(run_id))["b"].state in (TaskState.PENDING, TaskState.QUEUED)
    # a's entry and b's
    assert await entries(stack, "manual") == 2


async def test_a_next_task_whose_input_is_too_large_for_an_answer_is_published(
    stack: Stack,
) -> None:
    # b's input is a's 20 KB output: over the 16 KiB a report's answer may carry per task
    await stack.deploy(
        two_steps(
            {"id": "b", "type": "TASK", "queue": "manual", "spec": {"x": "{{tasks.a.output.big}}"}}
        )
    )
    run_id = (await stack.engine.start("two-steps")).run_id
    async with grpc.aio.insecure_channel(stack.grpc_target) as channel:
        answer = await report_a(stack, WorkerServiceStub(channel), run_id)
    assert not answer.HasField("next")
    task_b = (await stack.tasks_of(run_id))["b"]
    assert task_b.state in (TaskState.PENDING, TaskState.QUEUED)
    assert await entries(stack, "manual") == 2


async def test_an_sdk_worker_runs_a_chain_on_the_tasks_its_reports_bring(stack: Stack) -> None:
    seen: list[str] = []

    async def step(ctx: TaskContext, input: dict[str, Any]) -> dict[str, Any]:
        seen.append(ctx.node_id)
        return await add_one(ctx, input)

    await stack.deploy(chain("a", "b", "c", "d", output={"n": "{{tasks.d.output.n}}"}))
    worker = stack.worker({"work": step})
    run_id = (await stack.engine.start("chain-4", input={"n": 0})).run_id
    run = await stack.wait_run(run_id)
    assert run.status is RunStatus.SUCCEEDED and run.output == {"n": 4}
    assert seen == ["a", "b", "c", "d"]
    # a came through the stream; b, c and d each with the report of the step before
    assert worker.taken_next == 3 and worker.completed == 4


async def test_a_worker_that_does_not_offer_reads_every_step_from_the_stream(
    stack: Stack,
) -> None:
    await stack.deploy(chain("a", "b", "c", output={"n": "{{tasks.c.output.n}}"}))
    worker = stack.worker({"work": add_one}, take_next=False)
    run_id = (await stack.engine.start("chain-3", input={"n": 0})).run_id
    run = await stack.wait_run(run_id)
    assert run.status is RunStatus.SUCCEEDED and run.output == {"n": 3}
    assert worker.taken_next == 0 and worker.completed == 3


async def test_the_run_handed_a_finished_runs_slot_starts_in_its_transaction(
    stack: Stack,
) -> None:
    # one run at a time: the second waits in line until the first's report ends it
    await stack.deploy(
        {
            "id": "one-at-a-time",
            "concurrency": {"max_runs": 1},
            "nodes": [{"id": "a", "type": "TASK", "queue": "manual", "spec": {}}],
        }
    )
    first = (await stack.engine.start("one-at-a-time")).run_id
    second = await stack.engine.start("one-at-a-time")
    assert second.status is RunStatus.PENDING
    async with grpc.aio.insecure_channel(stack.grpc_target) as channel:
        before = await entries(stack, "manual")  # the first run's entry
        answer = await report_a(stack, WorkerServiceStub(channel), first)
    # started in the report's transaction: no start sent to it as an event between
    # runs, its history names the run whose end handed it the slot
    async with repo.connection(stack.pool) as conn:
        assert (await repo.get_run(conn, second.run_id)).status is RunStatus.RUNNING
        events = await conn.fetchval(
            "SELECT count(*) FROM outbox WHERE run_id = $1 AND kind = 'run_event'", second.run_id
        )
        history = await repo.run_history(conn, second.run_id)
    assert events == 0
    started = [h for h in history if h.kind == "run.started"]
    assert [h.actor for h in started] == [f"run {first}"]
    # its first task is another run's: published to the stream, where it waits its
    # turn by priority with every other run's, not handed to the reporter's chain
    assert not answer.HasField("next")
    await no_dispatch_rows(stack, second.run_id)
    assert await entries(stack, "manual") == before + 1
    assert (await stack.tasks_of(second.run_id))["a"].state is not TaskState.RUNNING
