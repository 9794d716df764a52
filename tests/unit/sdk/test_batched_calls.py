"""The SDK's coordinator client batches what its tasks ask (docs/architecture.md §3.1)."""

from __future__ import annotations

import asyncio

import grpc

from composer_rpc.v1 import worker_pb2 as pb
from composer_sdk._handler import Outcome
from tests.unit.sdk.fakes import FakeStub, client


def never() -> bool:
    return False


async def test_reports_asked_while_a_call_is_in_flight_go_together() -> None:
    stub = FakeStub()
    c = client(stub)
    outcome = Outcome("COMPLETED", output={})
    results = await asyncio.gather(
        *(c.report(f"t{i}", "r", "n", 0, "w", "tok", outcome, until=never) for i in range(10))
    )
    assert results == [True] * 10
    assert len(stub.report_requests) == 10
    assert stub.batched_calls < 10 and stub.unary_calls == 0


async def test_an_item_refused_in_a_batch_fails_alone() -> None:
    stub = FakeStub(
        leases=[
            pb.AcquireTaskLeaseResponse(granted=True),
            pb.AcquireTaskLeaseResponse(problem=pb.Problem(code="INVALID_ARGUMENT", message="no")),
        ]
    )
    c = client(stub)
    ok, refused = await asyncio.gather(
        c.acquire("t1", "r", 0, "w", 30, claim="c", until=never),
        c.acquire("t2", "r", 0, "w", 30, claim="c", until=never),
        return_exceptions=True,
    )
    assert not isinstance(ok, BaseException) and ok is not None and ok.granted
    assert isinstance(refused, Exception) and "INVALID_ARGUMENT" in str(refused)


async def test_a_coordinator_without_batched_calls_gets_unary_ones() -> None:
    stub = FakeStub(batched=False)
    c = client(stub)
    lease = await c.acquire("t", "r", 0, "w", 30, claim="c", until=never)
    assert lease is not None and lease.granted
    assert c.batched is False and stub.unary_calls == 1
    assert await c.renew("t", "r", 0, "w", 30, "tok") is True
    assert stub.unary_calls == 2


async def test_an_unavailable_batch_is_retried_for_each_item() -> None:
    stub = FakeStub(
        reports=[grpc.StatusCode.UNAVAILABLE, pb.ReportTaskResultResponse(accepted=True)]
    )
    c = client(stub)
    outcome = Outcome("COMPLETED", output={})
    assert await c.report("t", "r", "n", 0, "w", "tok", outcome, until=never) is True
    assert len(stub.report_requests) == 2
