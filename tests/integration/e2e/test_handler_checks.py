"""Handlers run only what they were built for (docs/architecture.md §6.1).

Found by an attack: the built-in workers chose the handler by stream and never
checked the leased task. A forged entry of an HTTP task in its retry backoff, added
to the python stream, was leased and run as Python (``invalid_spec``: the run
FAILED in 5 s); a forged entry of a PYTHON task in a 300 s backoff ran it 5 s later
(the lease granted an attempt before it was due); a TASK node on queue ``python``
ran its spec's ``code``. Now the lease refuses an entry of another queue's task, of
a node type the handler does not run, or ahead of its attempt's backoff: the worker
acknowledges it away with an ALERT, nothing runs, the run and the task are as they
were, and the attempt runs when it is due, from its own entry.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import AsyncIterator

import grpc
import grpc.aio
import pytest
from aiohttp import web

import composer_queue as cq
import composer_repo as repo
from composer_common.logs import ALERT
from composer_core.model import RunStatus, TaskState, parse_definition
from composer_engine import ValidDefinition, Workflows
from composer_rpc.v1 import worker_pb2 as pb
from composer_rpc.v1.worker_pb2_grpc import WorkerServiceStub
from composer_sdk import Worker
from composer_workers.handlers import python_handler
from tests.integration.e2e.conftest import TOKEN, Stack
from tests.integration.e2e.test_runs import RawWorker, one_task
from tests.integration.waits import until

#: A retry's backoff: long enough for a worker to start and meet the forged entry
#: before the attempt is due, short enough to wait for it to run when due.
BACKOFF = 6.0
RETRY = {"max_attempts": 2, "initial_seconds": BACKOFF}
RETURNS = "def main(input):\n    return {'ran': True}\n"


@pytest.fixture
async def server(unused_tcp_port: int) -> AsyncIterator[tuple[str, list[float]]]:
    """An HTTP endpoint that answers 200; its URL and when each request came."""
    calls: list[float] = []

    async def ok(request: web.Request) -> web.Response:
        calls.append(dt.datetime.now(dt.UTC).timestamp())
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/ok", ok)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", unused_tcp_port).start()
    try:
        yield f"http://127.0.0.1:{unused_tcp_port}/ok", calls
    finally:
        await runner.cleanup()


async def fail_first_attempt(stack: Stack, run_id: str, node_id: str) -> repo.TaskRecord:
    """Fail the node's attempt 0 by hand, over gRPC, before any worker serves its queue:
    attempt 1 then waits out its backoff. Returns the task as it is then."""
    task = (await stack.tasks_of(run_id))[node_id]
    async with grpc.aio.insecure_channel(stack.grpc_target) as channel:
        raw = RawWorker(WorkerServiceStub(channel), run_id, task.task_id, node_id=node_id)
        assert (await raw.lease("by-hand")).granted
        assert await raw.report("by-hand", error="the first attempt fails")
    task = (await stack.tasks_of(run_id))[node_id]
    assert (task.state, task.attempt) == (TaskState.PENDING, 1)
    return task


async def forge(stack: Stack, queue: str, run_id: str, task_id: str, attempt: int) -> str:
    """XADD an entry naming the attempt to ``queue``'s stream, as anyone who can write to
    Redis can; the stream it went to."""
    stream = cq.task_stream(stack.prefix, queue, task_id, cq.DEFAULT_SHARDS)
    fields = {"task_id": task_id, "run_id": run_id, "attempt": str(attempt)}
    await stack.redis.publish([(stream, fields)])
    return stream


async def retry_at(stack: Stack, run_id: str) -> dt.datetime:
    """When the run's retry is due, as its history recorded it."""
    async with repo.connection(stack.pool) as conn:
        history = await repo.run_history(conn, run_id)
    [scheduled] = [h for h in history if h.kind == "task.retry_scheduled"]
    assert isinstance(scheduled.detail, dict)
    return dt.datetime.fromisoformat(scheduled.detail["retry_at"])


