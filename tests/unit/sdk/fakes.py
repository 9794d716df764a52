"""A fake of the coordinator's gRPC stub, so the worker's real CoordinatorClient
(retries, backoff, caps) runs in unit tests without a server."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import grpc.aio

from composer_queue import Backoff
from composer_rpc.v1 import worker_pb2 as pb
from composer_sdk._client import CoordinatorClient


def rpc_error(code: grpc.StatusCode, details: str = "") -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(
        code, grpc.aio.Metadata(), grpc.aio.Metadata(), details or code.name
    )


#: What a call answers: a reply, or a status code to fail with.
Answer = Any


@dataclass
class FakeStub:
    """Answers each call from a script (its last answer repeats), recording the requests."""

    leases: list[Answer] = field(
        default_factory=lambda: [pb.AcquireTaskLeaseResponse(granted=True)]
    )
    renewals: list[Answer] = field(default_factory=lambda: [pb.RenewTaskLeaseResponse(ok=True)])
    reports: list[Answer] = field(
        default_factory=lambda: [pb.ReportTaskResultResponse(accepted=True)]
    )
    lease_requests: list[pb.AcquireTaskLeaseRequest] = field(default_factory=list)
    report_requests: list[pb.ReportTaskResultRequest] = field(default_factory=list)
    #: Set on each report request (tests wait on it instead of sleeping).
    reported: asyncio.Event = field(default_factory=asyncio.Event)

    @staticmethod
    def _answer(script: list[Answer], n: int) -> Any:
        answer = script[min(n, len(script) - 1)]
        if isinstance(answer, grpc.StatusCode):
            raise rpc_error(answer)
        return answer

    async def AcquireTaskLease(self, request: pb.AcquireTaskLeaseRequest, **_: Any) -> Any:
        self.lease_requests.append(request)
        return self._answer(self.leases, len(self.lease_requests) - 1)

    async def RenewTaskLease(self, request: pb.RenewTaskLeaseRequest, **_: Any) -> Any:
        return self._answer(self.renewals, 0)

    async def ReportTaskResult(self, request: pb.ReportTaskResultRequest, **_: Any) -> Any:
        self.report_requests.append(request)
        self.reported.set()
        return self._answer(self.reports, len(self.report_requests) - 1)


def fast_backoff() -> Backoff:
    return Backoff(0.001, 0.005)


def client(
    stub: FakeStub, *, attempts: int = 3, backoff: Callable[[], Backoff] = fast_backoff
) -> CoordinatorClient:
    return CoordinatorClient("fake:0", "token", stub=stub, attempts=attempts, backoff=backoff)  # type: ignore[arg-type]
