"""The worker SDK conformance suite: ONE list of scenarios, each run against every SDK
(the ``sdk`` fixture: python, typescript) as worker processes on a real stack.

What a user relies on, whatever the language of their worker: a task's output is
its handler's return value; a task of any priority band is served; a thrown error is retried by the node's policy, a
PermanentError fails the node at once with its code; a long task keeps its lease;
a worker killed mid-task has its attempt retried elsewhere; an output over the limit
fails for good, before it is sent; a lost lease stops the handler and reports
nothing; a token for another queue runs nothing; SIGTERM lets the task in flight
finish and the worker shows STOPPED; what the handler logs is kept with its attempt;
the handler sees who started the run, and a key stable across attempts; a chain of
steps runs on the tasks its reports bring (COMPOSER_WORKER_TAKE_NEXT=false: every step
from the stream).
"""

from __future__ import annotations

import itertools
import signal
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import grpc.aio
import pytest

import composer_repo as repo
from composer_common.caller import Caller
from composer_coordinator.server import ServerTls, start_server
from composer_core.model import RunStatus, TaskState
from composer_engine import Engine
from composer_rpc.protocol import PROTOCOL_VERSION
from composer_rpc.v1 import worker_pb2 as pb
from composer_rpc.v1.worker_pb2_grpc import (
    WorkerServiceServicer,
    add_WorkerServiceServicer_to_server,
)
from composer_sdk._routing import route
from tests.conformance.conftest import Conformance
from tests.integration.e2e.conftest import TOKEN, eventually
from tests.integration.e2e.test_coordinator_routing import noting
from tests.integration.tls.conftest import Certs
from tests.integration.waits import expire_lease, until

Q = "conformance"


async def test_success_returns_the_handlers_output(conformance: Conformance) -> None:
    c = conformance
    workflow = await c.deploy_task({"do": "echo", "n": 1}, queue=Q)
    await c.worker(Q)
    run_id = (await c.stack.engine.start(workflow)).run_id
    run = await c.stack.wait_run(run_id, timeout=30)
    assert run.status is RunStatus.SUCCEEDED
    task = await c.task(run_id)
    assert task.output["input"] == {"do": "echo", "n": 1}
    assert task.output["attempt"] == 0 and task.attempt == 0


async def test_tasks_of_every_priority_band_are_served(conformance: Conformance) -> None:
    """A task goes to its run's priority band's stream (docs/architecture.md §4.16): a
    worker that read only the shards' own streams would never see these."""
    c = conformance
    workflow = await c.deploy_task({"do": "echo", "n": 1}, queue=Q, priority="{{input.p}}")
    waiting = [(await c.stack.engine.start(workflow, input={"p": p})).run_id for p in (1, 5)]
    await c.worker(Q)
    for run_id in waiting:
        assert (await c.stack.wait_run(run_id, timeout=30)).status is RunStatus.SUCCEEDED
    # and one published while the worker waits on its streams
    late = (await c.stack.engine.start(workflow, input={"p": 2})).run_id
    assert (await c.stack.wait_run(late, timeout=30)).status is RunStatus.SUCCEEDED


async def test_a_failed_attempt_is_retried_by_the_nodes_policy(conformance: Conformance) -> None:
    c = conformance
    workflow = await c.deploy_task({"do": "fail_until", "attempt": 2}, queue=Q, max_attempts=3)
    await c.worker(Q)
    run_id = (await c.stack.engine.start(workflow)).run_id
    run = await c.stack.wait_run(run_id, timeout=30)
    assert run.status is RunStatus.SUCCEEDED
    task = await c.task(run_id)
    assert (task.attempt, task.output) == (2, {"attempt": 2})
    # each failed attempt's error carried its message, with the code "exception"
    async with repo.transaction(c.stack.pool) as conn:
        history = await repo.run_history(conn, run_id)
    retries = [h for h in history if h.kind == "task.retry_scheduled"]
    assert [(h.attempt, h.detail["code"]) for h in retries] == [(0, "exception"), (1, "exception")]
    assert all(f"attempt {h.attempt} fails on purpose" in h.detail["error"] for h in retries)


