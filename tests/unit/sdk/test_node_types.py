"""A handler runs only the node types it was built for, of its own queue
(docs/architecture.md §6.1): it says them in its lease requests, drops an entry the
coordinator says is not its own, and never runs a grant of another node type (one a
coordinator older than the check gives)."""

from __future__ import annotations

import logging
from typing import Any

import grpc
import pytest

from composer_common.logs import ALERT
from composer_core.model import RESERVED_QUEUES, NodeType
from composer_queue.testing import FakeQueue
from composer_sdk import SdkError, TaskContext, Worker, WorkerConfig
from composer_sdk._handler import RESERVED_QUEUES as SDK_RESERVED_QUEUES
from composer_sdk._handler import WORKER_NODE_TYPES, Handler
from tests.unit.sdk.fakes import FakeStub, granted, rpc_error
from tests.unit.sdk.test_worker import message, publish, running, stored, until


async def handler(ctx: TaskContext, input: Any) -> dict[str, Any]:
    return {}


def test_the_sdk_knows_the_reserved_queues_and_node_types_as_the_core_does() -> None:
    assert {q: t.value for q, t in RESERVED_QUEUES.items()} == SDK_RESERVED_QUEUES
    assert set(WORKER_NODE_TYPES) == {t.value for t in NodeType if t.is_worker}


def test_a_handler_runs_task_nodes_unless_it_says_otherwise() -> None:
    assert Handler.of("payments", handler).node_types == {"TASK"}
    assert Handler.of("http", handler).node_types == {"HTTP"}
    assert Handler.of("python", handler).node_types == {"PYTHON"}
    # your own worker may run the built-in executors' node types on a queue of yours
    assert Handler.of("egress-eu", handler, "HTTP").node_types == {"HTTP"}
    assert Handler.of("mixed", handler, ["TASK", "HTTP"]).node_types == {"TASK", "HTTP"}


@pytest.mark.parametrize(
    ("queue", "node_types", "message"),
    [
        ("python", "TASK", "queue 'python' is reserved for PYTHON nodes"),
        ("http", ["HTTP", "TASK"], "queue 'http' is reserved for HTTP nodes"),
        ("q", "WAIT", "'WAIT' is not a node type a worker runs"),
        ("q", [], "node_types names no node type"),
    ],
)
def test_a_handler_cannot_take_what_it_must_not_run(
    queue: str, node_types: Any, message: str
) -> None:
    worker = Worker(WorkerConfig())
    with pytest.raises(SdkError, match=message):
        worker.add_handler(queue, handler, node_types=node_types)
    with pytest.raises(SdkError, match=message):
        worker.handler(queue, node_types=node_types)(handler)


async def test_lease_requests_say_the_queue_and_the_node_types() -> None:
    queue, stub = FakeQueue(), FakeStub()
    async with running(handler, stub, queue) as worker:
        await publish(queue, message())
        await until(lambda: worker.completed == 1, "the task completed")
    [request] = stub.lease_requests
    assert (request.queue, list(request.node_types)) == ("q", ["TASK"])


async def test_an_entry_the_coordinator_says_is_not_the_handlers_is_dropped_loudly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    queue = FakeQueue()
    refusal = "task t1 (node a of run r1) is on queue 'http', not on 'q', whose stream ..."
    stub = FakeStub(leases=[rpc_error(grpc.StatusCode.FAILED_PRECONDITION, refusal)])
    ran: list[str] = []

    async def counting(ctx: TaskContext, input: Any) -> None:
        ran.append(ctx.task_id)

    with caplog.at_level(logging.INFO, logger="composer.sdk"):
        async with running(counting, stub, queue) as worker:
            await publish(queue, message())
            await until(lambda: worker.misrouted == 1, "the entry was refused")
    assert ran == [] and stub.report_requests == [] and worker.abandoned == 0
    assert len(stub.lease_requests) == 1  # not asked again
    assert await stored(queue) == 0
    [alert] = [r.getMessage() for r in caplog.records if r.levelno == ALERT]
    assert "task t1 attempt 0 of run r1" in alert and refusal in alert


async def test_a_grant_of_another_node_type_is_never_run(caplog: pytest.LogCaptureFixture) -> None:
    # a coordinator older than the node type check grants what the entry names
    queue = FakeQueue()
    stub = FakeStub(leases=[granted(node_type="HTTP", node_id="fetch")])
    ran: list[str] = []

    async def counting(ctx: TaskContext, input: Any) -> None:
        ran.append(ctx.task_id)

    with caplog.at_level(logging.INFO, logger="composer.sdk"):
        async with running(counting, stub, queue) as worker:
            await publish(queue, message())
            await until(lambda: worker.misrouted == 1, "the grant was refused")
    assert ran == [] and stub.report_requests == []
    assert await stored(queue) == 0
    [alert] = [r.getMessage() for r in caplog.records if r.levelno == ALERT]
    assert "node fetch of run r1 is of node type HTTP" in alert
    assert "runs TASK nodes only" in alert and "upgrade it" in alert
