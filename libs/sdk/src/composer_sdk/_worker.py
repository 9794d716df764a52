"""The worker runtime: read tasks from a queue's streams, lease, run, renew, report, ack.

A stream entry names an attempt and nothing more: what the handler runs (its
input, node, timeout) comes with the lease, from the database, and the lease's
token goes with every renewal and report (docs/architecture.md §6.1).

For each queue it reads the queue's shard streams through the consumer group,
each shard's priority bands included, the best band first (``composer_queue``'s
read, docs/architecture.md §4.16), never more entries than it has free slots (``concurrency``): a slot is taken
before the read and held until the handler ends, so no entry waits in the
worker unleased, where the lease-sweeper would take it for one a dead worker
left. The report and the ack go on outside the slot (within ``prefetch``
messages held), so they overlap the next handlers. While it runs, a heartbeat
(``Queue.heartbeat``, every ttl/3, good for a ttl) tells the sweeper that the
entries it holds are not lost deliveries. For every message: take the lease from the
coordinator (a duplicate delivery or a stale attempt is not granted and is
just acknowledged; an entry that is no dispatch of its attempt to this handler,
because the task is of another queue or node type or not due yet, is refused
and acknowledged away with an ALERT, and so is a grant of a node type the
handler does not run), run the handler under the node's timeout while renewing
the lease every ttl/3 (a lost lease cancels the handler and reports
nothing), report the outcome, and only then acknowledge the message. A report
the coordinator cannot take (unreachable after ``coordinator_attempts`` tries,
or an INTERNAL error) is given up and the message is NOT acknowledged: it
stays pending in its stream, and the lease-sweeper recovers the attempt. A
message the worker's own code fails on (not the handler: its exceptions are the
task's failures) is acknowledged away with an ALERT that names its run, and the
worker goes on. On SIGTERM it stops reading and lets in-flight tasks finish for
a grace period. All Redis work goes through composer_queue.

Besides, every ``presence_seconds`` it tells the coordinator who it is, which
queues it serves and how many tasks it holds (the Heartbeat call; the API lists
workers from it and says when a task waits on a queue nobody serves), and once
more, STOPPED, when it stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from opentelemetry import trace
from opentelemetry.trace import SpanKind

import composer_queue as cq
from composer_common import limits
from composer_common.batching import Batcher
from composer_common.gc_tuning import tune_gc
from composer_common.logs import ALERT, alert, log_context
from composer_common.telemetry import extract, recording, tracer
from composer_sdk._client import (
    DEFAULT_MAX_MESSAGE_BYTES,
    MESSAGE_TOO_LARGE,
    Beats,
    Capabilities,
    Coordinator,
    CoordinatorClient,
    Lease,
    NextTask,
    Presence,
    TakeNext,
    Versioned,
)
from composer_sdk._environment import (
    DEFAULT_COORDINATOR,
    DEFAULT_REDIS_PREFIX,
    DEFAULT_REDIS_URL,
    flag_from_env,
    from_env,
    optional_from_env,
)
from composer_sdk._handler import Handler, HandlerFn, Outcome, TaskContext, caller_of
from composer_sdk._routing import RunRoutedCoordinators, parse_coordinators
from composer_sdk._tasklog import DEFAULT_MAX_BYTES, DEFAULT_MAX_LINES, AttemptLines, TaskLogger
from composer_sdk.errors import CoordinatorUnavailable, SdkError

log = logging.getLogger("composer.sdk")


def _version() -> str:
    try:
        return metadata.version("composer-sdk")
    except metadata.PackageNotFoundError:  # run from a source tree
        return "unknown"


#: Sent with each heartbeat, so an operator can tell which workers run an old SDK.
_SDK_VERSION = _version()


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """How a worker reaches its stack, and how much it takes on.

    The connection fields default to the environment, so a worker started in a shell
    that loaded ``make run``'s ``.state/stack.env`` (and ``tokens.env``) serves that
    stack, whatever its COMPOSER_PORT_BASE: ``redis_url`` from COMPOSER_REDIS_URL,
    ``coordinator`` from COMPOSER_GRPC_ADDR, ``token`` from COMPOSER_WORKER_TOKEN,
    ``coordinators`` from COMPOSER_COORDINATORS,
    ``redis_prefix`` from COMPOSER_REDIS_PREFIX (the stack's key prefix: a worker on
    another prefix reads streams nobody writes) and ``coordinator_tls_ca`` from
    COMPOSER_GRPC_TLS_CA, ``redis_cluster`` from COMPOSER_REDIS_CLUSTER. An argument
    given wins over the environment.
    """

    redis_url: str = field(default_factory=from_env("COMPOSER_REDIS_URL", DEFAULT_REDIS_URL))
    #: ``redis_url`` is any node of a Redis Cluster (COMPOSER_REDIS_CLUSTER=true): the
    #: worker reads each shard's stream on the master holding it.
    redis_cluster: bool = field(default_factory=flag_from_env("COMPOSER_REDIS_CLUSTER"))
    coordinator: str = field(default_factory=from_env("COMPOSER_GRPC_ADDR", DEFAULT_COORDINATOR))
    #: Every coordinator replica's own address, separated by commas, the same list in
    #: every worker (COMPOSER_COORDINATORS): each run's calls then go to the one its id
    #: hashes to, so one coordinator batches all of a run's reports, and to the next
    #: while that one cannot be reached (``composer_sdk._routing``). Set, it replaces
    #: ``coordinator``; empty, every call goes to ``coordinator``.
    coordinators: str = field(default_factory=from_env("COMPOSER_COORDINATORS", ""))
    token: str = field(default_factory=from_env("COMPOSER_WORKER_TOKEN", ""))
    redis_prefix: str = field(
        default_factory=from_env("COMPOSER_REDIS_PREFIX", DEFAULT_REDIS_PREFIX)
    )
    shards: int = cq.DEFAULT_SHARDS
    #: ``run`` tunes the process's garbage collector (COMPOSER_WORKER_TUNE_GC, default
    #: true; ``composer_common.gc_tuning``): it freezes what the program allocated
    #: before, never collected again, and collects the youngest generation after
    #: 10,000 allocations, not 700. The bench worker's CPU a W1 step fell 17 %.
    #: False leaves the collector as the program set it.
    tune_gc: bool = field(default_factory=flag_from_env("COMPOSER_WORKER_TUNE_GC", True))
    #: Tasks run at once by this process, across its queues.
    concurrency: int = 16
    #: Messages held at once (leasing, running, reporting); None: twice the concurrency.
    #: Entries are read only for free slots, so this bounds only the reports and acks
    #: in flight after their handlers returned (they overlap the next handlers).
    prefetch: int | None = None
    lease_ttl: float = 30.0
    #: The timeout of a node that sets none.
    default_timeout: float = 300.0
    #: How long SIGTERM waits for in-flight tasks before cancelling them.
    drain_seconds: float = 30.0
    read_block_ms: int = 1000
    #: Offer, with each report, to run a task it dispatches on the same queue: the
    #: coordinator may lease it to this worker in the report's transaction and answer
    #: with it, so it never goes through the stream (docs/architecture.md §3.2). The
    #: handler's slot is kept for it until the answer. False: every task is read from
    #: the stream (COMPOSER_WORKER_TAKE_NEXT=false).
    take_next: bool = field(default_factory=flag_from_env("COMPOSER_WORKER_TAKE_NEXT", True))
    #: Lease owner and consumer name; unique per process by default.
    owner: str | None = None
    #: Tries per coordinator call while it answers UNAVAILABLE (jittered backoff between,
    #: 0.05s growing to 5s); then the message is left unacknowledged for the sweeper.
    coordinator_attempts: int = 10
    #: The largest output reported, as JSON (the coordinator's COMPOSER_MAX_OUTPUT_BYTES,
    #: 1 MiB unless it was changed: keep the two equal). A larger one fails the node for
    #: good here, before it is sent. None: no check here (the coordinator's still holds).
    max_output_bytes: int | None = limits.DEFAULT_MAX_OUTPUT_BYTES
    #: The largest gRPC message sent to or taken from the coordinator: above its data
    #: limits (node input, output) with room to spare.
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    #: A PEM file of the CA that signed the coordinator's certificate: set, the worker
    #: dials it over TLS; None: plaintext. Defaults to COMPOSER_GRPC_TLS_CA.
    coordinator_tls_ca: str | None = field(
        default_factory=optional_from_env("COMPOSER_GRPC_TLS_CA")
    )
    #: What each attempt's log keeps (``ctx.logger``'s records, a PYTHON node's printed
    #: lines): the first lines up to both bounds, then a marker line counting the rest.
    log_max_bytes: int = DEFAULT_MAX_BYTES
    log_max_lines: int = DEFAULT_MAX_LINES
    #: How often the worker tells the coordinator it is alive, what it serves and how
    #: busy it is (``composer workers``, GET /v1/workers); 0: never. Keep it well under
    #: the API's COMPOSER_WORKER_LIVE_SECONDS (30 s), or the worker reads as gone.
    presence_seconds: float = 5.0
    #: Whether ``run()`` takes SIGTERM and SIGINT (Ctrl-C) to drain: it stops reading,
    #: lets in-flight tasks finish for ``drain_seconds``, says STOPPED and returns; a
    #: second signal cancels what still runs (its messages stay pending for recovery).
    #: Only signals nobody else handles are taken (a service's own stay its own).
    handle_signals: bool = True


class Worker:
    """Runs registered handlers. ``worker.handler("payments")`` decorates ``async def f(ctx, input)``."""

    def __init__(
        self,
        config: WorkerConfig,
        *,
        queue: cq.Queue | None = None,
        coordinator: Coordinator | None = None,
    ) -> None:
        """``queue`` and ``coordinator`` replace the clients built from ``config`` (tests)."""
        self.config = config
        self.owner = config.owner or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._handlers: dict[str, Handler] = {}
        self._stopping = asyncio.Event()
        #: Set by a second signal: the drain cancels what still runs.
        self._abort = asyncio.Event()
        self._in_flight: set[asyncio.Task[None]] = set()
        #: Attempts this process is running: a duplicate delivery of one is skipped here,
        #: since the coordinator re-grants a lease to the owner that holds it.
        self._running: set[tuple[str, int]] = set()
        #: Of those, the ones whose lease was granted; each one's event is set once its
        #: lease is granted or its delivery is done with it (``_traced``).
        self._granted: set[tuple[str, int]] = set()
        self._decided: dict[tuple[str, int], asyncio.Event] = {}
        #: The queues whose reader waits for a free slot: a report from their handlers
        #: offers to take no task (``_offer``).
        self._wanting: set[str] = set()
        #: Handlers at once (a slot is held from the read to the handler's end)...
        self._slots = asyncio.Semaphore(config.concurrency)
        #: ...and messages held at once: the reports and acks of finished handlers
        #: overlap the next handlers instead of keeping them waiting.
        self.prefetch = config.prefetch or 2 * config.concurrency
        if self.prefetch < config.concurrency:
            raise SdkError(
                f"prefetch ({config.prefetch}) must be at least the concurrency "
                f"({config.concurrency})"
            )
        self._messages = asyncio.Semaphore(self.prefetch)
        #: Acknowledgements of many tasks go to Redis together: one MULTI of XACK and
        #: XDEL per stream for all that finished while the last one was in flight.
        self._acks: Batcher[tuple[str, str], None] = Batcher(
            self._ack_batch, max_size=512, max_in_flight=1, name="acks"
        )
        self._given_queue = queue
        self._given_coordinator = coordinator
        self._queue: cq.Queue | None = queue
        self._client: Coordinator | None = coordinator
        #: Counters for tests, metrics and logs.
        self.completed = 0
        self.failed = 0
        self.skipped = 0
        #: Messages left unacknowledged because their report could not be delivered.
        self.abandoned = 0
        #: Messages acknowledged away because the worker's own code failed on them.
        self.parked = 0
        #: Messages acknowledged away because they were no dispatch of their attempt to
        #: this handler: another queue's or node type's task, or one not due yet.
        self.misrouted = 0
        #: Tasks run that were leased with a report's answer, not read from a stream.
        self.taken_next = 0
        #: When run() began serving (seconds since the epoch), for the heartbeat.
        self.started_at = 0.0
        #: False once the coordinator said it keeps no heartbeats.
        self._beats = True
        #: The protocol version check (GetCapabilities): None until the coordinator answered.
        self._compatible: bool | None = None
        self._incompatible: SdkError | None = None
        self._protocol_lock = asyncio.Lock()

    # -- registration ----------------------------------------------------------

    def handler(
        self, queue: str, *, node_types: Iterable[str] | str | None = None
    ) -> Callable[[HandlerFn], HandlerFn]:
        """Register the decorated function as ``queue``'s handler (``add_handler``)."""

        def register(fn: HandlerFn) -> HandlerFn:
            self.add_handler(queue, fn, node_types=node_types)
            return fn

        return register

    def add_handler(
        self, queue: str, fn: HandlerFn, *, node_types: Iterable[str] | str | None = None
    ) -> None:
        """Serve ``queue`` with ``fn``. It runs the queue's tasks of ``node_types`` only:
        by default TASK nodes (HTTP on ``http``, PYTHON on ``python``, the queues reserved
        for the built-in executors). An entry of another queue's task or another node
        type, or one ahead of its attempt's backoff, is never run: it is acknowledged
        away with an ALERT (docs/architecture.md §6.1)."""
        if queue in self._handlers:
            raise SdkError(
                f"queue {queue!r} already has a handler ({self._handlers[queue].fn.__qualname__})"
            )
        self._handlers[queue] = Handler.of(queue, fn, node_types)

    # -- running ---------------------------------------------------------------

    def stop(self) -> None:
        """Stop reading; in-flight tasks get ``drain_seconds`` to finish."""
        self._stopping.set()

    def install_signal_handlers(self) -> None:
        """SIGTERM and SIGINT drain the worker (``run()`` does this by default, see
        ``WorkerConfig.handle_signals``): the first stops reading and lets in-flight
        tasks finish; a second cancels them."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._signalled, sig)

    def _signalled(self, sig: signal.Signals) -> None:
        if self._stopping.is_set():
            log.warning(
                "%s again: cancelling %d in-flight task(s) now (their messages stay pending "
                "for recovery)",
                sig.name,
                len(self._in_flight),
            )
            self._abort.set()
            return
        log.info(
            "%s: draining; %d in-flight task(s) get up to %.0fs to finish (%s again to stop "
            "at once)",
            sig.name,
            len(self._in_flight),
            self.config.drain_seconds,
            "Ctrl-C" if sig == signal.SIGINT else sig.name,
        )
        self.stop()

    def _take_signals(self) -> list[tuple[signal.Signals, Any]]:
        """Install the drain on SIGTERM and SIGINT where the program left them to the
        defaults (or to ``asyncio.run``'s Ctrl-C, which would cancel the worker mid-task),
        in the main thread: the signals taken, with the handlers to give back."""
        if (
            not self.config.handle_signals
            or threading.current_thread() is not threading.main_thread()
        ):
            return []
        loop = asyncio.get_running_loop()
        taken = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            before = signal.getsignal(sig)
            if not _default_handler(before):
                continue  # the program's own handler (a service's shutdown) stays
            try:
                loop.add_signal_handler(sig, self._signalled, sig)
            except (NotImplementedError, RuntimeError, ValueError):
                continue  # a loop without signal support (Windows)
            taken.append((sig, before))
        return taken

    @staticmethod
    def _give_back(signals: list[tuple[signal.Signals, Any]]) -> None:
        loop = asyncio.get_running_loop()
        for sig, before in signals:
            loop.remove_signal_handler(sig)
            signal.signal(sig, before)

    def describe(self) -> str:
        """What this worker serves and where: its start line ("worker ID serving q1, q2
        from Redis URL prefix 'P', coordinator ADDR (plaintext); node types q1 TASK, …")."""
        cfg = self.config
        handlers = sorted(self._handlers.values(), key=lambda h: h.queue)
        kinds = ", ".join(f"{h.queue} {'/'.join(sorted(h.node_types))}" for h in handlers)
        tls = "TLS" if cfg.coordinator_tls_ca else "plaintext"
        where = (
            f"coordinators {cfg.coordinators} (each run's calls to one)"
            if cfg.coordinators
            else f"coordinator {cfg.coordinator}"
        )
        return (
            f"worker {self.owner} serving {', '.join(h.queue for h in handlers)} from Redis "
            f"{'Cluster ' if cfg.redis_cluster else ''}"
            f"{_without_password(cfg.redis_url)} prefix {cfg.redis_prefix!r}, "
            f"{where} ({tls}); node types {kinds}; concurrency {cfg.concurrency}, "
            f"prefetch {self.prefetch}, composer-sdk {_SDK_VERSION}"
        )

    async def run(self) -> None:
        """Serve every registered queue until ``stop()``; then drain and return."""
        if not self._handlers:
            raise SdkError("no handlers registered: add one with worker.handler(queue)")
        cfg = self.config
        if cfg.tune_gc:
            tune_gc()
        # the coordinator's client first: a CA file it cannot read stops the worker before
        # anything is opened
        self._client = client = self._given_coordinator or _coordinator_client(cfg)
        self._queue = queue_client = self._given_queue or cq.connect(
            cfg.redis_url, cluster=cfg.redis_cluster
        )
        shown = _show_logs()
        signals = self._take_signals()
        try:
            if not cfg.token and self._given_coordinator is None:
                log.warning(
                    "no worker token: the coordinator refuses every lease; set "
                    "COMPOSER_WORKER_TOKEN (make run keeps one in .state/tokens.env) or "
                    "WorkerConfig(token=...)"
                )
            for queue in self._handlers:
                await self._ensure_groups(queue)
            log.info("%s", self.describe())
            # The protocol version, asked beside the reads, not before them: a worker whose
            # coordinator is away still reads and holds its entries (its heartbeat says it
            # is alive) and asks again before its first lease; a coordinator of another
            # version stops the worker, and run() raises the error that names both.
            protocol = asyncio.create_task(self._first_check(), name="worker-protocol")
            heartbeat = asyncio.create_task(self._heartbeat(), name="worker-heartbeat")
            self.started_at = time.time()
            presence = asyncio.create_task(self._presence(), name="worker-presence")
            readers = [
                asyncio.create_task(self._read(h), name=f"read:{h.queue}")
                for h in self._handlers.values()
            ]
            stop = asyncio.create_task(self._stopping.wait(), name="worker-stop")
            await asyncio.wait([*readers, stop], return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
            # Cancel until done: redis-py can swallow a cancellation that lands while
            # its blocking read is being woken, and the reader would read on.
            while not all(task.done() for task in readers):
                for task in readers:
                    task.cancel()
                await asyncio.wait(readers, timeout=0.1)
            try:
                for task in readers:
                    with contextlib.suppress(asyncio.CancelledError):
                        await task  # a reader that died raises here, after the others stopped
                await self._drain()  # the heartbeat goes on: in-flight entries are still held
            finally:
                heartbeat.cancel()
                presence.cancel()
                protocol.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await heartbeat
                with contextlib.suppress(asyncio.CancelledError):
                    await presence
                with contextlib.suppress(asyncio.CancelledError):
                    await protocol
                await self._say_stopped()
            if self._incompatible is not None:
                raise self._incompatible
        finally:
            self._give_back(signals)
            try:
                if self._given_coordinator is None:
                    await client.close()
            finally:  # even when the coordinator's close raised or was cancelled
                if self._given_queue is None:
                    await queue_client.close()
            if self._stopping.is_set():
                log.info(
                    "worker %s stopped (%d completed, %d failed)",
                    self.owner,
                    self.completed,
                    self.failed,
                )
            shown()

    async def _drain(self) -> None:
        if not self._in_flight:
            return
        log.info(
            "draining %d in-flight task(s) for up to %.0fs",
            len(self._in_flight),
            self.config.drain_seconds,
        )
        deadline = time.monotonic() + self.config.drain_seconds
        aborted = asyncio.ensure_future(self._abort.wait())
        # Until none is left: a report answered during the drain may bring a task leased
        # with it (take_next), run in a task of its own that joins the set.
        while (
            (live := {task for task in self._in_flight if not task.done()})
            and not aborted.done()
            and time.monotonic() < deadline
        ):
            finished = asyncio.ensure_future(asyncio.wait(live))
            await asyncio.wait(
                [finished, aborted],
                timeout=max(0.0, deadline - time.monotonic()),
                return_when=asyncio.FIRST_COMPLETED,
            )
            finished.cancel()
        aborted.cancel()
        pending = {task for task in self._in_flight if not task.done()}
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)
            log.warning(
                "%d task(s) did not finish in time; their messages stay pending for recovery",
                len(pending),
            )

    async def _first_check(self) -> None:
        """The protocol check at start, beside the first reads: an unreachable
        coordinator is asked again before the first lease."""
        try:
            await self._protocol_ok()
        except CoordinatorUnavailable as exc:
            log.warning("cannot ask the coordinator its protocol version yet: %s", exc)

    async def _protocol_ok(self) -> bool:
        """Whether leases may be taken: the coordinator speaks this SDK's protocol version
        (GetCapabilities, asked once). False: it does not (the worker stops, and run()
        raises the SdkError that names both versions), or the worker is stopping. Raises
        CoordinatorUnavailable when the coordinator could not be asked."""
        if self._compatible is not None:
            return self._compatible
        async with self._protocol_lock:
            if self._compatible is not None:
                return self._compatible
            client = self._client
            if not isinstance(client, Versioned):
                self._compatible = True
                return True
            try:
                capabilities = await client.capabilities(
                    f"composer-sdk {_SDK_VERSION}", until=self._stopping.is_set
                )
            except CoordinatorUnavailable:
                raise
            except SdkError as exc:
                self._compatible, self._incompatible = False, exc
                log.error("%s; the worker stops", exc)
                self.stop()
                return False
            if capabilities is None:
                return False
            mismatch = self._streams_mismatch(capabilities)
            if mismatch is not None:
                self._compatible, self._incompatible = False, mismatch
                log.error("%s; the worker stops", mismatch)
                self.stop()
                return False
            log.info(
                "coordinator %s speaks worker protocol version %d (serves %d and newer)",
                self.config.coordinator,
                capabilities.protocol_version,
                capabilities.min_protocol_version,
            )
            self._compatible = True
            return True

    def _streams_mismatch(self, capabilities: Capabilities) -> SdkError | None:
        """The error when this worker reads other streams than the coordinator's engine
        publishes to (another Redis prefix, fewer shards): it would wait for ever for
        tasks that go elsewhere, showing SERVING. None when they agree or it did not say."""
        cfg = self.config
        if capabilities.redis_prefix and capabilities.redis_prefix != cfg.redis_prefix:
            return SdkError(
                f"the coordinator {cfg.coordinator} publishes tasks under Redis prefix "
                f"{capabilities.redis_prefix!r}, but this worker reads prefix "
                f"{cfg.redis_prefix!r}: set COMPOSER_REDIS_PREFIX={capabilities.redis_prefix} "
                "(a stack's .state/stack.env has it) or WorkerConfig(redis_prefix=...)",
                code="REDIS_PREFIX",
            )
        if capabilities.shards and capabilities.shards != cfg.shards:
            return SdkError(
                f"the coordinator {cfg.coordinator} publishes tasks to {capabilities.shards} "
                f"shard stream(s) per queue, but this worker reads {cfg.shards}: set "
                f"WorkerConfig(shards={capabilities.shards}) (COMPOSER_SHARDS on the services)",
                code="SHARDS",
            )
        topology = capabilities.redis_topology
        if topology in ("server", "cluster") and (topology == "cluster") != cfg.redis_cluster:
            cluster = topology == "cluster"
            return SdkError(
                f"the coordinator {cfg.coordinator} publishes tasks to "
                f"{'a Redis Cluster' if cluster else 'one Redis server'}, but this worker reads "
                f"{'one server' if cluster else 'a cluster'}: set COMPOSER_REDIS_CLUSTER="
                f"{'true' if cluster else 'false'} (as on the services) or "
                "WorkerConfig(redis_cluster=...)",
                code="REDIS_CLUSTER",
            )
        return None

    async def _ensure_groups(self, queue: str) -> None:
        assert self._queue is not None
        names = cq.queue_streams(self.config.redis_prefix, queue, self.config.shards)
        backoff = cq.Backoff(0.1, 5.0)
        while True:
            try:
                await self._queue.ensure_groups(names)
                return
            except cq.QueueUnavailable as exc:
                if self._stopping.is_set():
                    raise
                delay = backoff.next()
                log.warning("cannot prepare queue %s: %s; retrying in %.1fs", queue, exc, delay)
                await asyncio.sleep(delay)

    async def _heartbeat(self) -> None:
        """Say every ttl/3 that this consumer is alive, good for one ttl.

        The lease-sweeper counts an entry left pending as a delivery lost to a crash
        only when its consumer's heartbeat has run out (this process died or froze):
        a busy worker's entries (a long task, a lease the coordinator could not
        grant yet) never bring its tasks nearer the delivery limit.
        """
        assert self._queue is not None
        cfg = self.config
        every = cfg.lease_ttl / 3
        while True:
            try:
                await self._queue.heartbeat(cfg.redis_prefix, self.owner, int(cfg.lease_ttl * 1000))
            except cq.QueueError as exc:
                log.warning("the heartbeat failed: %s; trying again in %.1fs", exc, every)
            except Exception:  # a bug: say so, and keep beating
                log.log(ALERT, "the heartbeat failed unexpectedly", exc_info=True)
            await asyncio.sleep(every)

    def presence(self, state: str) -> Presence:
        """What this worker's heartbeat says now: its queues, concurrency, and the
        attempts it holds (leasing, running or reporting)."""
        return Presence(
            worker_id=self.owner,
            host=socket.gethostname(),
            queues=tuple(sorted(self._handlers)),
            concurrency=self.config.concurrency,
            in_flight=len(self._running),
            sdk_version=_SDK_VERSION,
            state=state,
            started_at=self.started_at,
        )

    async def _presence(self) -> None:
        """Beat every ``presence_seconds`` (SERVING, then DRAINING once stopping), so the
        API can list this worker and tell that its queues are served. A failed beat is
        logged once per outage and never stops the worker: the next beat is the retry."""
        every = self.config.presence_seconds
        if every <= 0 or not isinstance(self._client, Beats):
            return
        client, failing = self._client, False
        while True:
            state = "DRAINING" if self._stopping.is_set() else "SERVING"
            try:
                if not await client.heartbeat(self.presence(state)):
                    log.info("the coordinator keeps no heartbeats (older than this SDK)")
                    self._beats = False
                    return
                if failing:
                    log.info("heartbeats get through again")
                failing = False
            except SdkError as exc:
                if not failing:
                    log.warning("the heartbeat to the coordinator failed: %s; still trying", exc)
                failing = True
            except Exception:  # a bug: say so, and keep beating
                log.log(
                    ALERT, "the heartbeat to the coordinator failed unexpectedly", exc_info=True
                )
            await asyncio.sleep(every)

    async def _say_stopped(self) -> None:
        """One last beat, STOPPED, so the worker shows gone at once (best effort: a
        worker that cannot say it just reads as gone once its beats are old)."""
        if not self._beats or self.config.presence_seconds <= 0:
            return
        if not isinstance(self._client, Beats):
            return
        try:
            await self._client.heartbeat(self.presence("STOPPED"), timeout=2.0)
        except Exception as exc:
            log.info("could not tell the coordinator this worker stopped: %s", exc)

    async def _room(self) -> int:
        """Wait for a free slot, then take every other slot free now: how many entries
        to read. Each entry read keeps one slot (until its handler ends) and one message
        (until its ack); the caller gives back what the read did not fill (``_free``)."""
        await self._messages.acquire()
        try:
            await self._slots.acquire()
        except BaseException:
            self._messages.release()
            raise
        room = 1
        while (
            room < self.config.concurrency
            and not self._slots.locked()
            and not self._messages.locked()
        ):
            await self._slots.acquire()  # neither waits: both are free
            await self._messages.acquire()
            room += 1
        return room

    def _free(self, room: int) -> None:
        for _ in range(room):
            self._slots.release()
            self._messages.release()

    async def _read(self, handler: Handler) -> None:
        assert self._queue is not None
        cfg = self.config
        names = cq.queue_streams(cfg.redis_prefix, handler.queue, cfg.shards)
        backoff = cq.Backoff(0.1, 5.0)
        turn = 0
        while not self._stopping.is_set():
            self._wanting.add(handler.queue)
            try:
                room = await self._room()
            finally:
                self._wanting.discard(handler.queue)
            # Each read starts with the next shard, so a busy one cannot starve the others.
            order = names[turn:] + names[:turn]
            turn = (turn + 1) % len(names)
            try:
                entries = await self._queue.read(
                    order, self.owner, count=room, block_ms=cfg.read_block_ms
                )
                backoff.reset()
            except Exception as exc:  # a command error or a bug too: the worker keeps serving
                self._free(room)
                delay = backoff.next()
                if isinstance(exc, cq.QueueError):
                    log.log(
                        logging.WARNING if exc.retryable else logging.ERROR,
                        "reading queue %s failed: %s; retrying in %.1fs",
                        handler.queue,
                        exc,
                        delay,
                    )
                else:
                    log.log(
                        ALERT,
                        "reading queue %s failed unexpectedly (%s: %s); retrying in %.1fs",
                        handler.queue,
                        type(exc).__name__,
                        exc,
                        delay,
                        exc_info=True,
                    )
                await asyncio.sleep(delay)
                continue
            except BaseException:
                self._free(room)
                raise
            # ``read`` answers at most ``room`` entries: each takes one slot and message.
            self._free(room - len(entries))
            for entry in entries:
                task = asyncio.create_task(
                    self._process(handler, entry), name=f"task:{entry.entry_id}"
                )
                self._in_flight.add(task)
                task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        """A task of an entry ended: its message is given back."""
        self._messages.release()
        self._ended(task)

    def _ended(self, task: asyncio.Task[None]) -> None:
        self._in_flight.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("processing a task crashed", exc_info=task.exception())

    async def _process(self, handler: Handler, entry: cq.Entry) -> None:
        """Handle one entry under the slot taken for it when it was read: the slot is
        freed when the handler ends (``slot.free``) or the entry needs no handler, or
        goes on to the task its report's answer brought."""
        slot = _Slot(self._slots)
        next_task: NextTask | None = None
        try:
            next_task = await self._handle(handler, entry, slot.free)
        except Exception as exc:
            await self._park(entry, exc)
        finally:
            if next_task is None or not slot.held:
                slot.free()
        if next_task is not None and slot.held:
            # the slot goes on with the task; it holds no stream message
            task = asyncio.create_task(
                self._run_next(handler, next_task, slot),
                name=f"next:{next_task.fields.get('task_id')}",
            )
            self._in_flight.add(task)
            task.add_done_callback(self._ended)

    async def _run_next(self, handler: Handler, next_task: NextTask | None, slot: _Slot) -> None:
        """Run the tasks leased with reports, one after the other, in the ``slot`` the
        first one's reporter kept: each report may bring the next (a chain of steps
        stays on this worker)."""
        try:
            while next_task is not None and slot.held:
                self.taken_next += 1
                try:
                    msg = cq.TaskMessage.from_fields(next_task.fields)
                except cq.MalformedMessage as exc:  # a coordinator's bug: its lease runs out
                    log.error("a task leased with a report has a malformed message: %s", exc)
                    return
                next_task = await self._traced(handler, None, msg, slot.free, next_task.lease)
        finally:
            slot.free()

    async def _park(self, entry: cq.Entry, exc: Exception) -> None:
        """The worker's own code failed on ``entry`` (the handler's exceptions are the
        task's failures and never get here): say so with an ALERT that names the run,
        acknowledge the entry away, and go on. A waiting attempt whose entry this was
        is dispatched again by the lease-sweeper (it finds no entry and no outbox row);
        one whose lease this worker held fails when the lease expires, and its retry
        policy decides."""
        self.parked += 1
        try:
            msg = entry.message()
            what = f"task {msg.task_id} attempt {msg.attempt} of run {msg.run_id}"
        except cq.MalformedMessage:
            what = "an entry that is no task message"
        log.log(
            ALERT,
            "%s: the worker failed on its entry %s on %s (%s: %s); the entry is acknowledged "
            "away and the worker goes on",
            what,
            entry.entry_id,
            entry.stream,
            type(exc).__name__,
            exc,
            exc_info=exc,
        )
        try:
            await self._ack(entry)
        except Exception:
            log.log(ALERT, "acknowledging entry %s failed", entry.entry_id, exc_info=True)

    async def _handle(
        self, handler: Handler, entry: cq.Entry, handler_done: Callable[[], None]
    ) -> NextTask | None:
        try:
            msg = entry.message()
        except cq.MalformedMessage as exc:
            alert(
                log,
                "dropping malformed message %s on %s (its task will be recovered by the sweeper): %s",
                entry.entry_id,
                entry.stream,
                exc,
            )
            await self._ack(entry)
            return None
        return await self._traced(handler, entry, msg, handler_done)

    async def _traced(
        self,
        handler: Handler,
        entry: cq.Entry | None,
        msg: cq.TaskMessage,
        handler_done: Callable[[], None],
        lease: Lease | None = None,
    ) -> NextTask | None:
        """Lease (unless ``lease`` was granted already, with a report), run and report
        ``msg``'s attempt in its trace span; the task leased with the report, if any."""
        key = (msg.task_id, msg.attempt)
        while key in self._running:
            if key in self._granted or lease is not None:
                log.info(
                    "task %s attempt %d is already running here: duplicate delivery skipped",
                    msg.task_id,
                    msg.attempt,
                )
                self.skipped += 1
                await self._ack(entry)
                return None
            # Its lease is still being asked for here. Refused (the attempt was held, as a
            # paused run's are), this delivery may be the one that counts: a held attempt
            # is sent again when it is released, and the two deliveries can meet here.
            await self._decided[key].wait()
        self._running.add(key)
        self._decided[key] = asyncio.Event()
        if lease is not None:
            self._granted.add(key)
        try:
            span: contextlib.AbstractContextManager[object] = contextlib.nullcontext()
            # no provider and no trace to carry on (no traceparent): a span would be no-op
            if msg.traceparent or recording():
                span = tracer().start_as_current_span(
                    f"task {handler.queue}",
                    context=extract({"traceparent": msg.traceparent} if msg.traceparent else {}),
                    kind=SpanKind.CONSUMER,
                    attributes={
                        "composer.run_id": msg.run_id,
                        "composer.task_id": msg.task_id,
                        "composer.attempt": msg.attempt,
                    },
                )
            with span, log_context(run_id=msg.run_id, task_id=msg.task_id):
                if lease is not None:
                    return await self._run_granted(handler, entry, msg, lease, handler_done)
                assert entry is not None  # only a task leased with a report has none
                return await self._lease_run_report(handler, entry, msg, handler_done)
        finally:
            self._running.discard(key)
            self._granted.discard(key)
            self._decided.pop(key).set()

    async def _lease_run_report(
        self,
        handler: Handler,
        entry: cq.Entry,
        msg: cq.TaskMessage,
        handler_done: Callable[[], None],
    ) -> NextTask | None:
        assert self._client is not None
        cfg = self.config
        try:
            if not await self._protocol_ok():
                return None  # a coordinator of another protocol version: the entry stays pending
        except CoordinatorUnavailable as exc:
            self._abandon(msg, "asking the coordinator's protocol version", exc)
            return None
        try:
            lease = await self._client.acquire(
                msg.task_id,
                msg.run_id,
                msg.attempt,
                self.owner,
                cfg.lease_ttl,
                claim=secrets.token_urlsafe(16),
                until=self._stopping.is_set,
                queue=handler.queue,
                node_types=handler.node_types,
            )
        except SdkError as exc:
            if exc.code == "FAILED_PRECONDITION":
                # The entry is no dispatch of its attempt to this handler (forged, or written
                # by hand, or a definition stored before the built-in queues were reserved):
                # nothing ran, nothing changed; a real dispatch has its own entry.
                self._misrouted(entry, msg, str(exc))
                await self._ack(entry)
                return None
            if exc.code == "PERMISSION_DENIED":
                # Not this worker's to run (its token does not cover the task's queue):
                # the entry is dropped; the task's own queue still has its entry.
                log.error(
                    "task %s attempt %d: %s; its entry on %s is dropped",
                    msg.task_id,
                    msg.attempt,
                    exc,
                    entry.stream,
                )
                self.skipped += 1
                await self._ack(entry)
                return None
            if exc.code == MESSAGE_TOO_LARGE:
                # Asking again gets the same answer: the entry is dropped, and the task
                # fails when its lease runs out (the lease-sweeper). A coordinator whose
                # node input limit fits in our messages never sends this.
                log.error(
                    "task %s attempt %d: %s; its entry on %s is dropped (raise "
                    "WorkerConfig.max_message_bytes above the coordinator's "
                    "COMPOSER_MAX_NODE_INPUT_BYTES)",
                    msg.task_id,
                    msg.attempt,
                    exc,
                    entry.stream,
                )
                self.skipped += 1
                await self._ack(entry)
                return None
            self._abandon(msg, "taking the lease", exc)
            return None
        if lease is None:
            return None  # shutting down with the coordinator away: the message stays pending
        if not lease.granted:
            log.info(
                "task %s attempt %d not leased (%s): skipping",
                msg.task_id,
                msg.attempt,
                lease.reason,
            )
            self.skipped += 1
            await self._ack(entry)
            return None
        key = (msg.task_id, msg.attempt)
        self._granted.add(key)
        if (decided := self._decided.get(key)) is not None:
            decided.set()  # a delivery of it waiting here is a duplicate
        return await self._run_granted(handler, entry, msg, lease, handler_done)

    async def _run_granted(
        self,
        handler: Handler,
        entry: cq.Entry | None,
        msg: cq.TaskMessage,
        lease: Lease,
        handler_done: Callable[[], None],
    ) -> NextTask | None:
        """Run the attempt ``lease`` grants and report it (``_run_and_report``); the
        task leased with the report, if any."""
        cfg = self.config
        if lease.node_type not in handler.node_types:
            # Granted by a coordinator older than the node type check: the handler must
            # still not run what it was not built for (an HTTP node as Python code).
            self._misrouted(
                entry,
                msg,
                f"node {lease.node_id} of run {msg.run_id} is of node type "
                f"{lease.node_type or '(none given)'}, and the handler for queue "
                f"{handler.queue!r} runs {', '.join(sorted(handler.node_types))} nodes only; "
                "the coordinator granted its lease anyway (it is older than this check: "
                "upgrade it), so the lease runs out and the attempt's retry policy decides",
            )
            await self._ack(entry)
            return None
        # Until when this process knows it holds the lease: it was granted no earlier
        # than the request was sent. A grant that arrives after that (this process
        # was frozen, or the reply sat in a queue) may have been taken over already:
        # run only if a renewal confirms it is still ours.
        ttl = min(cfg.lease_ttl, lease.ttl) if lease.ttl > 0 else cfg.lease_ttl
        held = _Held(msg, lease.token, ttl)
        valid_until = (lease.asked_at or time.monotonic()) + ttl
        if time.monotonic() >= valid_until:
            asked = time.monotonic()
            if await self._renew(held, asked) is not True:
                log.warning(
                    "task %s attempt %d: the lease came back after its TTL and is no longer "
                    "ours: not running it",
                    msg.task_id,
                    msg.attempt,
                )
                self.skipped += 1
                await self._ack(entry)
                return None
            valid_until = asked + ttl
        trace.get_current_span().set_attribute("composer.node_id", lease.node_id)
        with log_context(node_id=lease.node_id):
            return await self._run_and_report(
                handler, entry, lease, held, valid_until, handler_done
            )

    async def _run_and_report(
        self,
        handler: Handler,
        entry: cq.Entry | None,
        lease: Lease,
        held: _Held,
        valid_until: float,
        handler_done: Callable[[], None],
    ) -> NextTask | None:
        assert self._client is not None
        cfg, msg = self.config, held.msg
        timeout = lease.timeout_seconds or cfg.default_timeout
        attempt_lines = AttemptLines(max_bytes=cfg.log_max_bytes, max_lines=cfg.log_max_lines)
        ctx = TaskContext(
            msg.task_id,
            msg.run_id,
            lease.node_id,
            msg.attempt,
            lease.max_attempts or 1,
            lease.workflow_id,
            lease.workflow_version,
            timeout,
            TaskLogger(logging.getLogger(f"composer.task.{handler.queue}"), attempt_lines),
            caller_of(lease.context_json),
        )
        task_input = json.loads(lease.input_json) if lease.input_json else None

        async def run_while_ours() -> Outcome | None:
            # Checked again as the handler's task starts, with no await before the call:
            # a process frozen after the check above must not start a handler on a
            # lease that may be another worker's by now.
            if time.monotonic() >= valid_until:
                return None
            return await handler.invoke(
                ctx, task_input, timeout, max_output_bytes=cfg.max_output_bytes
            )

        run = asyncio.create_task(run_while_ours())
        lost = await self._renew_until_done(run, held, valid_until)
        if not lost and run.result() is None:
            lost = True
        if lost:
            run.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await run
            log.warning(
                "lost the lease on task %s attempt %d: handler cancelled, nothing reported",
                msg.task_id,
                msg.attempt,
            )
            await self._ack(entry)
            return None
        offer = self._offer(handler)
        if offer is None:
            handler_done()  # else the slot is kept for the task the answer may bring
        outcome = run.result()
        assert outcome is not None  # None is a lost lease, handled above
        outcome = outcome.with_log(attempt_lines)
        try:
            accepted = await self._client.report(
                msg.task_id,
                msg.run_id,
                lease.node_id,
                msg.attempt,
                self.owner,
                lease.token,
                outcome,
                until=self._stopping.is_set,
                **({} if offer is None else {"take_next": offer}),
            )
        except SdkError as exc:
            self._abandon(msg, "reporting the outcome", exc)
            return None
        if accepted is None:
            log.warning(
                "could not report task %s before shutdown: it stays pending for recovery",
                msg.task_id,
            )
            return None
        if outcome.status == "COMPLETED":
            self.completed += 1
        else:
            self.failed += 1
        await self._ack(entry)
        return accepted if isinstance(accepted, NextTask) else None

    def _offer(self, handler: Handler) -> TakeNext | None:
        """What a report offers to run next (``WorkerConfig.take_next``): nothing while
        stopping, nor while the handler's reader waits for a slot (entries may be
        waiting on the stream: a freed slot goes to them, first come)."""
        if not self.config.take_next or self._stopping.is_set() or handler.queue in self._wanting:
            return None
        return TakeNext(handler.queue, handler.node_types, self.config.lease_ttl)

    async def _renew_until_done(
        self, run: asyncio.Task[Outcome | None], held: _Held, valid_until: float
    ) -> bool:
        """Renew every ttl/3 while the handler runs; True if the lease was lost.

        Lost also means not confirmed in time: when no renewal got through before
        ``valid_until`` (monotonic; the coordinator unreachable, this process frozen),
        the lease may have been taken over, so the handler must stop.
        """
        ttl, msg = held.ttl, held.msg
        try:
            # A handler with nothing to wait for has finished once its task had its
            # first turn: asked then, it is spared asyncio.wait's future and timer
            # (on uvloop a no-op task took 8.2 µs to run and see done, 3.2 with this).
            await asyncio.sleep(0)
            if run.done():
                return False
            while True:
                wait = min(ttl / 3, max(0.0, valid_until - time.monotonic()))
                done, _ = await asyncio.wait([run], timeout=wait)
                if done:
                    return False
                asked = time.monotonic()
                ok = await self._renew(held, asked, deadline=valid_until)
                if ok is False:
                    return True
                if ok:
                    valid_until = asked + ttl
                elif time.monotonic() >= valid_until:
                    log.warning(
                        "task %s attempt %d: no renewal got through before the lease ran out",
                        msg.task_id,
                        msg.attempt,
                    )
                    return True
        except asyncio.CancelledError:
            run.cancel()
            raise

    async def _renew(
        self, held: _Held, asked: float, *, deadline: float | None = None
    ) -> bool | None:
        """One renewal; None when it did not get an answer (by ``deadline``, if given)."""
        assert self._client is not None
        msg = held.msg
        call = self._client.renew(
            msg.task_id, msg.run_id, msg.attempt, self.owner, held.ttl, held.token
        )
        if deadline is None:
            return await call
        try:
            return await asyncio.wait_for(call, max(0.05, deadline - asked))
        except TimeoutError:
            return None

    def _misrouted(self, entry: cq.Entry | None, msg: cq.TaskMessage, why: str) -> None:
        """Say, loudly, that ``entry`` is dropped unrun: it cannot be a dispatch of its
        attempt to this handler, so someone wrote it (or a definition needs fixing)."""
        self.misrouted += 1
        log.log(
            ALERT,
            "task %s attempt %d of run %s: %s is not run and is acknowledged away: %s",
            msg.task_id,
            msg.attempt,
            msg.run_id,
            "its lease with a report"
            if entry is None
            else f"entry {entry.entry_id} on {entry.stream}",
            why,
        )

    def _abandon(self, msg: cq.TaskMessage, doing: str, exc: SdkError) -> None:
        """Leave the message unacknowledged: the lease-sweeper recovers its attempt."""
        self.abandoned += 1
        if isinstance(exc, CoordinatorUnavailable):
            log.warning(
                "task %s attempt %d: %s: %s; its message is left pending for the lease-sweeper",
                msg.task_id,
                msg.attempt,
                doing,
                exc,
            )
        else:
            log.error(
                "task %s attempt %d: %s was refused (%s); not retried, its message is left "
                "pending for the lease-sweeper",
                msg.task_id,
                msg.attempt,
                doing,
                exc,
            )

    async def _ack(self, entry: cq.Entry | None) -> None:
        """Acknowledge ``entry`` in the next batch of acknowledgements (None: a task
        leased with a report, which has no entry)."""
        if entry is not None:
            await self._acks.submit(entry.ref)

    async def _ack_batch(self, refs: Sequence[tuple[str, str]]) -> list[None]:
        assert self._queue is not None
        backoff = cq.Backoff(0.1, 2.0)
        for _ in range(20):
            try:
                await self._queue.ack(refs)
                return [None] * len(refs)
            except cq.QueueUnavailable as exc:
                delay = backoff.next()
                log.warning(
                    "acknowledging %d entries failed: %s; retrying in %.1fs",
                    len(refs),
                    exc,
                    delay,
                )
                await asyncio.sleep(delay)
        log.warning(
            "gave up acknowledging %d entries (%s, …): the sweeper will find their tasks finished",
            len(refs),
            " ".join(f"{stream} {entry_id}" for stream, entry_id in refs[:3]),
        )
        return [None] * len(refs)


class _Slot:
    """A handler slot taken from ``slots``: given back once, by whoever frees it first
    (the handler's end, or the end of what holds it)."""

    __slots__ = ("_slots", "held")

    def __init__(self, slots: asyncio.Semaphore) -> None:
        self._slots = slots
        self.held = True

    def free(self) -> None:
        if self.held:
            self.held = False
            self._slots.release()


@dataclass(frozen=True, slots=True)
class _Held:
    """A lease this worker holds: its attempt, its token, and the TTL it was granted."""

    msg: cq.TaskMessage
    token: str
    ttl: float


def _coordinator_client(cfg: WorkerConfig) -> Coordinator:
    """The client of ``cfg.coordinator``, or of every one of ``cfg.coordinators``, each
    run's calls routed to one of them."""

    def client(target: str) -> CoordinatorClient:
        return CoordinatorClient(
            target,
            cfg.token,
            attempts=cfg.coordinator_attempts,
            max_message_bytes=cfg.max_message_bytes,
            tls_ca_file=cfg.coordinator_tls_ca,
        )

    if not cfg.coordinators:
        return client(cfg.coordinator)
    return RunRoutedCoordinators([client(t) for t in parse_coordinators(cfg.coordinators)])


def _without_password(url: str) -> str:
    """``url`` fit for a log line: its password replaced by ``***``."""
    parts = urlsplit(url)
    if not parts.password:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def _default_handler(handler: Any) -> bool:
    """Whether ``handler`` is a signal's default: the system's, Python's KeyboardInterrupt,
    or ``asyncio.run``'s (which cancels the main task on Ctrl-C)."""
    if handler in (signal.SIG_DFL, signal.default_int_handler):
        return True
    bound = getattr(handler, "func", handler)  # asyncio.Runner installs a partial
    return isinstance(getattr(bound, "__self__", None), asyncio.Runner)


def _show_logs() -> Callable[[], None]:
    """Where the program configured no logging at all (a script's ``asyncio.run(worker.run())``),
    show the SDK's INFO lines and up on stderr: its start line, a drain, a refused lease.
    Returns what undoes it. A program that set up logging keeps its own."""
    root = logging.getLogger("composer")
    if root.hasHandlers():
        return lambda: None
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    level = root.level
    root.addHandler(handler)
    if level == logging.NOTSET:
        root.setLevel(logging.INFO)

    def undo() -> None:
        root.removeHandler(handler)
        root.setLevel(level)

    return undo
