"""The worker's side of the coordinator protocol, with retries on transient failures.

Calls are batched (docs/architecture.md §3.1): what the worker's tasks ask while a
call of the same kind is in flight goes together in the next one
(AcquireTaskLeases, RenewTaskLeases, ReportTaskResults), each item with its own
answer. A coordinator too old for batched calls answers UNIMPLEMENTED, and the
client goes back to one unary call per item.

Message sizes (docs/architecture.md, "Limits"): the channel's send and receive
limits are set explicitly (``max_message_bytes``, above the coordinator's data
limits), a batched call carries at most ``CALL_BYTES`` of items (or one item
alone), and "message too large" is permanent, never retried: the same message
would be too large again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

import grpc
import grpc.aio

from composer_common.batching import Batcher
from composer_common.telemetry import inject
from composer_queue import Backoff
from composer_rpc import protocol
from composer_rpc.codes import ErrorCode
from composer_rpc.v1 import worker_pb2 as pb
from composer_rpc.v1.worker_pb2_grpc import WorkerServiceStub
from composer_sdk._handler import Outcome
from composer_sdk.errors import CoordinatorUnavailable, SdkError

if TYPE_CHECKING:  # the async stub's class exists only in the generated type stubs
    from composer_rpc.v1.worker_pb2_grpc import WorkerServiceAsyncStub

log = logging.getLogger("composer.sdk")
T = TypeVar("T")
_TRANSIENT = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    }
)


#: The gRPC message limit of the worker's channel, both ways: well above the data
#: limits (1 MiB by default) so that a node input or an output under its limit fits.
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
#: The items of one batched call, at most (more go in further calls; an item larger
#: than this goes alone): what any coordinator accepts, whatever its own limits.
CALL_BYTES = 3 * 1024 * 1024
#: SdkError.code of a call whose message was too large, sent or received: permanent.
MESSAGE_TOO_LARGE = "MESSAGE_TOO_LARGE"
#: The longest error text reported again after its report was too large.
_SHORT_ERROR = 2000


def channel_options(max_message_bytes: int) -> list[tuple[str, int]]:
    """The gRPC channel options that set the message limits, both ways."""
    return [
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
    ]


def too_large(exc: grpc.aio.AioRpcError | ItemRefused) -> bool:
    """Whether ``exc`` is a message over a gRPC size limit: RESOURCE_EXHAUSTED, "Received
    message larger than max" (either side's receive limit) or "Sent message larger than
    max" (this side's send limit). Any other RESOURCE_EXHAUSTED is load, and transient."""
    return exc.code() is grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in (
        exc.details() or ""
    )


class ItemRefused(Exception):
    """One item of a batched call that the coordinator refused: the status a unary
    call for it would have failed with (the same ``code()`` and ``details()``)."""

    def __init__(self, problem: pb.Problem) -> None:
        super().__init__(f"{problem.code}: {problem.message}")
        self._code = getattr(grpc.StatusCode, problem.code, grpc.StatusCode.UNKNOWN)
        self._details = problem.message

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


Failure = grpc.aio.AioRpcError | ItemRefused


@dataclass(frozen=True, slots=True)
class Lease:
    """The coordinator's answer to a lease request: with a grant, the lease's token
    and everything the handler runs, from the database (never from the stream)."""

    granted: bool
    reason: str = ""
    input_json: str = ""
    expires_at: float = 0.0
    max_attempts: int = 1
    #: time.monotonic() when the request that got this answer was sent: the lease
    #: runs out no earlier than ``asked_at + ttl`` by this process's own clock.
    asked_at: float = 0.0
    #: The lease's secret: renewals and reports present it.
    token: str = ""
    node_id: str = ""
    node_type: str = ""
    workflow_id: str = ""
    workflow_version: int = 0
    #: The node's timeout (None: the worker's default).
    timeout_seconds: float | None = None
    #: The TTL granted (the coordinator cuts one above its maximum); 0: as asked.
    ttl: float = 0.0
    #: The run's calling context as JSON ("": none, or a coordinator that predates it).
    context_json: str = ""