async def test_a_permanent_error_fails_the_node_at_once_with_its_code(
    conformance: Conformance,
) -> None:
    c = conformance
    spec = {"do": "permanent", "message": "card declined", "code": "card_declined"}
    workflow = await c.deploy_task(spec, queue=Q, max_attempts=5)
    await c.worker(Q)
    run_id = (await c.stack.engine.start(workflow)).run_id
    run = await c.stack.wait_run(run_id, timeout=30)
    assert run.status is RunStatus.FAILED
    task = await c.task(run_id)
    assert task.state is TaskState.FAILED and task.attempt == 0  # not retried
    assert task.error_code == "card_declined"
    assert task.error is not None and "card declined" in task.error


async def test_a_long_task_keeps_its_lease_by_renewing_it(conformance: Conformance) -> None:
    c = conformance
    # three lease TTLs of work: it lives only if its lease is renewed (every ttl/3)
    workflow = await c.deploy_task({"do": "sleep", "seconds": 6}, queue=Q, max_attempts=1)
    await c.worker(Q, lease_ttl=2.0)
    run_id = (await c.stack.engine.start(workflow)).run_id
    run = await c.stack.wait_run(run_id, timeout=40)
    assert run.status is RunStatus.SUCCEEDED, (await c.task(run_id)).error
    assert (await c.task(run_id)).output == {"slept": 6}


async def test_a_worker_killed_mid_task_has_its_attempt_retried_elsewhere(
    conformance: Conformance,
) -> None:
    c = conformance
    workflow = await c.deploy_task({"do": "hang_first"}, queue=Q, max_attempts=3)
    doomed = await c.worker(Q, lease_ttl=1.0)
    run_id = (await c.stack.engine.start(workflow)).run_id
    await doomed.line("started ")
    doomed.signal(signal.SIGKILL)
    await doomed.exited()
    other = await c.worker(Q, lease_ttl=1.0)
    run = await c.stack.wait_run(run_id, timeout=40)
    assert run.status is RunStatus.SUCCEEDED
    task = await c.task(run_id)
    assert task.attempt >= 1 and task.output == {"attempt": task.attempt}
    assert (await other.line("started ")).endswith(f" {task.attempt}")


async def test_an_output_over_the_limit_fails_the_node_for_good(conformance: Conformance) -> None:
    c = conformance
    workflow = await c.deploy_task({"do": "big", "bytes": 2 * 1024 * 1024}, queue=Q)
    await c.worker(Q)
    run_id = (await c.stack.engine.start(workflow)).run_id
    run = await c.stack.wait_run(run_id, timeout=30)
    assert run.status is RunStatus.FAILED
    task = await c.task(run_id)
    assert task.attempt == 0 and task.error_code == "output_too_large"
    assert task.error is not None and "COMPOSER_MAX_OUTPUT_BYTES" in task.error


async def test_a_lost_lease_stops_the_handler_and_reports_nothing(
    conformance: Conformance,
) -> None:
    c = conformance
    workflow = await c.deploy_task({"do": "hang_first"}, queue=Q, max_attempts=3)
    worker = await c.worker(Q, lease_ttl=3.0)
    run_id = (await c.stack.engine.start(workflow)).run_id
    started = await worker.line("started ")
    task = await c.task(run_id)
    assert started == f"started {task.task_id} 0"

    # the lease is taken from the worker, as when it froze past its TTL: run out by the
    # database's clock and expired (attempt 0 fails LEASE_EXPIRED, attempt 1 is dispatched)
    async def taken() -> bool:
        await expire_lease(c.stack.pool, run_id, task.task_id)
        return await c.stack.engine.expire_lease(
            run_id, task.task_id, "work", 0, owner=task.lease_owner
        )

    await until(taken, timeout=10, what="the lease expired")
    await worker.line(f"aborted {task.task_id} 0")
    run = await c.stack.wait_run(run_id, timeout=30)
    assert run.status is RunStatus.SUCCEEDED
    task = await c.task(run_id)
    assert (task.attempt, task.output) == (1, {"attempt": 1})
    # attempt 0 reported nothing: only attempt 1's report brought its log line
    [log] = await c.logs(run_id)
    assert log.attempt == 1 and log.lines.endswith("INFO attempt 1")


async def test_a_token_for_another_queue_runs_nothing(conformance: Conformance) -> None:
    c = conformance
    server, port = await start_server(
        c.stack.engine, address="127.0.0.1:0", tokens=f"{TOKEN}:*,team-a-token:team-a"
    )
    try:
        workflow = await c.deploy_task({"do": "echo"}, queue="team-b")
        worker = await c.worker("team-b", token="team-a-token", coordinator=f"127.0.0.1:{port}")
        run_id = (await c.stack.engine.start(workflow)).run_id
        await eventually(
            lambda: "does not cover queue 'team-b'" in worker.stderr(),
            timeout=30,
            what="the worker said its token does not cover the queue",
        )
        assert not any(line.startswith("started ") for line in worker.lines)
        assert (await c.task(run_id)).state is TaskState.QUEUED
    finally:
        await server.stop(0)


