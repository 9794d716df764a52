"""Size limits and unstorable outputs, end to end (docs/architecture.md, "Limits").

Each of these once left a task RUNNING until something else noticed: an input
too large for a gRPC message (the SDK retried RESOURCE_EXHAUSTED forever), an
output too large for one, an output PostgreSQL's JSONB refuses (NaN, \\u0000).
Now each fails its node for good, quickly, with an error that names the limit.
"""

from __future__ import annotations

import time
from typing import Any

import grpc.aio
import pytest

from composer_core.model import RunStatus, TaskState
from composer_engine import Engine
from composer_rpc.codes import ErrorCode
from composer_rpc.v1.worker_pb2_grpc import WorkerServiceStub
from composer_sdk import Outcome, TaskContext
from composer_sdk._client import MESSAGE_TOO_LARGE, CoordinatorClient
from composer_sdk.errors import SdkError
from tests.integration.e2e.conftest import TOKEN, Stack
from tests.integration.e2e.test_runs import RawWorker, one_task

#: Past the 4 MiB gRPC receives by default: what used to wedge a task.
BIG = 4_700_000


async def echo(ctx: TaskContext, input: dict[str, Any]) -> dict[str, Any]:
    return {"seen": len(str(input))}


async def test_a_node_input_rendered_over_the_limit_fails_the_node_unstored(stack: Stack) -> None:
    await stack.deploy(one_task("a", spec={"blob": "{{input.blob}}"}))
    calls: list[str] = []

    async def handler(ctx: TaskContext, input: dict[str, Any]) -> dict[str, Any]:
        calls.append(ctx.run_id)
        return {"ok": True}

    stack.worker({"work": handler})
    big = await stack.engine.start("one-a", input={"blob": "x" * BIG})
    run = await stack.wait_run(big.run_id, timeout=15)
    assert run.status is RunStatus.FAILED
    task = (await stack.tasks_of(big.run_id))["a"]
    assert task.state is TaskState.FAILED
    assert task.error is not None
    # rendering stopped as soon as the input was certain to be over the limit
    assert (
        "node input is at least 4.7 MB, over the 1 MiB limit (COMPOSER_MAX_NODE_INPUT_BYTES)"
        in (task.error)
    )
    assert task.error_code == ErrorCode.INPUT_TOO_LARGE
    assert task.input is None  # nothing of it was stored
    assert calls == []  # the worker never saw it...
    small = await stack.engine.start("one-a", input={"blob": "x"})
    assert (await stack.wait_run(small.run_id)).status is RunStatus.SUCCEEDED  # ...and goes on
    assert calls == [small.run_id]


async def test_a_stored_node_input_over_the_limit_is_not_leased(stack: Stack) -> None:
    """An input stored by a service with a larger limit (or before it was checked as
    rendered) is refused at lease: the node fails for good, and no worker sees it."""
    await stack.deploy(one_task("a", spec={"blob": "{{input.blob}}"}))
    calls: list[str] = []

    async def handler(ctx: TaskContext, input: dict[str, Any]) -> dict[str, Any]:
        calls.append(ctx.run_id)
        return {"ok": True}

    stack.worker({"work": handler})
    unlimited = Engine(
        stack.pool, redis=stack.redis, redis_prefix=stack.prefix, max_node_input_bytes=None
    )
    try:
        big = await unlimited.start("one-a", input={"blob": "x" * BIG})
    finally:
        await unlimited.aclose()
    run = await stack.wait_run(big.run_id, timeout=15)
    assert run.status is RunStatus.FAILED
    task = (await stack.tasks_of(big.run_id))["a"]
    assert task.error is not None
    assert "node input is 4.7 MB, over the 1 MiB limit (COMPOSER_MAX_NODE_INPUT_BYTES)" in (
        task.error
    )
    assert task.error_code == ErrorCode.INPUT_TOO_LARGE
    assert calls == []


async def test_an_output_over_the_limit_fails_the_node_and_frees_the_slot(stack: Stack) -> None:
    await stack.deploy(one_task("a", spec={"big": "{{input.big}}"}))

    async def handler(ctx: TaskContext, input: dict[str, Any]) -> dict[str, Any]:
        return {"blob": "y" * (5_000_000 if input["big"] else 10)}

    worker = stack.worker({"work": handler}, concurrency=1, prefetch=1)
    big = await stack.engine.start("one-a", input={"big": True})
    run = await stack.wait_run(big.run_id, timeout=15)
    assert run.status is RunStatus.FAILED
    task = (await stack.tasks_of(big.run_id))["a"]
    assert (
        task.error is not None and "over the 1 MiB limit (COMPOSER_MAX_OUTPUT_BYTES)" in task.error
    )
    assert task.error_code == ErrorCode.OUTPUT_TOO_LARGE
    assert task.attempt == 0  # permanent: not retried
    small = await stack.engine.start("one-a", input={"big": False})
    assert (await stack.wait_run(small.run_id)).status is RunStatus.SUCCEEDED
    assert worker.abandoned == 0


