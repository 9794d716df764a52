"""Runs driven end to end: engine, coordinator gRPC, outbox-enqueuer, SDK workers,
real PostgreSQL and Redis (docs/architecture.md §1)."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc.aio
import pytest
import yaml
from aiohttp import web

import composer_queue as cq
import composer_repo as repo
from composer_core.model import RunStatus, TaskState
from composer_rpc.v1 import worker_pb2 as pb
from composer_rpc.v1.worker_pb2_grpc import WorkerServiceStub
from composer_sdk import PermanentError, TaskContext, TaskFailed
from tests.integration.e2e.conftest import TOKEN, Stack, eventually
from tests.integration.waits import expire_lease, until

if TYPE_CHECKING:  # the async stub's type exists only in the generated .pyi
    from composer_rpc.v1.worker_pb2_grpc import WorkerServiceAsyncStub

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def chain(*ids: str, queue: str = "work", **extra: Any) -> dict[str, Any]:
    return {
        "id": f"chain-{len(ids)}",
        "nodes": [
            {
                "id": i,
                "type": "TASK",
                "queue": queue,
                "spec": {"n": "{{input.n}}" if k == 0 else f"{{{{tasks.{ids[k - 1]}.output.n}}}}"},
            }
            for k, i in enumerate(ids)
        ],
        "edges": [{"from": a, "to": b} for a, b in itertools.pairwise(ids)],
        **extra,
    }


def one_task(node_id: str, queue: str = "work", **node: Any) -> dict[str, Any]:
    """A workflow of one TASK node, called ``one-<node_id>``."""
    return {
        "id": f"one-{node_id}",
        "nodes": [{"id": node_id, "type": "TASK", "queue": queue, "spec": {}, **node}],
    }


async def add_one(ctx: TaskContext, input: dict[str, Any]) -> dict[str, Any]:
    return {"n": input["n"] + 1, "node": ctx.node_id}


async def test_chain_passes_outputs_along(stack: Stack) -> None:
    await stack.deploy(chain("a", "b", "c", output={"total": "{{tasks.c.output.n}}"}))
    stack.worker({"work": add_one})
    started = await stack.engine.start("chain-3", input={"n": 1})
    run = await stack.wait_run(started.run_id)
    assert run.status is RunStatus.SUCCEEDED
    assert run.output == {"total": 4}
    tasks = await stack.tasks_of(started.run_id)
    assert [tasks[n].output for n in "abc"] == [
        {"n": 2, "node": "a"},
        {"n": 3, "node": "b"},
        {"n": 4, "node": "c"},
    ]
    assert all(
        t.state is TaskState.COMPLETED and t.started_at and t.finished_at for t in tasks.values()
    )


async def test_fork_join_with_branches_of_different_lengths(stack: Stack) -> None:
    await stack.deploy(
        {
            "id": "fanout",
            "nodes": [
                {"id": "f", "type": "FORK"},
                *(
                    {"id": i, "type": "TASK", "queue": "work", "spec": {"n": 0}}
                    for i in ("a1", "a2", "a3", "b1")
                ),
                {"id": "j", "type": "JOIN"},
                {
                    "id": "after",
                    "type": "TASK",
                    "queue": "work",
                    "spec": {"n": "{{tasks.a3.output.n + tasks.b1.output.n}}"},
                },
            ],
            "edges": [
                {"from": "f", "to": "a1"},
                {"from": "a1", "to": "a2"},
                {"from": "a2", "to": "a3"},
                {"from": "f", "to": "b1"},
                {"from": "a3", "to": "j"},
                {"from": "b1", "to": "j"},
                {"from": "j", "to": "after"},
            ],
        }
    )
    stack.worker({"work": add_one})
    started = await stack.engine.start("fanout")
    run = await stack.wait_run(started.run_id)
    assert run.status is RunStatus.SUCCEEDED
    tasks = await stack.tasks_of(started.run_id)
    assert tasks["after"].input == {"n": 2}
    assert tasks["j"].state is TaskState.COMPLETED
    a3_done, b1_done = tasks["a3"].finished_at, tasks["b1"].finished_at
    assert a3_done is not None and b1_done is not None
    # the join waited for the longer branch: it, and what follows it, were created no
    # earlier than both finished (one event's rows carry one time, read after the lock)
    assert tasks["j"].finished_at is not None
    assert tasks["j"].finished_at >= max(a3_done, b1_done)
    assert tasks["after"].created_at >= max(a3_done, b1_done)


async def test_switch_skips_a_branch_and_merges(stack: Stack) -> None:
    await stack.deploy(
        {
            "id": "branching",
            "nodes": [
                {"id": "p", "type": "TASK", "queue": "work", "spec": {"n": "{{input.n}}"}},
                {"id": "s", "type": "SWITCH"},
                {"id": "big", "type": "TASK", "queue": "work", "spec": {"n": 100}},
                {"id": "small", "type": "TASK", "queue": "work", "spec": {"n": 0}},
                {"id": "small2", "type": "TASK", "queue": "work", "spec": {"n": 0}},
                {"id": "merge", "type": "TASK", "queue": "work", "spec": {"n": 1}},
            ],
            "edges": [
                {"from": "p", "to": "s"},
                {"from": "s", "to": "big", "condition": "{{tasks.p.output.n > 10}}"},
                {"from": "s", "to": "small", "condition": "{{tasks.p.output.n <= 10}}"},
                {"from": "small", "to": "small2"},
                {"from": "big", "to": "merge"},
                {"from": "small2", "to": "merge"},
            ],
        }
    )
    stack.worker({"work": add_one})
    started = await stack.engine.start("branching", input={"n": 50})
    run = await stack.wait_run(started.run_id)
    assert run.status is RunStatus.SUCCEEDED
    tasks = await stack.tasks_of(started.run_id)
    assert {n: t.state for n, t in tasks.items()} == {
        "p": TaskState.COMPLETED,
        "s": TaskState.COMPLETED,
        "big": TaskState.COMPLETED,
        "small": TaskState.SKIPPED,
        "small2": TaskState.SKIPPED,
        "merge": TaskState.COMPLETED,
    }
    assert tasks["s"].branches == ("big",)


async def test_failed_attempt_is_retried_after_its_backoff(stack: Stack) -> None:
    await stack.deploy(one_task("flaky", retry={"max_attempts": 3, "initial_seconds": 0.5}))
    calls: list[tuple[int, float]] = []

    async def flaky(ctx: TaskContext, input: dict[str, Any]) -> dict[str, Any]:
        calls.append((ctx.attempt, time.monotonic()))
        if ctx.attempt == 0:
            raise TaskFailed("upstream busy", code="busy")
        return {"ok": True, "last": ctx.is_last_attempt}

    stack.worker({"work": flaky})
    started = await stack.engine.start("one-flaky")
    run = await stack.wait_run(started.run_id)
    assert run.status is RunStatus.SUCCEEDED
    assert [a for a, _ in calls] == [0, 1]
    assert calls[1][1] - calls[0][1] >= 0.45  # the backoff was honoured
    task = (await stack.tasks_of(started.run_id))["flaky"]
    assert (task.attempt, task.output) == (1, {"ok": True, "last": False})


async def test_permanent_failure_fails_the_run_with_the_handlers_message(stack: Stack) -> None:
    await stack.deploy(chain("a", "b"))

    async def refuse(ctx: TaskContext, input: dict[str, Any]) -> None:
        raise PermanentError("card declined", code="declined")

    stack.worker({"work": refuse})
    started = await stack.engine.start("chain-2", input={"n": 1})
    run = await stack.wait_run(started.run_id)
    assert run.status is RunStatus.FAILED
    assert run.error == "node a failed: card declined"
    tasks = await stack.tasks_of(started.run_id)
    assert (tasks["a"].attempt, tasks["a"].error_code) == (0, "declined")
    assert "b" not in tasks


async def test_http_and_python_nodes_on_the_builtin_workers(
    stack: Stack, unused_tcp_port: int
) -> None:
    async def items(request: web.Request) -> web.Response:
        return web.json_response({"name": "widget", "price": int(request.query["p"])})

    app = web.Application()
    app.router.add_get("/items/{id}", items)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", unused_tcp_port)
    await site.start()
    try:
        await stack.deploy(
            {
                "id": "http-python",
                "nodes": [
                    {
                        "id": "get",
                        "type": "HTTP",
                        "spec": {
                            "url": "{{input.base}}/items/7",
                            "query": {"p": "{{input.price}}"},
                        },
                        "timeout_seconds": 5,
                    },
                    {
                        "id": "calc",
                        "type": "PYTHON",
                        "spec": {
                            "code": "def main(input):\n    print('noise')\n    return {'total': input['price'] * 2, 'name': input['name'].upper()}\n",
                            "input": {
                                "price": "{{tasks.get.output.body.price}}",
                                "name": "{{tasks.get.output.body.name}}",
                            },
                        },
                    },
                ],
                "edges": [{"from": "get", "to": "calc"}],
                "output": "{{tasks.calc.output}}",
            }
        )
        await stack.builtin_workers()
        started = await stack.engine.start(
            "http-python", input={"base": f"http://127.0.0.1:{unused_tcp_port}", "price": 21}
        )
        run = await stack.wait_run(started.run_id)
        assert run.status is RunStatus.SUCCEEDED, run.error
        assert run.output == {"total": 42, "name": "WIDGET"}
        tasks = await stack.tasks_of(started.run_id)
        assert tasks["get"].output["status"] == 200
    finally:
        await runner.cleanup()


async def test_python_node_that_raises_or_runs_too_long_fails(stack: Stack) -> None:
    await stack.deploy(
        {
            "id": "python-fails",
            "nodes": [
                {"id": "f", "type": "FORK"},
                {
                    "id": "boom",
                    "type": "PYTHON",
                    "spec": {"code": "def main(input):\n    raise ValueError('bad total')\n"},
                    "retry": {"max_attempts": 1},
                },
                {
                    "id": "spin",
                    "type": "PYTHON",
                    "spec": {"code": "def main(input):\n    while True:\n        pass\n"},
                    "timeout_seconds": 1,
                    "retry": {"max_attempts": 1},
                },
            ],
            "edges": [{"from": "f", "to": "boom"}, {"from": "f", "to": "spin"}],
        }
    )
    await stack.builtin_workers()
    started = await stack.engine.start("python-fails")
    run = await stack.wait_run(started.run_id)
    assert run.status is RunStatus.FAILED
    tasks = await stack.tasks_of(started.run_id)
    assert (
        tasks["boom"].error is not None
        and "ValueError" in tasks["boom"].error
        and "bad total" in tasks["boom"].error
    )
    assert tasks["spin"].error_code == "timeout"


async def test_duplicate_stream_message_runs_the_handler_once(stack: Stack) -> None:
    await stack.deploy(one_task("once", queue="dup"))
    calls: list[str] = []
    release = asyncio.Event()

    async def slow(ctx: TaskContext, input: dict[str, Any]) -> dict[str, Any]:
        calls.append(ctx.task_id)
        await release.wait()
        return {"ok": True}

    stack.worker({"dup": slow}, owner="worker-1")
    stack.worker({"dup": slow}, owner="worker-2")
    started = await stack.engine.start("one-once")
    await eventually(lambda: bool(calls), what="the handler started")
    # deliver the same task attempt again, to both workers: neither runs it a second time
    task = (await stack.tasks_of(started.run_id))["once"]
    message = cq.TaskMessage(task.task_id, started.run_id, 0)
    stream = cq.task_stream(stack.prefix, "dup", task.task_id, cq.DEFAULT_SHARDS)
    await stack.redis.publish([(stream, message.fields())] * 3)
    await eventually(
        lambda: sum(w.skipped for w in stack.workers) >= 3, what="three duplicates skipped"
    )
    release.set()
    run = await stack.wait_run(started.run_id)
    assert run.status is RunStatus.SUCCEEDED
    assert calls == [task.task_id]


class RawWorker:
    """A worker speaking the gRPC protocol by hand, to send what a real one would not."""

    def __init__(
        self,
        stub: WorkerServiceAsyncStub,
        run_id: str,
        task_id: str,
        token: str = TOKEN,
        node_id: str = "a",
    ) -> None:
        self.stub, self.run_id, self.task_id, self.node_id = stub, run_id, task_id, node_id
        self.md = (("authorization", f"Bearer {token}"),)
        #: owner → the token of the lease it was granted last.
        self.tokens: dict[str, str] = {}

    async def lease(
        self, owner: str, ttl: float = 30, *, claim: str = ""
    ) -> pb.AcquireTaskLeaseResponse:
        request = pb.AcquireTaskLeaseRequest(
            task_id=self.task_id,
            run_id=self.run_id,
            attempt=0,
            owner=owner,
            ttl_seconds=ttl,
            claim=claim or f"claim-of-{owner}-{len(self.tokens)}",
        )
        reply = await self.stub.AcquireTaskLease(request, metadata=self.md)
        if reply.granted:
            self.tokens[owner] = reply.lease_token
        return reply

    async def renew(self, owner: str, *, token: str | None = None) -> pb.RenewTaskLeaseResponse:
        request = pb.RenewTaskLeaseRequest(
            task_id=self.task_id,
            run_id=self.run_id,
            attempt=0,
            owner=owner,
            ttl_seconds=30,
            lease_token=token if token is not None else self.tokens.get(owner, "none"),
        )
        return await self.stub.RenewTaskLease(request, metadata=self.md)

    async def report(
        self,
        owner: str,
        *,
        attempt: int = 0,
        output: str = "{}",
        error: str = "",
        token: str | None = None,
    ) -> bool:
        request = pb.ReportTaskResultRequest(
            task_id=self.task_id,
            run_id=self.run_id,
            node_id=self.node_id,
            attempt=attempt,
            owner=owner,
            lease_token=token if token is not None else self.tokens.get(owner, "none"),
            status=pb.TASK_STATUS_FAILED if error else pb.TASK_STATUS_COMPLETED,
            output_json=output,
            error=error,
        )
        return (await self.stub.ReportTaskResult(request, metadata=self.md)).accepted


async def test_stale_and_foreign_reports_change_nothing(stack: Stack) -> None:
    await stack.deploy(one_task("a", queue="manual", spec={"n": "{{input.n}}"}))
    started = await stack.engine.start("one-a", input={"n": 1})
    task = (await stack.tasks_of(started.run_id))["a"]
    async with grpc.aio.insecure_channel(stack.grpc_target) as channel:
        raw = RawWorker(WorkerServiceStub(channel), started.run_id, task.task_id)
        lease = await raw.lease("A", ttl=60)
        assert lease.granted
        assert lease.input_json == '{"n":1}'
        assert not (await raw.lease("B")).granted  # A's lease is live
        await expire_lease(stack.pool, started.run_id, task.task_id)  # A stopped renewing
        assert not (await raw.renew("B")).ok
        assert (await raw.lease("B")).granted
        assert not await raw.report("A", output='{"from": "A"}')  # A's lease was taken over
        assert not await raw.report("B", attempt=5)  # no such attempt
        assert await raw.report("B", output='{"from": "B"}')
        assert not await raw.report("B", error="late")  # the attempt is finished
    run = await stack.wait_run(started.run_id)
    assert run.status is RunStatus.SUCCEEDED
    assert (await stack.tasks_of(started.run_id))["a"].output == {"from": "B"}


async def test_bad_requests_and_missing_token_are_refused(stack: Stack) -> None:
    async with grpc.aio.insecure_channel(stack.grpc_target) as channel:
        stub = WorkerServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.AcquireTaskLease(
                pb.AcquireTaskLeaseRequest(
                    task_id="t", run_id="r", attempt=0, owner="o", ttl_seconds=1
                )
            )
        assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED
        md = (("authorization", f"Bearer {TOKEN}"),)
        with pytest.raises(grpc.aio.AioRpcError) as invalid:
            await stub.AcquireTaskLease(
                pb.AcquireTaskLeaseRequest(
                    task_id="t", run_id="r", attempt=0, owner="", ttl_seconds=1
                ),
                metadata=md,
            )
        assert invalid.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        unknown = await stub.ReportTaskResult(
            pb.ReportTaskResultRequest(
                task_id="t",
                run_id="0190b2a0-0000-7000-8000-000000000000",
                node_id="n",
                attempt=0,
                owner="o",
                lease_token="no-such-lease",
                status=pb.TASK_STATUS_COMPLETED,
                output_json="{}",
            ),
            metadata=md,
        )
        assert not unknown.accepted
        with pytest.raises(grpc.aio.AioRpcError) as tokenless:
            await stub.ReportTaskResult(
                pb.ReportTaskResultRequest(
                    task_id="t",
                    run_id="0190b2a0-0000-7000-8000-000000000000",
                    node_id="n",
                    attempt=0,
                    owner="o",
                    status=pb.TASK_STATUS_COMPLETED,
                ),
                metadata=md,
            )
        assert tokenless.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "lease_token is required" in (tokenless.value.details() or "")


async def test_lost_lease_cancels_the_handler_and_its_report_is_not_sent(stack: Stack) -> None:
    await stack.deploy(one_task("long", queue="slow", retry={"max_attempts": 1}))
    started_handler = asyncio.Event()
    cancelled = asyncio.Event()

    async def long(ctx: TaskContext, input: dict[str, Any]) -> dict[str, Any]:
        started_handler.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return {"too": "late"}

    stack.worker({"slow": long}, lease_ttl=0.6)
    started = await stack.engine.start("one-long")
    await asyncio.wait_for(started_handler.wait(), 10)
    task = (await stack.tasks_of(started.run_id))["long"]
    # another worker takes the attempt over (as after an expiry the sweeper would let it)
    async with repo.transaction(stack.pool) as conn:
        await conn.execute(
            "UPDATE task_instances SET lease_owner = 'thief' WHERE id = $1", task.task_id
        )
    await asyncio.wait_for(cancelled.wait(), 10)
    assert (await stack.tasks_of(started.run_id))["long"].state is TaskState.RUNNING
    assert stack.workers[0].completed == 0


def no_webhook_left(stack: Stack) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        async with repo.transaction(stack.pool) as conn:
            return (await repo.outbox_size(conn)).get("webhook", 0) == 0

    return check


async def test_webhook_is_retried_while_the_server_answers_503(
    stack: Stack, unused_tcp_port: int
) -> None:
    received: list[dict[str, Any]] = []
    answers = [503, 503, 200]

    async def hook(request: web.Request) -> web.Response:
        status = answers.pop(0) if answers else 200
        if status == 200:
            received.append(await request.json())
        return web.Response(status=status)

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", unused_tcp_port).start()
    try:
        hooked = one_task("h", spec={"n": "{{input.n}}"}) | {
            "webhook_url": f"http://127.0.0.1:{unused_tcp_port}/hook",
            "output": {"n": "{{tasks.h.output.n}}"},
        }
        version = await stack.deploy(hooked)
        stack.worker({"work": add_one})
        started = await stack.engine.start("one-h", input={"n": 1})
        await stack.wait_run(started.run_id)
        await eventually(lambda: bool(received), what="the webhook arrived")
        assert received == [
            {
                "run_id": started.run_id,
                "workflow_id": "one-h",
                "version": version,
                "status": "SUCCEEDED",
                "error": None,
                "output": {"n": 2},
            }
        ]
        assert answers == []  # it took three tries
        await until(no_webhook_left(stack), what="the delivered webhook left the outbox")
        assert len(received) == 1  # and, gone from the outbox, it cannot be sent again
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(("price", "total"), [(120, 108.0), (5, 5)])
async def test_example_price_check_runs_to_success(
    stack: Stack, unused_tcp_port: int, price: int, total: float
) -> None:
    async def item(request: web.Request) -> web.Response:
        return web.json_response({"name": "lamp", "price": price})

    app = web.Application()
    app.router.add_get("/items/7", item)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", unused_tcp_port).start()
    try:
        example = yaml.safe_load(EXAMPLES.joinpath("price-check.yaml").read_text())
        await stack.deploy(example)
        await stack.builtin_workers()
        started = await stack.engine.start(
            "price-check", input={"url": f"http://127.0.0.1:{unused_tcp_port}/items/7"}
        )
        run = await stack.wait_run(started.run_id)
        assert run.status is RunStatus.SUCCEEDED, run.error
        assert run.output["item"] == "lamp"
        assert run.output["quote"]["total"] == total
    finally:
        await runner.cleanup()


async def test_example_payment_signal_failure_and_retry_from_the_wait(stack: Stack) -> None:
    """The README's walk-through, through the engine: signal, a failed settle, retry, signal again."""
    await stack.deploy(yaml.safe_load(EXAMPLES.joinpath("payment.yaml").read_text()))
    await stack.builtin_workers()
    started = await stack.engine.start("payment", input={"order_id": "A-1", "amount": 21})
    await eventually_waiting(stack, started.run_id, "paid")
    assert await stack.engine.signal(started.run_id, "payment_received", {"paid": 5})
    run = await stack.wait_run(started.run_id)
    assert run.status is RunStatus.FAILED
    assert run.error is not None and "paid 5 of 21" in run.error

    await stack.engine.retry(started.run_id, "paid")
    await eventually_waiting(stack, started.run_id, "paid")
    assert await stack.engine.signal(started.run_id, "payment_received", {"paid": 21})
    run = await stack.wait_run(started.run_id)
    assert run.status is RunStatus.SUCCEEDED, run.error
    assert run.output == {"invoice": "INV-A-1", "settled": 21}


async def eventually_waiting(stack: Stack, run_id: str, node_id: str) -> None:
    for _ in range(500):
        task = (await stack.tasks_of(run_id)).get(node_id)
        if task is not None and task.state is TaskState.WAITING:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{node_id} of run {run_id} never waited")