async def lease_times(stack: Stack, run_id: str) -> dict[tuple[str, int], dt.datetime]:
    async with repo.connection(stack.pool) as conn:
        return await repo.lease_times(conn, run_id)


async def assert_untouched(stack: Stack, run_id: str, before: repo.TaskRecord) -> None:
    """The run still waits on the task, which is as it was: no lease, no new attempt."""
    async with repo.connection(stack.pool) as conn:
        assert (await repo.get_run(conn, run_id)).status is RunStatus.RUNNING
    now = (await stack.tasks_of(run_id))[before.node_id]
    # still waiting for a worker (QUEUED once its dispatch was published), on its attempt
    assert now.state in (TaskState.PENDING, TaskState.QUEUED)
    assert (now.attempt, now.error, now.lease_owner) == (before.attempt, before.error, None)
    assert (before.task_id, before.attempt) not in await lease_times(stack, run_id)


def alerts_about(caplog: pytest.LogCaptureFixture, task_id: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == ALERT and r.name == "composer.sdk" and task_id in r.getMessage()
    ]


async def dropped(stack: Stack, worker: Worker, stream: str, count: int = 1) -> None:
    """Wait until the worker has refused ``count`` entries and acknowledged them away."""

    async def gone() -> bool:
        return worker.misrouted == count and await stack.redis.length(stream) == 0

    await until(gone, what=f"{count} forged entries acknowledged away from {stream}")


async def test_a_forged_entry_of_an_http_task_in_backoff_is_dropped_by_the_python_worker(
    stack: Stack, server: tuple[str, list[float]], caplog: pytest.LogCaptureFixture
) -> None:
    url, calls = server
    await stack.deploy(
        {
            "id": "fetch-later",
            "nodes": [{"id": "fetch", "type": "HTTP", "spec": {"url": url}, "retry": RETRY}],
        }
    )
    run_id = (await stack.engine.start("fetch-later")).run_id
    task = await fail_first_attempt(stack, run_id, "fetch")
    stream = await forge(stack, "python", run_id, task.task_id, 1)

    with caplog.at_level(logging.INFO, logger="composer.sdk"):
        worker = await stack.builtin_workers()
        await dropped(stack, worker, stream)
    await assert_untouched(stack, run_id, task)
    assert calls == []
    [alert] = alerts_about(caplog, task.task_id)
    assert "is on queue 'http', not on 'python'" in alert and "forged" in alert

    # the attempt still runs when it is due, from its own entry on the http stream
    run = await stack.wait_run(run_id, timeout=BACKOFF + 15)
    assert run.status is RunStatus.SUCCEEDED, run.error
    assert len(calls) == 1
    leased = (await lease_times(stack, run_id))[(task.task_id, 1)]
    assert leased >= await retry_at(stack, run_id)