async def test_sigterm_drains_the_task_in_flight_and_the_worker_shows_stopped(
    conformance: Conformance,
) -> None:
    c = conformance
    workflow = await c.deploy_task({"do": "sleep", "seconds": 2}, queue=Q, max_attempts=1)
    worker = await c.worker(Q)
    run_id = (await c.stack.engine.start(workflow)).run_id
    await worker.line("started ")
    worker.signal(signal.SIGTERM)
    assert await worker.exited() == 0
    # the task in flight finished and was reported before the worker exited
    task = await c.task(run_id)
    assert task.state is TaskState.COMPLETED and task.output == {"slept": 2}
    assert not any(line.startswith("aborted ") for line in worker.lines)
    [row] = [w for w in await c.worker_rows() if f"-{worker.proc.pid}-" in w.worker_id]
    assert row.state == "STOPPED" and row.queues == (Q,)


async def test_what_the_handler_logs_is_kept_with_its_attempt(conformance: Conformance) -> None:
    c = conformance
    workflow = await c.deploy_task({"do": "log", "lines": 3}, queue=Q)
    await c.worker(Q)
    run_id = (await c.stack.engine.start(workflow)).run_id
    assert (await c.stack.wait_run(run_id, timeout=30)).status is RunStatus.SUCCEEDED
    [log] = await c.logs(run_id)
    lines = log.lines.split("\n")
    assert [line.split(" ", 1)[1] for line in lines] == [
        "INFO line 1 of 3",
        "INFO line 2 of 3",
        "INFO line 3 of 3",
        "WARNING done",
    ]
    assert all(line.split(" ", 1)[0].endswith("Z") for line in lines)  # UTC times
    assert log.truncated == 0


async def test_the_handler_sees_its_caller_and_a_key_stable_across_attempts(
    conformance: Conformance,
) -> None:
    c = conformance
    workflow = await c.deploy_task({"do": "echo"}, queue=Q)
    await c.worker(Q)
    caller = Caller("ci", "operator", {"ticket": "OPS-7", "nested": {"ids": [1, 2]}})
    run_id = (await c.stack.engine.start(workflow, caller=caller)).run_id
    assert (await c.stack.wait_run(run_id, timeout=30)).status is RunStatus.SUCCEEDED
    output = (await c.task(run_id)).output
    assert output["caller"] == {
        "name": "ci",
        "role": "operator",
        "metadata": {"ticket": "OPS-7", "nested": {"ids": [1, 2]}},
    }
    assert output["idempotency_key"] == f"{run_id}:work"


async def test_a_run_with_no_caller_gives_the_handler_none(conformance: Conformance) -> None:
    c = conformance
    workflow = await c.deploy_task({"do": "echo"}, queue=Q)
    await c.worker(Q)
    run_id = (await c.stack.engine.start(workflow)).run_id
    assert (await c.stack.wait_run(run_id, timeout=30)).status is RunStatus.SUCCEEDED
    assert (await c.task(run_id)).output["caller"] is None


async def test_the_coordinator_is_dialled_over_tls_with_the_ca_given(
    conformance: Conformance, certs: Certs
) -> None:
    c = conformance
    tls = ServerTls(certs.cert.read_bytes(), certs.key.read_bytes())
    server, port = await start_server(c.stack.engine, address="127.0.0.1:0", token=TOKEN, tls=tls)
    try:
        workflow = await c.deploy_task({"do": "echo", "over": "tls"}, queue=Q)
        await c.worker(Q, coordinator=f"127.0.0.1:{port}", tls_ca=certs.ca)
        run_id = (await c.stack.engine.start(workflow)).run_id
        assert (await c.stack.wait_run(run_id, timeout=30)).status is RunStatus.SUCCEEDED
        assert (await c.task(run_id)).output["input"] == {"do": "echo", "over": "tls"}
    finally:
        await server.stop(0)