@dataclass(frozen=True, slots=True)
class TakeNext:
    """A report's offer to run next a task it dispatches: the reporting handler's queue
    and node types, and the lease TTL it asks (docs/architecture.md §3.2)."""

    queue: str
    node_types: Collection[str]
    ttl: float


@dataclass(frozen=True, slots=True)
class NextTask:
    """A task leased to this worker with its report's answer: its stream message's
    fields (as an entry would carry them) and its granted lease."""

    fields: dict[str, str]
    lease: Lease


class Coordinator(Protocol):
    """What the worker asks of the coordinator (``CoordinatorClient``; tests give a fake)."""

    async def acquire(
        self,
        task_id: str,
        run_id: str,
        attempt: int,
        owner: str,
        ttl: float,
        *,
        claim: str,
        until: Callable[[], bool],
        queue: str = "",
        node_types: Collection[str] = (),
    ) -> Lease | None: ...

    async def renew(
        self, task_id: str, run_id: str, attempt: int, owner: str, ttl: float, token: str
    ) -> bool | None: ...

    async def report(
        self,
        task_id: str,
        run_id: str,
        node_id: str,
        attempt: int,
        owner: str,
        token: str,
        outcome: Outcome,
        *,
        until: Callable[[], bool],
        take_next: TakeNext | None = None,
    ) -> bool | NextTask | None: ...

    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Presence:
    """What a worker's heartbeat says of it (the coordinator keeps it for the API)."""

    worker_id: str
    host: str
    queues: tuple[str, ...]
    concurrency: int
    in_flight: int
    sdk_version: str
    #: SERVING, DRAINING or STOPPED.
    state: str
    #: When the worker started serving, in seconds since the Unix epoch.
    started_at: float


