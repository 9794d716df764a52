"""The WorkerService: leases and reports, applied through the engine.

A stale report is acknowledged (accepted=false) and changes nothing; a
malformed request is INVALID_ARGUMENT; a database that keeps failing is
UNAVAILABLE, so the worker keeps its message and tries again.
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import grpc.aio
from opentelemetry.trace import SpanKind

from composer_common.telemetry import extract, tracer
from composer_engine import BadRequest, Engine, EngineError, Internal, NotFound, Unavailable
from composer_rpc.v1 import worker_pb2 as pb
from composer_rpc.v1.worker_pb2_grpc import WorkerServiceServicer

log = logging.getLogger("composer.coordinator")


class WorkerService(WorkerServiceServicer):
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    # Each call runs in a span whose parent is the worker's task span (trace context in metadata).

    async def AcquireTaskLease(
        self, request: pb.AcquireTaskLeaseRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.AcquireTaskLeaseResponse:
        with _span("AcquireTaskLease", context, request.run_id, request.task_id):
            return await self._AcquireTaskLease(request, context)

    async def RenewTaskLease(
        self, request: pb.RenewTaskLeaseRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.RenewTaskLeaseResponse:
        with _span("RenewTaskLease", context, request.run_id, request.task_id):
            return await self._RenewTaskLease(request, context)

    async def ReportTaskResult(
        self, request: pb.ReportTaskResultRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ReportTaskResultResponse:
        with _span("ReportTaskResult", context, request.run_id, request.task_id):
            return await self._ReportTaskResult(request, context)

    async def _AcquireTaskLease(
        self, request: pb.AcquireTaskLeaseRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.AcquireTaskLeaseResponse:
        await _require(
            context,
            request.task_id and request.run_id and request.owner,
            "task_id, run_id and owner are required",
        )
        await _require(
            context,
            request.attempt >= 0 and request.ttl_seconds > 0,
            "attempt must be >= 0 and ttl_seconds > 0",
        )
        try:
            grant = await self.engine.acquire_lease(
                request.run_id,
                request.task_id,
                request.attempt,
                owner=request.owner,
                ttl=request.ttl_seconds,
            )
        except NotFound as exc:
            return pb.AcquireTaskLeaseResponse(granted=False, reason=exc.message)
        except EngineError as exc:
            await _abort(context, exc)
        if not grant.granted:
            return pb.AcquireTaskLeaseResponse(granted=False, reason=grant.reason)
        return pb.AcquireTaskLeaseResponse(
            granted=True,
            input_json=json.dumps(grant.input, separators=(",", ":")),
            lease_expires_at=grant.expires_at.timestamp() if grant.expires_at else 0.0,
            max_attempts=grant.max_attempts,
        )

    async def _RenewTaskLease(
        self, request: pb.RenewTaskLeaseRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.RenewTaskLeaseResponse:
        await _require(
            context,
            request.task_id and request.run_id and request.owner,
            "task_id, run_id and owner are required",
        )
        await _require(context, request.ttl_seconds > 0, "ttl_seconds must be > 0")
        try:
            expires = await self.engine.renew_lease(
                request.run_id,
                request.task_id,
                request.attempt,
                owner=request.owner,
                ttl=request.ttl_seconds,
            )
        except NotFound:
            return pb.RenewTaskLeaseResponse(ok=False)
        except EngineError as exc:
            await _abort(context, exc)
        return pb.RenewTaskLeaseResponse(
            ok=expires is not None, lease_expires_at=expires.timestamp() if expires else 0.0
        )

    async def _ReportTaskResult(
        self, request: pb.ReportTaskResultRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ReportTaskResultResponse:
        await _require(
            context,
            request.task_id and request.run_id and request.node_id and request.owner,
            "task_id, run_id, node_id and owner are required",
        )
        await _require(context, request.attempt >= 0, "attempt must be >= 0")
        try:
            if request.status == pb.TASK_STATUS_COMPLETED:
                try:
                    output = json.loads(request.output_json) if request.output_json else None
                except ValueError:
                    await context.abort(
                        grpc.StatusCode.INVALID_ARGUMENT, "output_json is not valid JSON"
                    )
                accepted = await self.engine.report_completed(
                    request.run_id,
                    request.task_id,
                    request.node_id,
                    request.attempt,
                    output,
                    owner=request.owner,
                )
            elif request.status == pb.TASK_STATUS_FAILED:
                accepted = await self.engine.report_failed(
                    request.run_id,
                    request.task_id,
                    request.node_id,
                    request.attempt,
                    request.error or "failed without a message",
                    code=request.error_code or None,
                    permanent=request.permanent,
                    owner=request.owner,
                )
            else:
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT, "status must be COMPLETED or FAILED"
                )
        except NotFound as exc:
            return pb.ReportTaskResultResponse(accepted=False, reason=exc.message)
        except EngineError as exc:
            await _abort(context, exc)
        if not accepted:
            log.info(
                "stale report for task %s attempt %d acknowledged", request.task_id, request.attempt
            )
        return pb.ReportTaskResultResponse(
            accepted=accepted, reason="" if accepted else "stale or duplicate report"
        )


def _span(name: str, context: grpc.aio.ServicerContext[Any, Any], run_id: str, task_id: str) -> Any:
    metadata = {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}
    return tracer().start_as_current_span(
        name,
        context=extract(metadata),
        kind=SpanKind.SERVER,
        attributes={"composer.run_id": run_id, "composer.task_id": task_id},
    )


async def _require(context: grpc.aio.ServicerContext[Any, Any], ok: object, message: str) -> None:
    if not ok:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, message)


async def _abort(context: grpc.aio.ServicerContext[Any, Any], exc: EngineError) -> None:
    if isinstance(exc, Unavailable):
        await context.abort(grpc.StatusCode.UNAVAILABLE, exc.message)
    if isinstance(exc, Internal):  # a bug, already logged as an ALERT: retrying cannot help
        await context.abort(grpc.StatusCode.INTERNAL, exc.message)
    if isinstance(exc, BadRequest):
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, exc.message)
    await context.abort(grpc.StatusCode.FAILED_PRECONDITION, exc.message)


class TokenAuth(grpc.aio.ServerInterceptor):
    """Refuses calls without ``authorization: Bearer <token>`` (compared in constant time)."""

    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}".encode()

        async def deny(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong worker token")

        self._deny: grpc.RpcMethodHandler[Any, Any] = grpc.unary_unary_rpc_method_handler(deny)

    async def intercept_service(  # type: ignore[override]
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        metadata = dict(handler_call_details.invocation_metadata or ())
        presented = metadata.get("authorization", "")
        if isinstance(presented, str) and hmac.compare_digest(presented.encode(), self._expected):
            return await continuation(handler_call_details)
        return self._deny