async def test_a_forged_entry_of_a_python_task_in_backoff_does_not_run_it_early(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    await stack.deploy(
        {
            "id": "compute-later",
            "nodes": [{"id": "calc", "type": "PYTHON", "spec": {"code": RETURNS}, "retry": RETRY}],
        }
    )
    run_id = (await stack.engine.start("compute-later")).run_id
    task = await fail_first_attempt(stack, run_id, "calc")
    async with grpc.aio.insecure_channel(stack.grpc_target) as channel:
        stub = WorkerServiceStub(channel)
        early = pb.AcquireTaskLeaseRequest(
            task_id=task.task_id, run_id=run_id, attempt=1, owner="early", ttl_seconds=30
        )
        md = (("authorization", f"Bearer {TOKEN}"),)
        # a worker older than the queue check hears a plain refusal, which it acknowledges
        old = await stub.AcquireTaskLease(early, metadata=md)
        assert not old.granted and "attempt 1 is not due until" in old.reason
        # one that says its queue and node types is told the entry is none of its attempt's
        early.queue, early.node_types[:] = "python", ["PYTHON"]
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.AcquireTaskLease(early, metadata=md)
        assert refused.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    await assert_untouched(stack, run_id, task)
    stream = await forge(stack, "python", run_id, task.task_id, 1)

    with caplog.at_level(logging.INFO, logger="composer.sdk"):
        worker = await stack.builtin_workers()
        # the forged entry, and attempt 0's own (stale now: skipped quietly), both go
        await dropped(stack, worker, stream)
    await assert_untouched(stack, run_id, task)
    assert worker.skipped == 1 and worker.completed == 0
    [alert] = alerts_about(caplog, task.task_id)
    assert "attempt 1 is not due until" in alert and "backoff" in alert

    run = await stack.wait_run(run_id, timeout=BACKOFF + 15)
    assert run.status is RunStatus.SUCCEEDED, run.error
    assert (await stack.tasks_of(run_id))["calc"].output == {"ran": True}
    leased = (await lease_times(stack, run_id))[(task.task_id, 1)]
    assert leased >= await retry_at(stack, run_id)


async def test_an_entry_of_another_queues_task_is_dropped_even_when_it_is_due(
    stack: Stack, server: tuple[str, list[float]], caplog: pytest.LogCaptureFixture
) -> None:
    url, calls = server
    await stack.deploy(
        {"id": "fetch-now", "nodes": [{"id": "fetch", "type": "HTTP", "spec": {"url": url}}]}
    )
    run_id = (await stack.engine.start("fetch-now")).run_id
    task = (await stack.tasks_of(run_id))["fetch"]  # due, its entry on the http stream
    stream = await forge(stack, "python", run_id, task.task_id, 0)

    with caplog.at_level(logging.INFO, logger="composer.sdk"):
        worker = stack.worker({"python": python_handler(256 * 1024 * 1024)})  # python only
        await dropped(stack, worker, stream)
    await assert_untouched(stack, run_id, task)
    assert calls == [] and worker.completed == 0
    assert alerts_about(caplog, task.task_id)

    await stack.builtin_workers()  # now the http queue is served too
    run = await stack.wait_run(run_id)
    assert run.status is RunStatus.SUCCEEDED, run.error
    assert len(calls) == 1


async def test_a_task_node_stored_on_the_python_queue_is_not_run_as_python(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    # A version stored before the python queue was reserved (the API now refuses it).
    document = {
        "id": "legacy-code",
        "nodes": [
            {"id": "run", "type": "TASK", "queue": "python", "spec": {"code": "{{input.code}}"}}
        ],
    }
    spec = parse_definition(document)
    await Workflows(stack.pool).create(ValidDefinition(spec, document), deploy=True)
    run_id = (await stack.engine.start("legacy-code", input={"code": RETURNS})).run_id
    task = (await stack.tasks_of(run_id))["run"]
    stream = cq.task_stream(stack.prefix, "python", task.task_id, cq.DEFAULT_SHARDS)

    with caplog.at_level(logging.INFO, logger="composer.sdk"):
        worker = await stack.builtin_workers()
        await dropped(stack, worker, stream)
    await assert_untouched(stack, run_id, task)
    assert worker.completed == 0 and worker.failed == 0
    [alert] = alerts_about(caplog, task.task_id)
    assert "is of node type TASK, and the worker's handler for queue 'python' runs PYTHON" in alert
    assert "move the node to a queue of its own" in alert


async def test_a_lease_request_naming_a_node_type_no_worker_runs_is_invalid(
    stack: Stack,
) -> None:
    await stack.deploy(one_task("a", queue="work"))
    run_id = (await stack.engine.start("one-a")).run_id
    task = (await stack.tasks_of(run_id))["a"]
    request = pb.AcquireTaskLeaseRequest(
        task_id=task.task_id,
        run_id=run_id,
        attempt=0,
        owner="w",
        ttl_seconds=30,
        queue="work",
        node_types=["TASK", "WAIT"],
    )
    async with grpc.aio.insecure_channel(stack.grpc_target) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as bad:
            await WorkerServiceStub(channel).AcquireTaskLease(
                request, metadata=(("authorization", f"Bearer {TOKEN}"),)
            )
    assert bad.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "'WAIT' is not a node type a worker runs (HTTP, PYTHON, TASK)" in (
        bad.value.details() or ""
    )
    await assert_untouched(stack, run_id, task)