async def test_an_output_jsonb_cannot_store_fails_the_node_at_once(stack: Stack) -> None:
    """Well before the lease would run out (30 s here): the worker refuses the output."""
    await stack.deploy(one_task("a", spec={"kind": "{{input.kind}}"}))

    async def handler(ctx: TaskContext, input: dict[str, Any]) -> Any:
        if input["kind"] == "nan":
            return {"a": {"b": float("nan")}}
        return {"a": [1, {"text": "nul \u0000 here"}]}

    stack.worker({"work": handler}, lease_ttl=30.0)
    for kind, where in (("nan", "NaN at $.a.b"), ("nul", "$.a[1].text")):
        began = time.monotonic()
        started = await stack.engine.start("one-a", input={"kind": kind})
        run = await stack.wait_run(started.run_id, timeout=10)
        assert time.monotonic() - began < 10
        assert run.status is RunStatus.FAILED
        task = (await stack.tasks_of(started.run_id))["a"]
        assert task.error is not None
        assert task.error.startswith("output is not storable as JSON:"), task.error
        assert where in task.error
        assert task.error_code == ErrorCode.BAD_OUTPUT
        assert task.attempt == 0


async def test_a_report_jsonb_cannot_store_fails_the_task(stack: Stack) -> None:
    """What an older SDK sends (NaN, \\u0000, too large) fails the task for good; the
    coordinator does not break on it and the report is accepted."""
    await stack.deploy(one_task("a", queue="manual", retry={"max_attempts": 3}))
    cases = {
        '{"a": NaN}': "NaN at $.a",
        '{"s": "\\u0000"}': "NUL character",
        '{"blob": "' + "z" * 1_100_000 + '"}': "COMPOSER_MAX_OUTPUT_BYTES",
    }
    for output, error in cases.items():
        started = await stack.engine.start("one-a")
        task = (await stack.tasks_of(started.run_id))["a"]
        async with grpc.aio.insecure_channel(stack.grpc_target) as channel:
            raw = RawWorker(WorkerServiceStub(channel), started.run_id, task.task_id)
            assert (await raw.lease("old-sdk")).granted
            assert await raw.report("old-sdk", output=output)
        run = await stack.wait_run(started.run_id, timeout=5)
        assert run.status is RunStatus.FAILED
        failed = (await stack.tasks_of(started.run_id))["a"]
        assert failed.state is TaskState.FAILED and failed.attempt == 0
        assert failed.error is not None and error in failed.error, failed.error


async def test_message_too_large_is_permanent_over_real_grpc(stack: Stack) -> None:
    """gRPC's own errors, both ways, as the SDK's classification expects them: a lease
    answer over the worker's receive limit is not asked for again, and an output over
    its send limit is reported as the node's failure instead."""
    await stack.deploy(one_task("a", queue="manual", spec={"blob": "{{input.blob}}"}))
    small = 64 * 1024
    client = CoordinatorClient(stack.grpc_target, TOKEN, attempts=5, max_message_bytes=small)
    try:
        started = await stack.engine.start("one-a", input={"blob": "x" * 100_000})
        task = (await stack.tasks_of(started.run_id))["a"]
        with pytest.raises(SdkError) as refused:
            await client.acquire(
                task.task_id, started.run_id, 0, "w", 30, claim="c", until=lambda: False
            )
        assert refused.value.code == MESSAGE_TOO_LARGE
        assert "Received message larger than max" in str(refused.value)

        started = await stack.engine.start("one-a", input={"blob": "x"})
        task = (await stack.tasks_of(started.run_id))["a"]
        async with grpc.aio.insecure_channel(stack.grpc_target) as channel:
            raw = RawWorker(WorkerServiceStub(channel), started.run_id, task.task_id)
            assert (await raw.lease("w")).granted
        outcome = Outcome("COMPLETED", output={"blob": "y" * 100_000})
        accepted = await client.report(
            task.task_id, started.run_id, "a", 0, "w", raw.tokens["w"], outcome, until=lambda: False
        )
        assert accepted is True
    finally:
        await client.close()
    run = await stack.wait_run(started.run_id, timeout=5)
    assert run.status is RunStatus.FAILED
    failed = (await stack.tasks_of(started.run_id))["a"]
    assert failed.error_code == ErrorCode.OUTPUT_TOO_LARGE
    assert failed.error is not None
    assert failed.error.startswith("output is 100011 bytes, over the limit of a message")
