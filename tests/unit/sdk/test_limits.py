"""Sizes in the SDK: "message too large" is permanent, never retried; an output the
coordinator would refuse fails the attempt before it is sent (docs/architecture.md,
"Limits")."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from composer_queue.testing import FakeQueue
from composer_rpc.v1 import worker_pb2 as pb
from composer_sdk import TaskContext
from composer_sdk._client import CALL_BYTES, MESSAGE_TOO_LARGE, too_large
from composer_sdk._handler import Outcome
from composer_sdk.errors import CoordinatorUnavailable, SdkError
from composer_sdk.testing import handler_outcome
from tests.unit.sdk.fakes import FakeStub, client, rpc_error
from tests.unit.sdk.test_worker import message, publish, running, stored, until

RECEIVED = "Received message larger than max (4700095 vs. 4194304)"
SENT = "Sent message larger than max (5000153 vs. 4194304)"


def never() -> bool:
    return False


def test_message_too_large_is_told_from_load() -> None:
    assert too_large(rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED, f"CLIENT: {RECEIVED}"))
    assert too_large(rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED, SENT))
    assert not too_large(rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "too many streams"))
    assert not too_large(rpc_error(grpc.StatusCode.INTERNAL, RECEIVED))


@pytest.mark.parametrize("details", [f"CLIENT: {RECEIVED}", f"SERVER: {RECEIVED}", SENT])
async def test_a_lease_answer_too_large_is_not_asked_for_again(details: str) -> None:
    stub = FakeStub(leases=[rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED, details)])
    with pytest.raises(SdkError) as refused:
        await client(stub, attempts=5).acquire("t", "r", 0, "w", 30, claim="c", until=never)
    assert refused.value.code == MESSAGE_TOO_LARGE
    assert not isinstance(refused.value, CoordinatorUnavailable)
    assert len(stub.lease_requests) == 1  # never retried


async def test_other_resource_exhaustion_is_still_retried() -> None:
    stub = FakeStub(
        leases=[
            rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "max concurrent streams"),
            pb.AcquireTaskLeaseResponse(granted=True),
        ]
    )
    lease = await client(stub).acquire("t", "r", 0, "w", 30, claim="c", until=never)
    assert lease is not None and lease.granted and len(stub.lease_requests) == 2


async def test_an_output_too_large_for_a_message_is_reported_as_a_failure() -> None:
    stub = FakeStub(
        reports=[
            rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED, SENT),
            pb.ReportTaskResultResponse(accepted=True),
        ]
    )
    outcome = Outcome("COMPLETED", output={"blob": "x" * 1000})
    accepted = await client(stub).report("t", "r", "n", 0, "w", "tok", outcome, until=never)
    assert accepted is True
    first, instead = stub.report_requests
    assert first.status == pb.TASK_STATUS_COMPLETED
    assert instead.status == pb.TASK_STATUS_FAILED and instead.permanent
    assert instead.error_code == "output_too_large" and instead.output_json == ""
    assert instead.error.startswith("output is 1011 bytes, over the limit of a message")


async def test_a_failure_too_large_for_a_message_is_cut_short() -> None:
    stub = FakeStub(
        reports=[
            rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED, SENT),
            pb.ReportTaskResultResponse(accepted=True),
        ]
    )
    outcome = Outcome("FAILED", error="e" * 100_000, code="exception")
    assert await client(stub).report("t", "r", "n", 0, "w", "tok", outcome, until=never)
    _, instead = stub.report_requests
    assert len(instead.error) < 3000 and instead.error_code == "exception"
    assert not instead.permanent  # a retryable failure stays retryable


async def test_a_batched_call_carries_at_most_its_byte_budget() -> None:
    stub = FakeStub()
    c = client(stub)
    blob = "x" * (CALL_BYTES // 3)  # three fit with nothing else, four do not
    outcome = Outcome("COMPLETED", output={"blob": blob})
    results = await asyncio.gather(
        *(c.report(f"t{i}", "r", "n", 0, "w", "tok", outcome, until=never) for i in range(8))
    )
    assert results == [True] * 8
    assert stub.batched_calls >= 3  # 8 items of a third of the budget: three calls at least


async def test_a_batched_answer_too_large_is_asked_for_item_by_item() -> None:
    """A coordinator that does not bound its answers: each grant alone may fit."""

    class Oversized(FakeStub):
        async def AcquireTaskLeases(self, request: Any, **_: Any) -> Any:
            self._batched_call()
            if len(request.items) > 1:
                raise rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED, f"CLIENT: {RECEIVED}")
            return await super().AcquireTaskLeases(request)

    stub = Oversized()
    c = client(stub)
    leases = await asyncio.gather(
        *(c.acquire(f"t{i}", "r", 0, "w", 30, claim=f"c{i}", until=never) for i in range(4))
    )
    assert all(lease is not None and lease.granted for lease in leases)


async def test_the_worker_drops_an_entry_whose_lease_answer_is_too_large() -> None:
    """Not retried forever, and the worker goes on with the next entry."""
    queue = FakeQueue()
    stub = FakeStub(
        leases=[
            rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED, f"CLIENT: {RECEIVED}"),
            pb.AcquireTaskLeaseResponse(
                granted=True, input_json="{}", lease_token="t", node_type="TASK"
            ),
        ]
    )

    async def ok(ctx: TaskContext, input: Any) -> dict[str, Any]:
        return {}

    async with running(ok, stub, queue, attempts=5, concurrency=1, prefetch=1) as worker:
        await publish(queue, message("t1"))
        await until(lambda: worker.skipped == 1, "the entry was dropped")
        await publish(queue, message("t2"))
        await until(lambda: worker.completed == 1, "the next task ran")
    assert worker.abandoned == 0 and await stored(queue) == 0


@pytest.mark.parametrize(
    ("output", "where"),
    [
        ({"a": {"b": float("nan")}}, "NaN at $.a.b"),
        ({"a": [1, float("inf")]}, "Infinity at $.a[1]"),
        ({"a": [{"t": "x\u0000y"}]}, "a NUL character (\\u0000) at $.a[0].t"),
        ({"k\u0000": 1}, "a NUL character (\\u0000) in a key at $"),
        ({"s": "\ud800"}, "a lone surrogate (not valid Unicode text) at $.s"),
    ],
)
async def test_an_output_jsonb_cannot_store_fails_for_good(output: Any, where: str) -> None:
    async def returns(ctx: TaskContext, input: Any) -> Any:
        return output

    outcome = await handler_outcome(returns, {})
    assert (outcome.status, outcome.code, outcome.permanent) == ("FAILED", "bad_output", True)
    assert outcome.error == f"output is not storable as JSON: {where}"


async def test_a_backslash_u0000_in_text_is_storable() -> None:
    async def returns(ctx: TaskContext, input: Any) -> Any:
        return {"escaped": "\\u0000"}  # a backslash, then u0000: six characters

    outcome = await handler_outcome(returns, {})
    assert outcome.status == "COMPLETED"
    assert outcome.output_json == '{"escaped":"\\\\u0000"}'


async def test_an_output_over_the_limit_fails_for_good_before_it_is_sent() -> None:
    async def big(ctx: TaskContext, input: Any) -> Any:
        return {"blob": "x" * 2_000_000}

    outcome = await handler_outcome(big, {})
    assert (outcome.status, outcome.code, outcome.permanent) == (
        "FAILED",
        "output_too_large",
        True,
    )
    assert outcome.error == ("output is 2.0 MB, over the 1 MiB limit (COMPOSER_MAX_OUTPUT_BYTES)")