async def test_each_runs_calls_reach_the_coordinator_its_id_routes_to(
    conformance: Conformance,
) -> None:
    """Given every coordinator (COMPOSER_COORDINATORS), a worker of either SDK sends a
    run's lease and report to the one the run id routes to (docs/architecture.md §3.1),
    the same one whatever the SDK: one coordinator batches all of a run."""
    c = conformance
    second = Engine(c.stack.pool, redis=c.stack.redis, redis_prefix=c.stack.prefix)
    server, port = await start_server(second, address="127.0.0.1:0", token=TOKEN)
    seen: dict[str, set[int]] = defaultdict(set)
    for i, engine in enumerate((c.stack.engine, second)):
        engine.report = noting(seen, i, engine.report)
        engine.lease = noting(seen, i, engine.lease)
    try:
        workflow = await c.deploy_task({"do": "echo"}, queue=Q)
        await c.worker(Q, coordinators=f"{c.stack.grpc_target},127.0.0.1:{port}")
        runs = [(await c.stack.engine.start(workflow)).run_id for _ in range(8)]
        for run_id in runs:
            assert (await c.stack.wait_run(run_id, timeout=30)).status is RunStatus.SUCCEEDED
        assert {r: seen[r] for r in runs} == {r: {route(r, 2)} for r in runs}
    finally:
        await server.stop(0)
        await second.aclose()


#: The steps of the chains below: one TASK each, on the conformance queue, one after another.
STEPS = 6


def counting(
    runs: dict[str, list[Any]], call: Callable[[Any], Awaitable[Any]], note: Callable[[Any], Any]
) -> Any:
    """``call`` (an engine's lease or report), noting ``note(item)`` under its run."""

    async def noted(item: Any) -> Any:
        runs[item.run_id].append(note(item))
        return await call(item)

    return noted


async def run_chain(c: Conformance, *, take_next: bool | None) -> tuple[str, list[Any], list[bool]]:
    """Run a chain of STEPS echo steps on a worker of this SDK (``take_next``: its
    COMPOSER_WORKER_TAKE_NEXT, None unset); the run, the leases its steps were asked for
    (AcquireTaskLease, the call after a read from the stream) and, per report, whether it
    offered to take the next task."""
    leases: dict[str, list[Any]] = defaultdict(list)
    offers: dict[str, list[Any]] = defaultdict(list)
    engine = c.stack.engine
    engine.lease = counting(leases, engine.lease, lambda item: item.task_id)
    engine.report = counting(offers, engine.report, lambda item: item.take_next is not None)
    ids = [f"s{k}" for k in range(STEPS)]
    workflow_id = f"conf-chain-{uuid.uuid4().hex[:8]}"
    await c.stack.deploy(
        {
            "id": workflow_id,
            "nodes": [
                {"id": i, "type": "TASK", "queue": Q, "spec": {"do": "echo", "step": k}}
                for k, i in enumerate(ids)
            ],
            "edges": [{"from": a, "to": b} for a, b in itertools.pairwise(ids)],
        }
    )
    await c.worker(Q, take_next=take_next)
    run_id = (await c.stack.engine.start(workflow_id)).run_id
    run = await c.stack.wait_run(run_id, timeout=60)
    assert run.status is RunStatus.SUCCEEDED
    tasks = await c.stack.tasks_of(run_id)
    assert [tasks[i].output["input"]["step"] for i in ids] == list(range(STEPS))
    return run_id, leases[run_id], offers[run_id]


async def test_a_chain_runs_on_the_tasks_its_reports_bring(conformance: Conformance) -> None:
    """A worker of either SDK offers, with its reports, to take the next task
    (docs/architecture.md §3.2): the coordinator leases it the step each report makes
    ready, in the report's transaction, and that step never goes through the stream: no
    entry to read, no lease to ask for."""
    run_id, leases, offers = await run_chain(conformance, take_next=None)
    assert any(offers), f"no report of {run_id} offered to take the next task"
    # the first step came from the stream; most of the others with the report before
    # them (each one read from the stream instead asks for its lease)
    assert leases, "the first step was read from the stream and leased"
    taken = STEPS - len(leases)
    assert taken > (STEPS - 1) / 2, f"{len(leases)} of {STEPS} steps read from the stream"


async def test_a_worker_told_not_to_take_next_reads_every_step_from_the_stream(
    conformance: Conformance,
) -> None:
    """COMPOSER_WORKER_TAKE_NEXT=false: no report offers, every step is read and leased."""
    run_id, leases, offers = await run_chain(conformance, take_next=False)
    assert offers and not any(offers), f"a report of {run_id} offered: {offers}"
    assert len(set(leases)) == STEPS, leases