@runtime_checkable
class Beats(Protocol):
    """A coordinator client that carries heartbeats (``CoordinatorClient``; a test's
    fake may not, and its worker then sends none)."""

    async def heartbeat(self, presence: Presence, *, timeout: float | None = None) -> bool: ...


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What the coordinator speaks (GetCapabilities): its protocol version, the oldest
    SDK version it serves, and its features by name."""

    protocol_version: int
    min_protocol_version: int
    features: frozenset[str]
    server_version: str = ""
    #: Where the coordinator's engine publishes tasks ("" / 0: it did not say).
    redis_prefix: str = ""
    shards: int = 0
    #: "server" or "cluster": how the engine reaches Redis ("": it did not say).
    redis_topology: str = ""


@runtime_checkable
class Versioned(Protocol):
    """A coordinator client that can ask what the coordinator speaks (``CoordinatorClient``;
    a test's fake may not, and its worker then checks nothing)."""

    async def capabilities(self, sdk: str, *, until: Callable[[], bool]) -> Capabilities | None: ...


_WORKER_STATES = {
    "SERVING": pb.WORKER_STATE_SERVING,
    "DRAINING": pb.WORKER_STATE_DRAINING,
    "STOPPED": pb.WORKER_STATE_STOPPED,
}


class CoordinatorClient:
    """The coordinator over gRPC.

    A transient status (UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED) is
    retried with jittered backoff, at most ``attempts`` times per call, then
    ``CoordinatorUnavailable`` is raised; any other status raises ``SdkError``
    at once (INTERNAL is a server bug: asking again in a loop only adds load),
    and so does a message too large (``too_large``: code ``MESSAGE_TOO_LARGE``).
    ``stub`` replaces the gRPC stub (tests).
    """

    def __init__(
        self,
        target: str,
        token: str,
        *,
        call_timeout: float = 10.0,
        attempts: int = 10,
        backoff: Callable[[], Backoff] = lambda: Backoff(0.05, 5.0),
        stub: WorkerServiceAsyncStub | None = None,
        batch_size: int = 128,
        calls_in_flight: int = 2,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        tls_ca_file: str | None = None,
    ) -> None:
        """``batch_size`` items at most per call; ``calls_in_flight`` calls of one kind
        at once, what the tasks ask meanwhile waiting for the next; ``max_message_bytes``
        the largest message sent or received. With ``tls_ca_file`` (a PEM file of the
        CA that signed the coordinator's certificate) the channel is TLS, and a
        coordinator whose certificate that CA did not sign for the target's host name
        gets no call; without it, plaintext."""
        if attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {attempts}")
        self._channel: grpc.aio.Channel | None = None
        self.max_message_bytes = max_message_bytes
        options = channel_options(max_message_bytes)
        if stub is None:
            self._channel = _channel(target, tls_ca_file, options)
            stub = WorkerServiceStub(self._channel)
        self._stub = stub
        self._metadata = (("authorization", f"Bearer {token}"),)
        self._timeout = call_timeout
        self._attempts = attempts
        self._backoff = backoff
        self.target = target
        #: False once the coordinator said it has no batched calls (UNIMPLEMENTED).
        self.batched = True
        size, flight = batch_size, calls_in_flight
        self._leases: Batcher[pb.AcquireTaskLeaseRequest, pb.AcquireTaskLeaseResponse] = Batcher(
            self._calls("AcquireTaskLeases", pb.AcquireTaskLeasesRequest, "AcquireTaskLease"),
            max_size=size,
            max_in_flight=flight,
            name="AcquireTaskLeases",
        )
        self._renewals: Batcher[pb.RenewTaskLeaseRequest, pb.RenewTaskLeaseResponse] = Batcher(
            self._calls("RenewTaskLeases", pb.RenewTaskLeasesRequest, "RenewTaskLease"),
            max_size=size,
            max_in_flight=flight,
            name="RenewTaskLeases",
        )
        self._reports: Batcher[pb.ReportTaskResultRequest, pb.ReportTaskResultResponse] = Batcher(
            self._calls("ReportTaskResults", pb.ReportTaskResultsRequest, "ReportTaskResult"),
            max_size=size,
            max_in_flight=flight,
            name="ReportTaskResults",
        )

    def _md(self) -> tuple[tuple[str, str], ...]:
        """The token, and the current trace context so the coordinator's spans join the task's trace."""
        return self._metadata + tuple(inject({}).items())

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()

    async def acquire(
        self,
        task_id: str,
        run_id: str,
        attempt: int,
        owner: str,
        ttl: float,
        *,
        claim: str,
        until: Callable[[], bool],
        queue: str = "",
        node_types: Collection[str] = (),
    ) -> Lease | None:
        """Take the lease; None if ``until()`` turned true while the coordinator was unreachable.

        ``claim`` is this request's random name: sent again after a lost answer, the
        request gets the same lease back. ``queue`` is the queue whose stream the entry
        was read from and ``node_types`` the node types the handler runs: the
        coordinator grants no attempt of another queue or type, nor one not due yet
        (SdkError, code FAILED_PRECONDITION). Raises CoordinatorUnavailable when every
        attempt failed transiently.
        """
        request = pb.AcquireTaskLeaseRequest(
            task_id=task_id,
            run_id=run_id,
            attempt=attempt,
            owner=owner,
            ttl_seconds=ttl,
            claim=claim,
            queue=queue,
            node_types=sorted(node_types),
        )
        asked_at = 0.0

        def call() -> Awaitable[pb.AcquireTaskLeaseResponse]:
            nonlocal asked_at
            asked_at = time.monotonic()
            return self._leases.submit(request)

        reply = await self._retry("AcquireTaskLease", call, until)
        if reply is None:
            return None
        return _lease(reply, asked_at)

    async def renew(
        self, task_id: str, run_id: str, attempt: int, owner: str, ttl: float, token: str
    ) -> bool | None:
        """True: renewed; False: the lease is lost; None: the coordinator did not answer this time."""
        request = pb.RenewTaskLeaseRequest(
            task_id=task_id,
            run_id=run_id,
            attempt=attempt,
            owner=owner,
            ttl_seconds=ttl,
            lease_token=token,
        )
        try:
            reply = await self._renewals.submit(request)
        except (grpc.aio.AioRpcError, ItemRefused) as exc:
            if exc.code() in _TRANSIENT and not too_large(exc):
                log.warning("renewing the lease of task %s failed: %s", task_id, exc.details())
                return None
            raise _fatal(exc) from exc
        return bool(reply.ok)

    async def report(
        self,
        task_id: str,
        run_id: str,
        node_id: str,
        attempt: int,
        owner: str,
        token: str,
        outcome: Outcome,
        *,
        until: Callable[[], bool],
        take_next: TakeNext | None = None,
    ) -> bool | NextTask | None:
        """Report an outcome; True accepted, False stale, None if ``until()`` turned true
        while the coordinator was unreachable. With ``take_next``, an accepted report may
        be answered with a task it dispatched, leased to this worker (``NextTask``): the
        caller runs it (or lets its lease run out).

        Raises CoordinatorUnavailable when every attempt failed transiently,
        SdkError when the coordinator answered with an error (INTERNAL, ...).
        A report too large for a message is sent again as a permanent failure that
        says so (an output) or with its error cut short (a failure).
        """
        try:
            return await self._report(
                task_id, run_id, node_id, attempt, owner, token, outcome, until, take_next
            )
        except SdkError as exc:
            if exc.code != MESSAGE_TOO_LARGE:
                raise
            instead = _smaller(outcome, exc)
            log.error("task %s attempt %d: %s; reporting a failure instead", task_id, attempt, exc)
        return await self._report(
            task_id, run_id, node_id, attempt, owner, token, instead, until, take_next
        )

    async def _report(
        self,
        task_id: str,
        run_id: str,
        node_id: str,
        attempt: int,
        owner: str,
        token: str,
        outcome: Outcome,
        until: Callable[[], bool],
        take_next: TakeNext | None = None,
    ) -> bool | NextTask | None:
        request = pb.ReportTaskResultRequest(
            task_id=task_id,
            run_id=run_id,
            node_id=node_id,
            attempt=attempt,
            owner=owner,
            lease_token=token,
            status=pb.TASK_STATUS_COMPLETED
            if outcome.status == "COMPLETED"
            else pb.TASK_STATUS_FAILED,
            output_json=outcome.output_json if outcome.status == "COMPLETED" else "",
            error=outcome.error,
            error_code=outcome.code or "",
            permanent=outcome.permanent,
            log_lines=outcome.log_lines,
            log_truncated=outcome.log_truncated,
        )
        if take_next is not None:
            request.take_next.queue = take_next.queue
            request.take_next.node_types.extend(sorted(take_next.node_types))
            request.take_next.ttl_seconds = take_next.ttl
        asked_at = 0.0

        def call() -> Awaitable[pb.ReportTaskResultResponse]:
            nonlocal asked_at
            asked_at = time.monotonic()
            return self._reports.submit(request)

        reply = await self._retry("ReportTaskResult", call, until)
        if reply is None:
            return None
        if reply.accepted and reply.HasField("next") and reply.next.lease.granted:
            return NextTask(dict(reply.next.message), _lease(reply.next.lease, asked_at))
        return bool(reply.accepted)

    async def capabilities(self, sdk: str, *, until: Callable[[], bool]) -> Capabilities | None:
        """Ask what the coordinator speaks (retried while it is unreachable, like any
        call); None if ``until()`` turned true meanwhile. Raises SdkError, naming both
        versions, for a coordinator outside this SDK's protocol version, including one
        that predates GetCapabilities (UNIMPLEMENTED)."""
        request = pb.GetCapabilitiesRequest(protocol_version=protocol.PROTOCOL_VERSION, sdk=sdk)
        try:
            reply = await self._retry(
                "GetCapabilities",
                lambda: self._stub.GetCapabilities(
                    request, metadata=self._metadata, timeout=self._timeout
                ),
                until,
            )
        except SdkError as exc:
            if exc.code != grpc.StatusCode.UNIMPLEMENTED.name:
                raise
            raise SdkError(
                f"the coordinator at {self.target} predates worker protocol versions (it has "
                f"no GetCapabilities call: version 0); this SDK ({sdk}) speaks protocol "
                f"version {protocol.PROTOCOL_VERSION}: upgrade the coordinator",
                code=exc.code,
            ) from exc
        if reply is None:
            return None
        problem = protocol.incompatible(
            sdk,
            protocol.PROTOCOL_VERSION,
            self.target,
            reply.protocol_version,
            reply.min_protocol_version,
        )
        if problem is not None:
            raise SdkError(problem, code="PROTOCOL_VERSION")
        return Capabilities(
            reply.protocol_version,
            reply.min_protocol_version,
            frozenset(reply.features),
            reply.server_version,
            reply.redis_prefix,
            reply.shards,
            reply.redis_topology,
        )

    async def heartbeat(self, presence: Presence, *, timeout: float | None = None) -> bool:
        """Tell the coordinator this worker is alive (one call, not retried: the next
        beat is the retry). False when the coordinator has no Heartbeat (older than
        this SDK): send no more. Raises SdkError when the call failed."""
        request = pb.HeartbeatRequest(
            worker_id=presence.worker_id,
            host=presence.host,
            queues=list(presence.queues),
            concurrency=presence.concurrency,
            in_flight=presence.in_flight,
            sdk_version=presence.sdk_version,
            state=_WORKER_STATES[presence.state],
            started_at=presence.started_at,
        )
        try:
            await self._stub.Heartbeat(
                request, metadata=self._metadata, timeout=timeout or self._timeout
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() is grpc.StatusCode.UNIMPLEMENTED:
                return False
            if exc.code() in _TRANSIENT:
                raise CoordinatorUnavailable(
                    f"Heartbeat to {self.target} failed ({exc.code().name}: {exc.details()})",
                    code=exc.code().name,
                ) from exc
            raise _fatal(exc) from exc
        return True

    # -- batched calls: each item's answer, or what failed it ------------------------

    def _calls(
        self, batched: str, request: type[Any], unary: str
    ) -> Callable[[Sequence[Any]], Awaitable[list[Any]]]:
        """The batch function of one kind of call: the stub's ``batched`` method with a
        ``request`` of the items, or its ``unary`` method once per item."""

        async def send_one_call(items: Sequence[Any]) -> list[Any]:
            return await self._batch(
                items,
                lambda: getattr(self._stub, batched)(
                    request(items=items), metadata=self._md(), timeout=self._timeout
                ),
                lambda item: getattr(self._stub, unary)(
                    item, metadata=self._md(), timeout=self._timeout
                ),
            )

        async def send(items: Sequence[Any]) -> list[Any]:
            calls = _by_size(items, CALL_BYTES)
            if len(calls) == 1:
                return await send_one_call(items)
            answers = await asyncio.gather(*(send_one_call(call) for call in calls))
            return [answer for call in answers for answer in call]

        return send

    async def _batch(
        self,
        items: Sequence[Any],
        batched: Callable[[], Awaitable[Any]],
        unary: Callable[[Any], Awaitable[Any]],
    ) -> list[Any]:
        """One batched call for ``items`` (or, with a coordinator that has none, one
        unary call each); a whole call's failure is every item's."""
        if self.batched:
            try:
                reply = await batched()
            except grpc.aio.AioRpcError as exc:
                if too_large(exc) and len(items) > 1:
                    # the items together were too large (a coordinator that does not bound
                    # its answers): each on its own may not be
                    return list(
                        await asyncio.gather(
                            *(unary(item) for item in items), return_exceptions=True
                        )
                    )
                if exc.code() is not grpc.StatusCode.UNIMPLEMENTED:
                    return [exc] * len(items)
                log.info(
                    "the coordinator at %s has no batched calls: one call per item", self.target
                )
                self.batched = False
            else:
                if len(reply.items) != len(items):
                    problem = pb.Problem(
                        code="INTERNAL",
                        message=f"{len(reply.items)} answers for {len(items)} items",
                    )
                    return [ItemRefused(problem)] * len(items)
                return [
                    ItemRefused(answer.problem) if answer.HasField("problem") else answer
                    for answer in reply.items
                ]
        return list(await asyncio.gather(*(unary(item) for item in items), return_exceptions=True))

    async def _retry(
        self, name: str, call: Callable[[], Awaitable[T]], until: Callable[[], bool]
    ) -> T | None:
        backoff = self._backoff()
        for attempt in range(1, self._attempts + 1):
            try:
                return await call()
            except (grpc.aio.AioRpcError, ItemRefused) as exc:
                if exc.code() not in _TRANSIENT or too_large(exc):
                    raise _fatal(exc) from exc
                if until():
                    return None
                if attempt == self._attempts:
                    raise CoordinatorUnavailable(
                        f"{name} to {self.target} failed {attempt} times "
                        f"({exc.code().name}: {exc.details()}); giving up on this call "
                        "(WorkerConfig.coordinator_attempts sets how many tries)",
                        code=exc.code().name,
                    ) from exc
                delay = backoff.next()
                log.warning(
                    "%s to %s failed (%s, attempt %d of %d): retrying in %.2fs",
                    name,
                    self.target,
                    exc.details(),
                    attempt,
                    self._attempts,
                    delay,
                )
                await asyncio.sleep(delay)
        raise AssertionError("unreachable: the last attempt returns or raises")


def _lease(reply: pb.AcquireTaskLeaseResponse, asked_at: float) -> Lease:
    """The lease a grant answers, asked for at ``asked_at`` (time.monotonic())."""
    return Lease(
        reply.granted,
        reply.reason,
        reply.input_json,
        reply.lease_expires_at,
        reply.max_attempts,
        asked_at,
        token=reply.lease_token,
        node_id=reply.node_id,
        node_type=reply.node_type,
        workflow_id=reply.workflow_id,
        workflow_version=reply.workflow_version,
        timeout_seconds=reply.timeout_seconds or None,
        ttl=reply.ttl_seconds,
        context_json=reply.context_json,
    )


def _by_size(items: Sequence[Any], budget: int) -> list[Sequence[Any]]:
    """``items`` in order, cut into runs of at most ``budget`` bytes (an item larger
    than that in a run of its own)."""
    runs: list[Sequence[Any]] = []
    start, size = 0, 0
    for i, item in enumerate(items):
        n = item.ByteSize()
        if i > start and size + n > budget:
            runs.append(items[start:i])
            start, size = i, 0
        size += n
    runs.append(items[start:])
    return runs


def _smaller(outcome: Outcome, exc: SdkError) -> Outcome:
    """What to report instead of ``outcome``, whose report was too large for a message."""
    if outcome.status == "COMPLETED":
        size = len(outcome.output_json.encode())
        return Outcome(
            "FAILED",
            error=f"output is {size} bytes, over the limit of a message to the coordinator "
            f"({exc}); return less, or store it elsewhere and return a reference",
            code=ErrorCode.OUTPUT_TOO_LARGE,
            permanent=True,
        )
    return Outcome(
        "FAILED",
        error=outcome.error[:_SHORT_ERROR] + "… (cut short: too large to report)",
        code=outcome.code,
        permanent=outcome.permanent,
    )


def _channel(
    target: str, tls_ca_file: str | None, options: Sequence[tuple[str, Any]]
) -> grpc.aio.Channel:
    if tls_ca_file is None:
        return grpc.aio.insecure_channel(target, options=options)
    try:
        with open(tls_ca_file, "rb") as f:
            ca = f.read()
    except OSError as exc:
        raise SdkError(
            f"cannot read the coordinator's CA file {tls_ca_file} ({exc.strerror}): "
            "COMPOSER_GRPC_TLS_CA (WorkerConfig.coordinator_tls_ca) must name a PEM file "
            "this process may read"
        ) from exc
    return grpc.aio.secure_channel(
        target, grpc.ssl_channel_credentials(root_certificates=ca), options=options
    )


def _fatal(exc: Failure) -> SdkError:
    if too_large(exc):
        return SdkError(
            f"a message to or from the coordinator is too large: {exc.details()} "
            "(not retried: it would be as large again)",
            code=MESSAGE_TOO_LARGE,
        )
    if exc.code() is grpc.StatusCode.UNAUTHENTICATED:
        return SdkError(
            f"the coordinator refused the worker token: {exc.details()} (check COMPOSER_WORKER_TOKEN)",
            code=exc.code().name,
        )
    if exc.code() is grpc.StatusCode.PERMISSION_DENIED:
        return SdkError(exc.details() or "permission denied", code=exc.code().name)
    return SdkError(
        f"coordinator call failed with {exc.code().name}: {exc.details()}", code=exc.code().name
    )
