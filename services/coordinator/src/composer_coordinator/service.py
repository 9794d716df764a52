"""The WorkerService: leases and reports, applied through the engine.

A stale report is acknowledged (accepted=false) and changes nothing; a
malformed request is INVALID_ARGUMENT; a task of a queue the worker's token
does not cover is PERMISSION_DENIED; a database that keeps failing is
UNAVAILABLE, so the worker keeps its message and tries again. In a batched
call each item gets its own answer, and an item refused carries that status
as its problem.

Leases are bound to the server (docs/architecture.md §6.1): a grant carries a
fresh token that renewals and reports must present, the input and node come
from the database, and a requested TTL above ``max_lease_seconds`` is cut to it.

Sizes (docs/architecture.md, "Limits"): the engine refuses to lease an input over
the node input limit (and fails its task), and fails a reported output over the
output limit. A batched lease answer holds at most ``ANSWER_BYTES`` of grants
(or one alone): a grant past that is answered UNAVAILABLE, and the worker asks
again under the same claim, which gives it the same lease.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from importlib import metadata
from typing import Any, TypeVar

import grpc
import grpc.aio
from opentelemetry.trace import SpanKind

from composer_common.telemetry import extract, tracer
from composer_coordinator.presence import BadBeat, Presence, beat_of
from composer_coordinator.tokens import WorkerTokens
from composer_engine import (
    AttemptLog,
    BadRequest,
    Engine,
    EngineError,
    Forbidden,
    Internal,
    LeaseGrant,
    NextTask,
    NotFound,
    Report,
    Reporter,
    TakeNext,
    Unavailable,
    handler_node_types,
)
from composer_engine.records import LeaseRequest
from composer_rpc import protocol
from composer_rpc.v1 import worker_pb2 as pb
from composer_rpc.v1.worker_pb2_grpc import WorkerServiceServicer

log = logging.getLogger("composer.coordinator")


def _server_version() -> str:
    try:
        return metadata.version("composer-coordinator")
    except metadata.PackageNotFoundError:  # run from a source tree
        return "unknown"


_SERVER_VERSION = _server_version()

#: The grants of one batched lease answer, at most (more are asked for again): what
#: any worker takes in one message, whatever its own limit (gRPC's default is 4 MiB).
ANSWER_BYTES = 3 * 1024 * 1024


class Refused(Exception):
    """An item the coordinator will not take: the status a unary call fails with, or
    the Problem a batched call's item carries."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class WorkerService(WorkerServiceServicer):
    """Every call, unary or batched, goes through the engine's group commit: the
    items of concurrent calls share transactions (docs/architecture.md §3.1)."""

    def __init__(
        self,
        engine: Engine,
        tokens: WorkerTokens,
        *,
        max_lease_seconds: float = 300.0,
        presence: Presence | None = None,
    ) -> None:
        self.engine = engine
        self.tokens = tokens
        self.max_lease_seconds = max_lease_seconds
        #: Workers' heartbeats, kept for the API (composer_coordinator.presence).
        self.presence = presence or Presence(engine)

    def _queues(self, context: grpc.aio.ServicerContext[Any, Any]) -> frozenset[str] | None:
        """The queues the caller's token covers (None: all); TokenAuth let only
        configured tokens in."""
        token = self.tokens.of_metadata(_metadata(context))
        return frozenset() if token is None else self.tokens.queues(token)

    async def GetCapabilities(
        self, request: pb.GetCapabilitiesRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.GetCapabilitiesResponse:
        """What this coordinator speaks (proto/composer/v1/worker.proto, "Versions");
        an SDK it cannot serve is logged here too, since that SDK refuses to run."""
        problem = protocol.incompatible(
            request.sdk or "an SDK that did not name itself",
            request.protocol_version,
            "this coordinator",
            protocol.PROTOCOL_VERSION,
            protocol.MIN_PROTOCOL_VERSION,
        )
        if problem is not None:
            log.warning("a worker cannot run against this coordinator: %s", problem)
        return pb.GetCapabilitiesResponse(
            protocol_version=protocol.PROTOCOL_VERSION,
            min_protocol_version=protocol.MIN_PROTOCOL_VERSION,
            features=protocol.FEATURES,
            server_version=_SERVER_VERSION,
            redis_prefix=self.engine.redis_prefix,
            shards=self.engine.shards,
            redis_topology=self.engine.redis_topology,
        )

    # Each unary call runs in a span whose parent is the worker's task span (trace
    # context in metadata); a batched call in one span for all its items.

    async def AcquireTaskLease(
        self, request: pb.AcquireTaskLeaseRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.AcquireTaskLeaseResponse:
        with _span("AcquireTaskLease", context, request.run_id, request.task_id):
            return await _unary(context, self._lease(request, self._queues(context)))

    async def RenewTaskLease(
        self, request: pb.RenewTaskLeaseRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.RenewTaskLeaseResponse:
        with _span("RenewTaskLease", context, request.run_id, request.task_id):
            return await _unary(context, self._renew(request, self._queues(context)))

    async def ReportTaskResult(
        self, request: pb.ReportTaskResultRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ReportTaskResultResponse:
        with _span("ReportTaskResult", context, request.run_id, request.task_id):
            return await _unary(context, self._report(request, self._queues(context)))

    async def AcquireTaskLeases(
        self, request: pb.AcquireTaskLeasesRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.AcquireTaskLeasesResponse:
        with _span("AcquireTaskLeases", context, items=len(request.items)):
            queues = self._queues(context)
            answers = await _each(
                [self._lease(item, queues) for item in request.items],
                pb.AcquireTaskLeaseResponse,
            )
            return pb.AcquireTaskLeasesResponse(items=_within(answers, ANSWER_BYTES))

    async def RenewTaskLeases(
        self, request: pb.RenewTaskLeasesRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.RenewTaskLeasesResponse:
        with _span("RenewTaskLeases", context, items=len(request.items)):
            queues = self._queues(context)
            answers = await _each(
                [self._renew(item, queues) for item in request.items], pb.RenewTaskLeaseResponse
            )
            return pb.RenewTaskLeasesResponse(items=answers)

    async def ReportTaskResults(
        self, request: pb.ReportTaskResultsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ReportTaskResultsResponse:
        with _span("ReportTaskResults", context, items=len(request.items)):
            queues = self._queues(context)
            answers = await _each(
                [self._report(item, queues) for item in request.items],
                pb.ReportTaskResultResponse,
            )
            return pb.ReportTaskResultsResponse(items=answers)

    async def Heartbeat(
        self, request: pb.HeartbeatRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.HeartbeatResponse:
        """Keep what the worker says of itself; not a task call: no span, no engine."""
        try:
            beat = beat_of(request, self._queues(context))
        except BadBeat as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            raise  # pragma: no cover - abort raises
        try:
            recorded = await self.presence.record(beat)
        except EngineError as exc:
            await context.abort(
                grpc.StatusCode.UNAVAILABLE, f"recording the heartbeat failed: {exc}"
            )
            raise  # pragma: no cover - abort raises
        return pb.HeartbeatResponse(recorded=recorded)

    # -- one item ----------------------------------------------------------------

    async def _lease(
        self, request: pb.AcquireTaskLeaseRequest, queues: frozenset[str] | None
    ) -> pb.AcquireTaskLeaseResponse:
        _require(
            request.task_id and request.run_id and request.owner,
            "task_id, run_id and owner are required",
        )
        _require(
            request.attempt >= 0 and request.ttl_seconds > 0,
            "attempt must be >= 0 and ttl_seconds > 0",
        )
        ttl = min(request.ttl_seconds, self.max_lease_seconds)
        try:
            grant = await self.engine.lease(  # in the next batch of leases
                LeaseRequest(
                    request.run_id,
                    request.task_id,
                    request.attempt,
                    request.owner,
                    ttl,
                    claim=request.claim,
                    queues=queues,
                    # not sent by a worker older than these checks: not checked for it
                    queue=request.queue or None,
                    node_types=handler_node_types(request.node_types),
                )
            )
        except NotFound as exc:
            return pb.AcquireTaskLeaseResponse(granted=False, reason=exc.message)
        except EngineError as exc:
            raise _refused(exc) from exc
        if not grant.granted:
            return pb.AcquireTaskLeaseResponse(granted=False, reason=grant.reason)
        return _granted(grant, ttl)

    async def _renew(
        self, request: pb.RenewTaskLeaseRequest, queues: frozenset[str] | None
    ) -> pb.RenewTaskLeaseResponse:
        _require(
            request.task_id and request.run_id and request.owner and request.lease_token,
            "task_id, run_id, owner and lease_token are required",
        )
        _require(request.ttl_seconds > 0, "ttl_seconds must be > 0")
        try:
            expires = await self.engine.renew(  # in the next batch of renewals
                LeaseRequest(
                    request.run_id,
                    request.task_id,
                    request.attempt,
                    request.owner,
                    min(request.ttl_seconds, self.max_lease_seconds),
                    token=request.lease_token,
                    queues=queues,
                )
            )
        except NotFound:
            return pb.RenewTaskLeaseResponse(ok=False)
        except EngineError as exc:
            raise _refused(exc) from exc
        return pb.RenewTaskLeaseResponse(
            ok=expires is not None, lease_expires_at=expires.timestamp() if expires else 0.0
        )

    async def _report(
        self, request: pb.ReportTaskResultRequest, queues: frozenset[str] | None
    ) -> pb.ReportTaskResultResponse:
        _require(
            request.task_id and request.run_id and request.node_id and request.owner,
            "task_id, run_id, node_id and owner are required",
        )
        _require(
            request.lease_token,
            "lease_token is required: send the token the lease was granted with "
            "(a worker older than the coordinator must be upgraded)",
        )
        reporter = Reporter(request.lease_token, request.owner, queues)
        _require(request.attempt >= 0, "attempt must be >= 0")
        take_next = self._take_next(request)
        if request.status == pb.TASK_STATUS_COMPLETED:
            try:
                output = json.loads(request.output_json) if request.output_json else None
            except ValueError:
                raise Refused(
                    grpc.StatusCode.INVALID_ARGUMENT, "output_json is not valid JSON"
                ) from None
            report = Report(
                request.run_id,
                request.task_id,
                request.node_id,
                request.attempt,
                reporter,
                completed=True,
                output=output,
                log=_attempt_log(request),
                take_next=take_next,
            )
        elif request.status == pb.TASK_STATUS_FAILED:
            report = Report(
                request.run_id,
                request.task_id,
                request.node_id,
                request.attempt,
                reporter,
                completed=False,
                error=request.error or "failed without a message",
                code=request.error_code or None,
                permanent=request.permanent,
                log=_attempt_log(request),
                take_next=take_next,
            )
        else:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, "status must be COMPLETED or FAILED")
        try:
            accepted = await self.engine.report(report)  # in the next group commit
        except NotFound as exc:
            return pb.ReportTaskResultResponse(accepted=False, reason=exc.message)
        except EngineError as exc:
            raise _refused(exc) from exc
        if not accepted:
            log.info(
                "stale report for task %s attempt %d acknowledged", request.task_id, request.attempt
            )
        if isinstance(accepted, NextTask):
            assert take_next is not None
            return pb.ReportTaskResultResponse(
                accepted=True,
                next=pb.NextTask(
                    message=accepted.fields, lease=_granted(accepted.grant, take_next.ttl)
                ),
            )
        return pb.ReportTaskResultResponse(
            accepted=accepted, reason="" if accepted else "stale or duplicate report"
        )

    def _take_next(self, request: pb.ReportTaskResultRequest) -> TakeNext | None:
        """The report's offer to run a task it dispatches (None: it makes none)."""
        if not request.HasField("take_next"):
            return None
        offer = request.take_next
        _require(
            offer.queue and offer.ttl_seconds > 0,
            "take_next needs the handler's queue and ttl_seconds > 0",
        )
        return TakeNext(
            offer.queue,
            handler_node_types(offer.node_types),
            min(offer.ttl_seconds, self.max_lease_seconds),
        )


def _granted(grant: LeaseGrant, ttl: float) -> pb.AcquireTaskLeaseResponse:
    """A granted lease as the worker is answered it, with the TTL granted."""
    return pb.AcquireTaskLeaseResponse(
        granted=True,
        input_json=grant.input_json or json.dumps(grant.input, separators=(",", ":")),
        lease_expires_at=grant.expires_at.timestamp() if grant.expires_at else 0.0,
        max_attempts=grant.max_attempts,
        lease_token=grant.token,
        node_id=grant.node_id,
        node_type=grant.node_type.value if grant.node_type is not None else "",
        workflow_id=grant.workflow_id,
        workflow_version=grant.workflow_version,
        timeout_seconds=grant.timeout_seconds or 0.0,
        ttl_seconds=ttl,
        context_json=""
        if grant.context is None
        else json.dumps(grant.context, separators=(",", ":"), ensure_ascii=False),
    )


#: What the coordinator stores of one attempt's log at most, whatever a worker sends:
#: the SDK bounds it first (COMPOSER_TASK_LOG_MAX_BYTES, 64 KiB unless changed), so only
#: a worker that does not (an old or a foreign one) meets these.
MAX_LOG_LINES = 10_000
MAX_LOG_BYTES = 1024 * 1024


def _attempt_log(request: pb.ReportTaskResultRequest) -> AttemptLog | None:
    """The report's log lines, cut to the coordinator's bound (with the marker line a
    worker writes) when a worker sent more."""
    if not request.log_lines:
        return None
    # a NUL, which a TEXT column refuses, must not fail the report's transaction
    lines = [line.replace("\x00", "\ufffd") for line in request.log_lines]
    truncated = max(0, request.log_truncated)
    size = 0
    for i, line in enumerate(lines):
        size += len(line.encode()) + 1
        if i >= MAX_LOG_LINES or size > MAX_LOG_BYTES:
            truncated += len(lines) - i
            lines = [*lines[:i], f"… {truncated} lines truncated"]
            break
    return AttemptLog(tuple(lines), truncated)


Answer = TypeVar(
    "Answer", pb.AcquireTaskLeaseResponse, pb.RenewTaskLeaseResponse, pb.ReportTaskResultResponse
)


async def _unary(context: grpc.aio.ServicerContext[Any, Any], item: Awaitable[Answer]) -> Answer:
    try:
        return await item
    except Refused as exc:
        await context.abort(exc.code, exc.message)
        raise  # pragma: no cover - abort raises


async def _each(items: list[Awaitable[Answer]], answer: type[Answer]) -> list[Answer]:
    """Every item's answer, in order; an item refused carries its problem."""
    results = await asyncio.gather(*items, return_exceptions=True)
    out: list[Answer] = []
    for result in results:
        if isinstance(result, Refused):
            out.append(answer(problem=pb.Problem(code=result.code.name, message=result.message)))
        elif isinstance(result, BaseException):
            raise result
        else:
            out.append(result)
    return out


def _within(
    answers: list[pb.AcquireTaskLeaseResponse], budget: int
) -> list[pb.AcquireTaskLeaseResponse]:
    """``answers``, with each grant past ``budget`` bytes (the first always fits)
    replaced by UNAVAILABLE: asked for again under its claim, it is granted again."""
    size = 0
    out: list[pb.AcquireTaskLeaseResponse] = []
    for answer in answers:
        n = answer.ByteSize()
        if size and size + n > budget:
            problem = pb.Problem(
                code=grpc.StatusCode.UNAVAILABLE.name,
                message="this answer is full: ask for the lease again with the same claim",
            )
            out.append(pb.AcquireTaskLeaseResponse(problem=problem))
            continue
        size += n
        out.append(answer)
    return out


def _require(ok: object, message: str) -> None:
    if not ok:
        raise Refused(grpc.StatusCode.INVALID_ARGUMENT, message)


def _refused(exc: EngineError) -> Refused:
    if isinstance(exc, Unavailable):
        return Refused(grpc.StatusCode.UNAVAILABLE, exc.message)
    if isinstance(exc, Internal):  # a bug, already logged as an ALERT: retrying cannot help
        return Refused(grpc.StatusCode.INTERNAL, exc.message)
    if isinstance(exc, BadRequest):
        return Refused(grpc.StatusCode.INVALID_ARGUMENT, exc.message)
    if isinstance(exc, Forbidden):
        return Refused(grpc.StatusCode.PERMISSION_DENIED, exc.message)
    # Misrouted among them: the entry cannot stand for its attempt; the worker drops it
    return Refused(grpc.StatusCode.FAILED_PRECONDITION, exc.message)


def _span(
    name: str,
    context: grpc.aio.ServicerContext[Any, Any],
    run_id: str = "",
    task_id: str = "",
    *,
    items: int | None = None,
) -> Any:
    metadata = {k: v for k, v in _metadata(context) if isinstance(v, str)}
    attributes: dict[str, str | int] = (
        {"composer.items": items}
        if items is not None
        else {"composer.run_id": run_id, "composer.task_id": task_id}
    )
    return tracer().start_as_current_span(
        name, context=extract(metadata), kind=SpanKind.SERVER, attributes=attributes
    )


def _metadata(context: grpc.aio.ServicerContext[Any, Any]) -> Sequence[tuple[str, str | bytes]]:
    return tuple(context.invocation_metadata() or ())


class TokenAuth(grpc.aio.ServerInterceptor):
    """Refuses calls without ``authorization: Bearer <token>`` of a configured token
    (compared in constant time); what the token covers is the service's to check."""

    def __init__(self, tokens: WorkerTokens) -> None:
        self._tokens = tokens

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
        metadata = tuple(handler_call_details.invocation_metadata or ())
        if self._tokens.of_metadata(metadata) is not None:
            return await continuation(handler_call_details)
        return self._deny