class _Capabilities(WorkerServiceServicer):
    """A coordinator that answers GetCapabilities only, with the versions it is given."""

    def __init__(self, version: int, oldest: int) -> None:
        self.version, self.oldest = version, oldest

    async def GetCapabilities(
        self, request: pb.GetCapabilitiesRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.GetCapabilitiesResponse:
        return pb.GetCapabilitiesResponse(
            protocol_version=self.version, min_protocol_version=self.oldest
        )


@pytest.mark.parametrize(
    ("versions", "says"),
    [
        (
            (PROTOCOL_VERSION + 2, PROTOCOL_VERSION + 1),
            f"serves SDKs of protocol version {PROTOCOL_VERSION + 1} and newer",
        ),
        ((PROTOCOL_VERSION - 1, 0), f"speaks worker protocol version {PROTOCOL_VERSION - 1}"),
        (None, "predates worker protocol versions"),
    ],
    ids=["engine-too-new", "engine-too-old", "engine-before-versions"],
)
async def test_an_engine_of_another_protocol_version_stops_the_worker_naming_both(
    conformance: Conformance, versions: tuple[int, int] | None, says: str
) -> None:
    # the generated base class answers UNIMPLEMENTED to every call not overridden: None
    # is a coordinator from before GetCapabilities
    servicer = WorkerServiceServicer() if versions is None else _Capabilities(*versions)  # type: ignore[abstract]
    c = conformance
    server = grpc.aio.server()
    add_WorkerServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        workflow = await c.deploy_task({"do": "echo"}, queue=Q)
        run_id = (await c.stack.engine.start(workflow)).run_id
        worker = await c.worker(Q, coordinator=f"127.0.0.1:{port}")
        assert await worker.exited() != 0
        said = worker.stderr()
        assert says in said, said[-3000:]
        assert f"version {PROTOCOL_VERSION}" in said
        assert not any(line.startswith("started ") for line in worker.lines)
        assert (await c.task(run_id)).state is TaskState.QUEUED
    finally:
        await server.stop(0)


async def test_a_worker_reading_another_redis_prefix_stops_naming_both(
    conformance: Conformance,
) -> None:
    """A worker on the wrong prefix would show SERVING while its tasks wait for ever."""
    c = conformance
    workflow = await c.deploy_task({"do": "echo"}, queue=Q)
    run_id = (await c.stack.engine.start(workflow)).run_id
    worker = await c.worker(Q, redis_prefix="composer-elsewhere")
    assert await worker.exited() != 0
    said = worker.stderr()
    assert f"publishes tasks under Redis prefix '{c.stack.prefix}'" in said, said[-3000:]
    assert "reads prefix 'composer-elsewhere'" in said
    assert f"COMPOSER_REDIS_PREFIX={c.stack.prefix}" in said
    assert not any(line.startswith("started ") for line in worker.lines)
    assert (await c.task(run_id)).state is TaskState.QUEUED


async def test_a_redis_cluster_is_read_by_python_workers_and_refused_by_typescript_ones(
    cluster_conformance: Conformance,
) -> None:
    """On a Redis Cluster (COMPOSER_REDIS_CLUSTER=true) a Python worker reads each shard
    on its master; a worker that reads one server there (or a TypeScript one, which
    cannot read a cluster yet) would fail every read: it stops at start, naming why."""
    c = cluster_conformance
    workflow = await c.deploy_task({"do": "echo"}, queue=Q)
    run_id = (await c.stack.engine.start(workflow)).run_id
    if c.sdk == "python":
        lost = await c.worker(Q, redis_cluster=False)
        assert await lost.exited() != 0
        said = lost.stderr()
        assert "COMPOSER_REDIS_CLUSTER=true" in said, said[-3000:]
        await c.worker(Q)
        run = await c.stack.wait_run(run_id, timeout=30)
        assert run.status is RunStatus.SUCCEEDED
        return
    worker = await c.worker(Q)
    assert await worker.exited() != 0
    said = worker.stderr()
    # (its first command, or else the coordinator's capabilities, tells it)
    assert (
        "Redis Cluster (COMPOSER_REDIS_CLUSTER=true), which this SDK does not read yet" in said
    ), said[-3000:]
    assert not any(line.startswith("started ") for line in worker.lines)
    assert (await c.task(run_id)).state is TaskState.QUEUED
