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
from composer_rpc import protocol
from composer_rpc.v1 import worker_pb2 as pb
from composer_sdk._client import CoordinatorClient


def rpc_error(code: grpc.StatusCode, details: str = "") -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(
        code, grpc.aio.Metadata(), grpc.aio.Metadata(), details or code.name
    )


#: What a call answers: a reply, or a status code to fail with.
Answer = Any


def granted(**fields: Any) -> pb.AcquireTaskLeaseResponse:
    """A grant as the coordinator sends it: the input and node from the database."""
    answer: dict[str, Any] = {
        "granted": True,
        "input_json": '{"x": 1}',
        "lease_token": "lease-token",
        "node_id": "n1",
        "node_type": "TASK",
        "workflow_id": "wf",
        "workflow_version": 1,
        "max_attempts": 1,
    }
    return pb.AcquireTaskLeaseResponse(**(answer | fields))


@dataclass
class FakeStub:
    """Answers each call from a script (its last answer repeats), recording the requests."""

    leases: list[Answer] = field(default_factory=lambda: [granted()])
    renewals: list[Answer] = field(default_factory=lambda: [pb.RenewTaskLeaseResponse(ok=True)])
    reports: list[Answer] = field(
        default_factory=lambda: [pb.ReportTaskResultResponse(accepted=True)]
    )
    lease_requests: list[pb.AcquireTaskLeaseRequest] = field(default_factory=list)
    report_requests: list[pb.ReportTaskResultRequest] = field(default_factory=list)
    #: Set on each report request (tests wait on it instead of sleeping).
    reported: asyncio.Event = field(default_factory=asyncio.Event)
    #: False: a coordinator from before batched calls (they answer UNIMPLEMENTED).
    batched: bool = True
    #: How many batched calls were made, and how many unary ones.
    batched_calls: int = 0
    unary_calls: int = 0
    #: Heartbeats received; an UNIMPLEMENTED answer: a coordinator from before them.
    heartbeats: list[pb.HeartbeatRequest] = field(default_factory=list)
    heartbeat_answer: Answer = field(default_factory=lambda: pb.HeartbeatResponse(recorded=True))
    #: What GetCapabilities answers (its last answer repeats): this code's versions by default.
    capabilities: list[Answer] = field(
        default_factory=lambda: [
            pb.GetCapabilitiesResponse(
                protocol_version=protocol.PROTOCOL_VERSION,
                min_protocol_version=protocol.MIN_PROTOCOL_VERSION,
                features=protocol.FEATURES,
            )
        ]
    )
    capability_requests: list[pb.GetCapabilitiesRequest] = field(default_factory=list)

    @staticmethod
    def _answer(script: list[Answer], n: int) -> Any:
        answer = script[min(n, len(script) - 1)]
        if isinstance(answer, grpc.StatusCode):
            raise rpc_error(answer)
        if isinstance(answer, grpc.aio.AioRpcError):
            raise answer
        return answer

    async def AcquireTaskLease(self, request: pb.AcquireTaskLeaseRequest, **_: Any) -> Any:
        self.unary_calls += 1
        return self._lease(request)

    async def RenewTaskLease(self, request: pb.RenewTaskLeaseRequest, **_: Any) -> Any:
        self.unary_calls += 1
        return self._answer(self.renewals, 0)

    async def ReportTaskResult(self, request: pb.ReportTaskResultRequest, **_: Any) -> Any:
        self.unary_calls += 1
        return self._report(request)

    async def GetCapabilities(self, request: pb.GetCapabilitiesRequest, **_: Any) -> Any:
        self.capability_requests.append(request)
        return self._answer(self.capabilities, len(self.capability_requests) - 1)

    async def Heartbeat(self, request: pb.HeartbeatRequest, **_: Any) -> Any:
        self.heartbeats.append(request)
        return self._answer([self.heartbeat_answer], 0)

    # The batched calls answer each item from the same scripts; a status code in a
    # script fails the whole call, as a coordinator that is down would.

    async def AcquireTaskLeases(self, request: pb.AcquireTaskLeasesRequest, **_: Any) -> Any:
        self._batched_call()
        return pb.AcquireTaskLeasesResponse(items=[self._lease(i) for i in request.items])

    async def RenewTaskLeases(self, request: pb.RenewTaskLeasesRequest, **_: Any) -> Any:
        self._batched_call()
        return pb.RenewTaskLeasesResponse(
            items=[self._answer(self.renewals, 0) for _ in request.items]
        )

    async def ReportTaskResults(self, request: pb.ReportTaskResultsRequest, **_: Any) -> Any:
        self._batched_call()
        return pb.ReportTaskResultsResponse(items=[self._report(i) for i in request.items])

    def _batched_call(self) -> None:
        if not self.batched:
            raise rpc_error(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
        self.batched_calls += 1

    def _lease(self, request: pb.AcquireTaskLeaseRequest) -> Any:
        self.lease_requests.append(request)
        return self._answer(self.leases, len(self.lease_requests) - 1)

    def _report(self, request: pb.ReportTaskResultRequest) -> Any:
        self.report_requests.append(request)
        self.reported.set()
        return self._answer(self.reports, len(self.report_requests) - 1)


def fast_backoff() -> Backoff:
    return Backoff(0.001, 0.005)


def client(
    stub: FakeStub, *, attempts: int = 3, backoff: Callable[[], Backoff] = fast_backoff
) -> CoordinatorClient:
    return CoordinatorClient("fake:0", "token", stub=stub, attempts=attempts, backoff=backoff)  # type: ignore[arg-type]
