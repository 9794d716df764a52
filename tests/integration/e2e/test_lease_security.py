"""Leases bound to the server (docs/architecture.md §6.1): what a worker runs comes from
the database, a lease counts only with its token, and a worker token serves its queues.

Whoever can write to Redis can add a stream entry, and whoever can read it sees every
worker's name (XINFO CONSUMERS): neither may run, renew or finish a task.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio
import pytest

import composer_queue as cq
from composer_coordinator.server import start_server
from composer_core.model import RunStatus, TaskState
from composer_rpc.v1 import worker_pb2 as pb
from composer_rpc.v1.worker_pb2_grpc import WorkerServiceStub
from composer_sdk import TaskContext
from tests.integration.e2e.conftest import TOKEN, Stack, eventually
from tests.integration.e2e.test_runs import RawWorker, one_task

#: A worker token that covers the queue "team-a" only.
TEAM_A = "team-a-token"


@pytest.fixture
async def scoped(stack: Stack) -> AsyncIterator[str]:
    """A second coordinator on the stack's engine that knows TEAM_A, cuts leases at 5 s;
    its address."""
    server, port = await start_server(
        stack.engine,
        address="127.0.0.1:0",
        tokens=f"{TOKEN}:*,{TEAM_A}:team-a",  # with scoped tokens, every queue is explicit
        max_lease_seconds=5,
    )
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(0)


async def test_a_forged_stream_entry_runs_nothing_but_the_task_on_its_stored_input(
    stack: Stack,
) -> None:
    await stack.deploy(one_task("a", queue="guarded", spec={"n": "{{input.n}}"}))
    started = await stack.engine.start("one-a", input={"n": 1})  # its entry is published
    task = (await stack.tasks_of(started.run_id))["a"]
    stream = cq.task_stream(stack.prefix, "guarded", task.task_id, cq.DEFAULT_SHARDS)
    forged = [
        # the real attempt with a forged input and node, as entries carried them before
        {
            "task_id": task.task_id,
            "run_id": started.run_id,
            "attempt": "0",
            "input": '{"n": 666, "code": "import os; os.system(\\"rm -rf /\\")"}',
            "node_id": "evil",
            "timeout_seconds": "99999",
        },
        # an attempt that does not exist, and a task that does not exist
        {"task_id": task.task_id, "run_id": started.run_id, "attempt": "7"},
        {"task_id": str(uuid.uuid4()), "run_id": started.run_id, "attempt": "0"},
    ]
    await stack.redis.publish([(stream, fields) for fields in forged])
    seen: list[tuple[str, Any, float | None]] = []

    async def record(ctx: TaskContext, input: dict[str, Any]) -> dict[str, Any]:
        seen.append((ctx.node_id, input, ctx.timeout))
        return {"n": input["n"]}

    worker = stack.worker({"guarded": record})
    run = await stack.wait_run(started.run_id)
    await eventually(lambda: worker.skipped >= 3, what="the three other entries skipped")
    assert run.status is RunStatus.SUCCEEDED
    assert (await stack.tasks_of(started.run_id))["a"].output == {"n": 1}
    assert seen == [("a", {"n": 1}, 300.0)]  # once, on the stored input, the node's timeout


async def test_a_copied_owner_name_can_neither_renew_nor_report(stack: Stack) -> None:
    await stack.deploy(one_task("a", queue="manual", spec={"n": "{{input.n}}"}))
    started = await stack.engine.start("one-a", input={"n": 1})
    task = (await stack.tasks_of(started.run_id))["a"]
    async with grpc.aio.insecure_channel(stack.grpc_target) as channel:
        worker = RawWorker(WorkerServiceStub(channel), started.run_id, task.task_id)
        thief = RawWorker(WorkerServiceStub(channel), started.run_id, task.task_id)
        granted = await worker.lease("worker-1", claim="c-1")
        assert granted.granted and len(granted.lease_token) >= 32
        # the same request sent again (its answer lost) gets the same lease back...
        again = await worker.lease("worker-1", claim="c-1")
        assert again.granted and again.lease_token == granted.lease_token
        # ...but the owner's name, read from XINFO CONSUMERS, gets nothing
        assert not (await thief.lease("worker-1", claim="c-2")).granted
        assert not (await thief.lease("worker-1", claim="")).granted
        assert not (await thief.renew("worker-1", token="guess")).ok
        assert not await thief.report("worker-1", output='{"n": 666}', token="guess")
        assert not await thief.report("worker-1", token="ключ")  # any text: just not the token
        assert (await stack.tasks_of(started.run_id))["a"].state is TaskState.RUNNING
        assert (await worker.renew("worker-1")).ok
        assert await worker.report("worker-1", output='{"n": 1}')
    assert (await stack.wait_run(started.run_id)).status is RunStatus.SUCCEEDED
    assert (await stack.tasks_of(started.run_id))["a"].output == {"n": 1}


async def test_a_token_for_another_queue_is_refused(stack: Stack, scoped: str) -> None:
    await stack.deploy(one_task("a", queue="team-a"))
    await stack.deploy(one_task("b", queue="team-b"))
    run_a = (await stack.engine.start("one-a")).run_id
    run_b = (await stack.engine.start("one-b")).run_id
    task_a = (await stack.tasks_of(run_a))["a"].task_id
    task_b = (await stack.tasks_of(run_b))["b"].task_id
    async with grpc.aio.insecure_channel(scoped) as channel:
        stub = WorkerServiceStub(channel)
        team_a = RawWorker(stub, run_b, task_b, token=TEAM_A, node_id="b")
        with pytest.raises(grpc.aio.AioRpcError) as denied:
            await team_a.lease("a-worker")
        assert denied.value.code() is grpc.StatusCode.PERMISSION_DENIED
        assert "does not cover queue 'team-b'" in (denied.value.details() or "")
        # in a batched call the one item is refused, the other granted
        batch = await stub.AcquireTaskLeases(
            pb.AcquireTaskLeasesRequest(
                items=[
                    pb.AcquireTaskLeaseRequest(
                        run_id=r, task_id=t, attempt=0, owner="a-worker", ttl_seconds=60
                    )
                    for r, t in ((run_b, task_b), (run_a, task_a))
                ]
            ),
            metadata=(("authorization", f"Bearer {TEAM_A}"),),
        )
        refused, granted = batch.items
        assert refused.problem.code == "PERMISSION_DENIED" and not refused.granted
        assert granted.granted and granted.ttl_seconds == 5  # cut to the coordinator's maximum
        # team b's worker (the all-queues token) holds b; team a, given its token, still
        # can neither renew nor finish it
        team_b = RawWorker(stub, run_b, task_b, node_id="b")
        assert (await team_b.lease("b-worker")).granted
        stolen = team_b.tokens["b-worker"]
        assert not (await team_a.renew("b-worker", token=stolen)).ok
        with pytest.raises(grpc.aio.AioRpcError) as denied_report:
            await team_a.report("b-worker", token=stolen)
        assert denied_report.value.code() is grpc.StatusCode.PERMISSION_DENIED
        assert (await stack.tasks_of(run_b))["b"].state is TaskState.RUNNING
        assert await team_b.report("b-worker")
    assert (await stack.wait_run(run_b)).status is RunStatus.SUCCEEDED


async def test_a_worker_whose_token_does_not_cover_its_queue_runs_nothing_and_says_why(
    stack: Stack, scoped: str, caplog: pytest.LogCaptureFixture
) -> None:
    await stack.deploy(one_task("b", queue="team-b"))
    run_b = (await stack.engine.start("one-b")).run_id
    ran: list[str] = []

    async def handler(ctx: TaskContext, input: Any) -> dict[str, Any]:
        ran.append(ctx.task_id)
        return {}

    with caplog.at_level(logging.ERROR, logger="composer.sdk"):
        worker = stack.worker({"team-b": handler}, token=TEAM_A, coordinator=scoped)
        await eventually(lambda: worker.skipped >= 1, what="the entry was refused")
    assert ran == []
    assert any("does not cover queue 'team-b'" in r.getMessage() for r in caplog.records)
    assert (await stack.tasks_of(run_b))["b"].state is TaskState.QUEUED
    # the same queue served with a token that covers it runs the task
    worker.stop()
    await asyncio.wait_for(stack.tasks[-1], 10)
    stack.worker({"team-b": handler})
    await stack.engine.redispatch(run_b, (await stack.tasks_of(run_b))["b"].task_id, 0)
    assert (await stack.wait_run(run_b)).status is RunStatus.SUCCEEDED
    assert len(ran) == 1


async def test_a_lease_longer_than_the_maximum_is_cut(stack: Stack, scoped: str) -> None:
    await stack.deploy(one_task("a", queue="team-a"))
    run_id = (await stack.engine.start("one-a")).run_id
    task = (await stack.tasks_of(run_id))["a"]
    async with grpc.aio.insecure_channel(scoped) as channel:
        raw = RawWorker(WorkerServiceStub(channel), run_id, task.task_id, token=TEAM_A)
        lease = await raw.lease("w", ttl=3600)
    assert lease.granted and lease.ttl_seconds == 5
    expires = dt.datetime.fromtimestamp(lease.lease_expires_at, dt.UTC)
    assert expires - dt.datetime.now(dt.UTC) < dt.timedelta(seconds=6)
