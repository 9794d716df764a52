"""The engine: every input becomes an event, and every event goes through
lock → decide → persist → commit in one transaction (docs/architecture.md §3).

The run's row lock (``load_run``) serializes the events of one run, so two
workers finishing two branches at once cannot both miss the join. The lock
query also returns the transaction's clock: the machine decides at that time,
so every time persisted comes from the database. Ids come from here.

Errors tell the truth: a lost connection rolls the transaction back and the
whole event is applied again on a fresh snapshot, with backoff (Unavailable
once it keeps failing); a stale snapshot is retried once; anything else that
is not the caller's fault — an exception from the machine, a repository error,
a second stale snapshot — is a bug: one ALERT line, then Internal.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import composer_queue as cq
import composer_repo as repo
from composer_common import ids, limits
from composer_common.batching import Batcher
from composer_common.caller import Caller
from composer_common.logs import alert
from composer_common.telemetry import tracer
from composer_core import errors as core_errors
from composer_core.model import NodeType, RunStatus, WorkflowDAG
from composer_core.statemachine import (
    BufferSignal,
    Deps,
    Event,
    InputLimit,
    Machine,
    Missing,
    NodeCompleted,
    NodeFailed,
    ResolveWait,
    Run,
    RunCancelled,
    RunRetried,
    RunStarted,
    SignalReceived,
    TimerFired,
    Transition,
)
from composer_core.templates import Budget, Json
from composer_engine import _history
from composer_engine import opened as _opened
from composer_engine._definitions import DefinitionCache
from composer_engine._leases import LeaseGrant, Reporter, grant_leases, new_token
from composer_engine._metrics import instruments
from composer_engine._persist import announce, persist, write_dispatch
from composer_engine._publish import Dispatched, Publisher
from composer_engine._requests import start_digest
from composer_engine._tx import Tx
from composer_engine.errors import (
    BadRequest,
    Conflict,
    EngineError,
    Forbidden,
    IdempotencyKeyReused,
    Internal,
    NotFound,
    Parked,
    StaleSnapshot,
    Unavailable,
    UnknownSignal,
)
from composer_engine.sealing import KeyUnavailable, RunSeal, Sealer, looks_sealed
from composer_rpc.codes import ErrorCode

log = logging.getLogger("composer.engine")
T = TypeVar("T")
A = TypeVar("A")
B = TypeVar("B")


@dataclass(frozen=True, slots=True)
class Started:
    run_id: str
    status: RunStatus
    #: False when an earlier start with the same idempotency key is returned instead.
    created: bool


@dataclass(frozen=True, slots=True)
class AttemptLog:
    """The lines a worker attempt logged, as the worker bounded them: ``truncated``
    lines past its bound were dropped (the last line kept is a marker that says so)."""

    lines: tuple[str, ...]
    truncated: int = 0


@dataclass(frozen=True, slots=True)
class Report:
    """A worker's report of one attempt: its output (``completed``) or its failure."""

    run_id: str
    task_id: str
    node_id: str
    attempt: int
    #: The worker reporting: it counts only with the lease's token (None: the engine's
    #: own report, the sweeper's).
    reporter: Reporter | None
    completed: bool
    output: Json = None
    error: str = ""
    code: str | None = None
    permanent: bool = False
    #: What the attempt logged, stored with the report when it is applied (None: nothing).
    log: AttemptLog | None = None

    def event(self) -> NodeCompleted | NodeFailed:
        if self.completed:
            return NodeCompleted(self.task_id, self.node_id, self.attempt, self.output)
        return NodeFailed(
            self.task_id, self.node_id, self.attempt, self.error, self.code, self.permanent
        )


class _Busy:
    """A report's run was held by another transaction: submit it to the next batch."""


class _LeavesTheBatch(Exception):
    """An event of a group commit needs more than its share of the event loop: it is
    applied alone after the batch (decided off the loop), and the batch goes on."""


class _Alone:
    """A report left its batch (_LeavesTheBatch): its submitter applies it alone, so the
    batch's slot is not held while it is decided."""


#: The share of one event's template budget (templates/_budget.py) its decision may
#: spend on the event loop: 2,000 steps, some milliseconds. Past it, the decision is
#: made again on the decision thread, and a group commit's batch yields the loop
#: once its decisions together spent as much (docs/architecture.md §8).
ON_LOOP_SHARE = 0.02


_BUSY = _Busy()
_ALONE = _Alone()
#: How many batches a report whose run is held waits for before it is applied alone.
_BUSY_RETRIES = 3


def _once_each(requests: Sequence[repo.LeaseRequest]) -> tuple[list[int], list[int]]:
    """The positions of each attempt's first request, and of the repeats."""
    seen: set[tuple[str, str, int]] = set()
    first: list[int] = []
    repeats: list[int] = []
    for i, r in enumerate(requests):
        key = (r.run_id, r.task_id, r.attempt)
        (repeats if key in seen else first).append(i)
        seen.add(key)
    return first, repeats


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Engine:
    """Applies events to runs. Safe to share between tasks and to run in many processes."""

    def __init__(
        self,
        pool: repo.Pool,
        *,
        redis: cq.Queue | None = None,
        redis_prefix: str = "composer",
        shards: int = cq.DEFAULT_SHARDS,
        definitions: DefinitionCache | None = None,
        clock: Callable[[], dt.datetime] = utcnow,
        new_id: Callable[[], str] = ids.new_id,
        new_lease_token: Callable[[], str] = new_token,
        attempts: int = 6,
        batch_size: int = 256,
        batches_in_flight: int = 2,
        max_node_input_bytes: int | None = limits.DEFAULT_MAX_NODE_INPUT_BYTES,
        max_output_bytes: int | None = limits.DEFAULT_MAX_OUTPUT_BYTES,
        sealer: Sealer | None = None,
        park_seconds: float = 300.0,
    ) -> None:
        """``batch_size`` and ``batches_in_flight`` bound the group commit of reports
        (``report``): how many go in one transaction, how many transactions at once.

        ``max_node_input_bytes`` (COMPOSER_MAX_NODE_INPUT_BYTES): an attempt whose
        input is larger is not leased but failed for good; ``max_output_bytes``
        (COMPOSER_MAX_OUTPUT_BYTES): a worker's report of a larger output fails its
        node for good instead (None: no limit).

        ``sealer`` seals every document written and opens what the machine and the
        lease use (COMPOSER_ENCRYPTION_KEYS; None: no keys, documents stay plain). An
        attempt whose input does not open here is parked for ``park_seconds``."""
        self.pool = pool
        self.sealer = sealer or Sealer()
        self.park_for = dt.timedelta(seconds=park_seconds)
        self.max_node_input_bytes = max_node_input_bytes
        #: Checked as each node's input is rendered (the lease checks again).
        self.input_limit = (
            None
            if max_node_input_bytes is None
            else InputLimit(
                max_node_input_bytes,
                ErrorCode.INPUT_TOO_LARGE,
                functools.partial(_input_too_large, max_node_input_bytes),
            )
        )
        self.max_output_bytes = max_output_bytes
        #: Where decisions too heavy for the event loop are made (``_transition``).
        self._decider = ThreadPoolExecutor(max_workers=1, thread_name_prefix="composer-decide")
        self.redis = redis
        self.prefix = redis_prefix
        self.definitions = definitions or DefinitionCache()
        self._clock = clock
        self._new_id = new_id
        self._new_lease_token = new_lease_token
        self._attempts = attempts
        self._reports: Batcher[Report, bool | _Busy | _Alone] = Batcher(
            lambda reports: self._group_commit(reports, defer_busy=True),
            max_size=batch_size,
            max_in_flight=batches_in_flight,
            name="reports",
            # a run's reports never in two batches at once: they would queue on its lock
            key=lambda report: report.run_id,
        )
        self._leases: Batcher[repo.LeaseRequest, LeaseGrant] = Batcher(
            self.acquire_leases,
            max_size=batch_size,
            max_in_flight=batches_in_flight,
            name="leases",
        )
        self._renewals: Batcher[repo.LeaseRequest, dt.datetime | None] = Batcher(
            self.renew_leases,
            max_size=batch_size,
            max_in_flight=batches_in_flight,
            name="renewals",
        )
        #: Publishes each transaction's dispatches right after its commit.
        self._publish = None if redis is None else Publisher(pool, redis, redis_prefix, shards)

    async def aclose(self) -> None:
        """Delete now the outbox rows of the dispatches published so far (their deletion
        is batched, off the callers' path: engine/_publish.py). Call it before closing
        the pool; a row it misses is published again by the outbox-enqueuer (a
        duplicate message, refused a second lease). The engine stays usable."""
        if self._publish is not None:
            await self._publish.aclose()

    # -- public inputs ---------------------------------------------------------

    async def start(
        self,
        workflow_id: str,
        *,
        version: int | None = None,
        input: Json = None,
        config: Json = None,
        run_id: str | None = None,
        idempotency_key: str | None = None,
        start_node: str | None = None,
        caller: Caller | None = None,
    ) -> Started:
        """Insert a run and apply RunStarted in one transaction.

        ``version`` None (or 0) is the deployed one. A client ``run_id`` must be
        a UUIDv7 from the last 24 h and at most 1 h ahead. A repeated
        ``idempotency_key`` returns the run it started, changing nothing; sent with
        another request (input, config, version or start node: ``start_digest``) it
        is IdempotencyKeyReused, unless the key predates V012 (no digest kept).
        ``caller``, who starts it and the metadata they pass, is recorded
        (``started_by``) and kept as the run's calling context, which every TASK
        node's handler gets with its lease (None: the run has none).
        """
        context = None if caller is None else caller.document()
        if run_id is not None:
            try:
                run_id = ids.check_client_run_id(run_id, self._clock())
            except ids.InvalidRunId as exc:
                raise BadRequest(str(exc)) from exc
        new_run_id = run_id or self._new_id()
        _refuse_sealed_looking(input, "the run input")
        _refuse_sealed_looking(config, "the run config")
        data_key = self.sealer.new_data_key(new_run_id)
        seal = self.sealer.for_run(new_run_id, data_key)
        # sealed once: the run's row and its TASK rows' copies hold the same document
        sealed_context = seal.doc(context)
        digest = None
        if idempotency_key is not None:
            digest = start_digest(input, config, version, start_node)

        async def attempt(tx: Tx) -> Started:
            if version:
                dag = await self.definitions.get(tx.conn, workflow_id, version)
            else:
                dag = await self.definitions.deployed(tx.conn, workflow_id)
            started = await repo.insert_run(
                tx.conn,
                new_run_id,
                workflow_id=workflow_id,
                version=dag.version,
                input=seal.doc(input if input is not None else {}),
                config=seal.doc(config),
                idempotency_key=idempotency_key,
                # sealed like the input it digests (the run id is its associated data)
                request_digest=seal.text(digest),
                data_key=data_key,
                started_by=None if caller is None else caller.name,
                context=sealed_context,
            )
            if not started.created:
                if started.request_digest is not None and digest is not None:
                    first = self.sealer.open_text(started.run_id, started.request_digest)
                    if first != digest:
                        raise IdempotencyKeyReused(
                            f"Idempotency-Key {idempotency_key!r} already started run "
                            f"{started.run_id} of workflow {workflow_id!r} with a different "
                            "request (input, config, version or start node): send the same "
                            "request to get that run back, or use a new key for a new run",
                            idempotency_key=idempotency_key,
                            run_id=started.run_id,
                        )
                return Started(started.run_id, started.status, created=False)
            tx.after_commit(lambda: instruments().runs_started.add(1, {"workflow_id": workflow_id}))
            run = Run(
                new_run_id,
                workflow_id,
                dag.version,
                RunStatus.RUNNING,
                input if input is not None else {},
                config,
                signals=(),
            )
            await self._decide(
                tx,
                dag,
                repo.LockedRun(run, started.now, data_key=data_key, context=sealed_context),
                RunStarted(start_node),
                by=None if caller is None else caller.name,
            )
            tx.after_commit(
                lambda: log.info("run %s of %s v%d started", new_run_id, workflow_id, dag.version)
            )
            return Started(new_run_id, run.status, created=True)

        return await self._in_tx(attempt)

    async def handle(
        self, run_id: str, event: Event, *, reporter: Reporter | None = None
    ) -> Transition:
        """Apply one event to a run on the definition version it is pinned to.

        With ``reporter`` (a worker) a NodeCompleted/NodeFailed counts only with
        the attempt's lease token: a worker whose lease expired and was taken over,
        or that never held it, must not finish the attempt.
        """
        transition = await self._handle(run_id, event, reporter=reporter)
        assert transition is not None  # only skip_locked passes a busy run
        return transition

    async def _handle(
        self,
        run_id: str,
        event: Event,
        *,
        reporter: Reporter | None = None,
        skip_locked: bool = False,
        guard: Callable[[Tx], Awaitable[str | None]] | None = None,
        attempt_log: AttemptLog | None = None,
    ) -> Transition | None:
        """``handle``, plus: ``skip_locked`` returns None at once when another transaction
        holds the run's lock; ``guard`` runs under the lock and names a reason to ignore
        the event (None: apply it); ``attempt_log`` is stored with a report applied."""

        async def attempt(tx: Tx) -> Transition | None:
            if skip_locked:
                locked = await repo.try_load_run(tx.conn, run_id)
                if locked is None:
                    return None
            else:
                locked = await repo.load_run(tx.conn, run_id)
            if reporter is not None and isinstance(event, NodeCompleted | NodeFailed):
                holder = await repo.lease_holder(tx.conn, run_id, event.task_id, event.attempt)
                reason = reporter.refusal(holder, event.node_id, event.attempt)
                if reason is not None:
                    return Transition((), locked.run, ignored=reason)
            if guard is not None:
                refused = await guard(tx)
                if refused is not None:
                    return Transition((), locked.run, ignored=refused)
            dag = await self.definitions.get(tx.conn, locked.run.workflow_id, locked.run.version)
            return await self._decide(tx, dag, locked, event, attempt_log=attempt_log)

        return await self._in_tx(attempt)

    async def report(self, report: Report) -> bool:
        """Apply a worker's report in the next group commit (``report_many``); False
        when it was stale (acknowledged, nothing changed).

        A report whose run another batch holds (a fan-in spread over two batches in
        flight) waits for the next batch, a few times, before it is applied alone:
        alone, it would queue on the lock in a transaction of its own."""
        report = self._storable(report)
        for _ in range(_BUSY_RETRIES):
            result = await self._reports.submit(report)
            if isinstance(result, _Alone):
                break
            if not isinstance(result, _Busy):
                return result
        answer = await self._report_alone(report)
        if isinstance(answer, EngineError):
            raise answer
        return answer

    async def report_many(self, reports: Sequence[Report]) -> list[bool | EngineError]:
        """Apply many workers' reports in one transaction: the coordinator's group
        commit (docs/architecture.md §3.1). Returns, for each report, whether it was
        accepted (False: stale) or the error it alone met.

        Their runs are locked in one statement and loaded in another; each report is
        applied in order to its run's snapshot as the reports before it left it (a
        fan-in of several reports to one run), persisted, and everything commits
        once. A report whose run another transaction holds, and every report of a
        batch that failed as a whole (one poisoned event, a lost connection), is
        applied on its own through ``handle``, so one bad report never fails the others.
        """
        results = await self._group_commit([self._storable(r) for r in reports], defer_busy=False)
        return [r for r in results if not isinstance(r, _Busy | _Alone)]

    def _storable(self, report: Report) -> Report:
        """``report``, or, when its output cannot be stored (over ``max_output_bytes``,
        or NaN, Infinity, ``\\u0000``: JSONB refuses them), the permanent failure of
        its attempt that says why. The SDK checks first; an older one may not."""
        if not report.completed:
            if looks_sealed(report.error):  # never read back as a sealed document
                return dataclasses.replace(report, error=" " + report.error)
            return report
        if looks_sealed(report.output):
            return dataclasses.replace(
                report,
                completed=False,
                output=None,
                error="the output is a string that starts with '$sealed:v1:', which Composer "
                "keeps for sealed documents: wrap it in an object",
                code=ErrorCode.BAD_OUTPUT,
                permanent=True,
            )
        encoded = limits.encode(
            report.output,
            "output",
            max_bytes=self.max_output_bytes,
            setting="COMPOSER_MAX_OUTPUT_BYTES",
        )
        if not isinstance(encoded, limits.Refusal):
            return report
        return dataclasses.replace(
            report,
            completed=False,
            output=None,
            error=encoded.message,
            code=ErrorCode.OUTPUT_TOO_LARGE if encoded.too_large else ErrorCode.BAD_OUTPUT,
            permanent=True,
        )

    async def _group_commit(
        self, reports: Sequence[Report], *, defer_busy: bool
    ) -> list[bool | EngineError | _Busy | _Alone]:
        """``report_many``; with ``defer_busy`` a report whose run another transaction
        holds is answered ``_BUSY`` (its caller submits it again) instead of applied alone,
        and one too heavy for the batch ``_ALONE`` (its caller applies it alone)."""
        results: list[bool | EngineError | _Busy | _Alone | None] = [None] * len(reports)
        busy: list[int] = []
        heavy: list[int] = []

        async def apply(tx: Tx) -> None:
            locked = await repo.lock_runs(tx.conn, {r.run_id for r in reports})
            if locked.now is None:
                return
            snapshots = dict(locked.runs)
            for i, r in enumerate(reports):
                run = snapshots.get(r.run_id)
                if run is None:  # locked by another transaction, or no such run
                    busy.append(i)
                    continue
                if r.reporter is not None:
                    holder = locked.leases.get((r.run_id, r.task_id, r.attempt))
                    try:
                        refused = r.reporter.refusal(holder, r.node_id, r.attempt)
                    except Forbidden as exc:
                        results[i] = exc
                        continue
                    if refused is not None:
                        results[i] = False
                        continue
                dag = await self.definitions.get(tx.conn, run.workflow_id, run.version)
                # the run as the batch's earlier reports left it, with its key and context
                this = dataclasses.replace(locked.locked(r.run_id), run=run)
                try:
                    transition = await self._decide(
                        tx, dag, this, r.event(), attempt_log=r.log, in_batch=True
                    )
                except _LeavesTheBatch:
                    # applied alone once the batch committed, decided off the loop; the
                    # run's later reports in the batch wait for it (busy)
                    heavy.append(i)
                    del snapshots[r.run_id]
                    continue
                snapshots[r.run_id] = transition.run
                results[i] = transition.ignored is None
                if tx.loop_work >= ON_LOOP_SHARE:
                    # a batch's decisions hold the loop together: let it serve others
                    tx.loop_work = 0.0
                    await asyncio.sleep(0)

        try:
            try:
                async with repo.tracked_transaction(self.pool) as conn:
                    tx = Tx(conn)
                    await apply(tx)
                    await tx.writes.flush(tx)
            except repo.CommitUnknown as exc:
                if not await committed(self.pool, exc, attempts=self._attempts):
                    raise
        except Exception as exc:
            log.warning(
                "a group commit of %d report(s) failed (%s: %s): applying them one at a time",
                len(reports),
                type(exc).__name__,
                exc,
            )
            results = [None] * len(reports)
        else:
            if self._publish is not None and tx.dispatched:
                await self._publish(tx.dispatched)
            await tx.run_after_commit()
            if defer_busy:
                for i in busy:
                    results[i] = _BUSY
                for i in heavy:
                    results[i] = _ALONE
        alone = [i for i, result in enumerate(results) if result is None]
        if alone:
            answers = await asyncio.gather(*(self._report_alone(reports[i]) for i in alone))
            for i, answer in zip(alone, answers, strict=True):
                results[i] = answer
        return [r if r is not None else False for r in results]

    async def _report_alone(self, r: Report) -> bool | EngineError:
        try:
            transition = await self._handle(
                r.run_id, r.event(), reporter=r.reporter, attempt_log=r.log
            )
            assert transition is not None  # only skip_locked passes a busy run
        except NotFound:
            return False
        except EngineError as exc:
            return exc
        return transition.ignored is None

    async def report_completed(
        self,
        run_id: str,
        task_id: str,
        node_id: str,
        attempt: int,
        output: Json,
        *,
        reporter: Reporter | None = None,
    ) -> bool:
        """A worker's success; False when the report was stale (acknowledged, nothing changed)."""
        tr = await self.handle(
            run_id, NodeCompleted(task_id, node_id, attempt, output), reporter=reporter
        )
        return tr.ignored is None

    async def report_failed(
        self,
        run_id: str,
        task_id: str,
        node_id: str,
        attempt: int,
        error: str,
        *,
        code: str | None = None,
        permanent: bool = False,
        reporter: Reporter | None = None,
    ) -> bool:
        event = NodeFailed(task_id, node_id, attempt, error, code, permanent)
        tr = await self.handle(run_id, event, reporter=reporter)
        return tr.ignored is None

    async def fire_timer(
        self, run_id: str, task_id: str, node_id: str, *, skip_locked: bool = False
    ) -> bool | None:
        """Apply TimerFired; False when the wait no longer needed it (resolved, cancelled).

        ``skip_locked`` (the timer loop) never waits for the run's lock: None means
        another transaction holds it (another timer replica firing it, or a worker's
        report), and the caller comes back on its next pass.
        """
        tr = await self._handle(run_id, TimerFired(task_id, node_id), skip_locked=skip_locked)
        return None if tr is None else tr.ignored is None

    async def expire_lease(
        self, run_id: str, task_id: str, node_id: str, attempt: int, *, owner: str | None
    ) -> bool:
        """Fail a RUNNING attempt whose worker stopped renewing its lease ("lease
        expired"); its retry policy decides what follows. Fenced: False, changing
        nothing, unless ``owner`` still holds the lease and it is still expired by the
        database's clock, under the run lock and a lock on the task row."""
        ref = repo.TaskRef(run_id, task_id, node_id, attempt)

        async def still_expired(tx: Tx) -> str | None:
            if await repo.lock_expired_lease(tx.conn, ref, owner):
                return None
            return f"the lease of {node_id} attempt {attempt} was renewed, taken over or released"

        event = NodeFailed(
            task_id, node_id, attempt, f"lease expired (held by {owner})", ErrorCode.LEASE_EXPIRED
        )
        tr = await self._handle(run_id, event, guard=still_expired)
        return tr is not None and tr.ignored is None

    async def redispatch(self, run_id: str, task_id: str, attempt: int) -> bool:
        """Dispatch a PENDING/QUEUED attempt again whose message was lost (Redis lost
        its streams, say), under the same attempt: the lease makes a duplicate harmless.
        False when the attempt moved on meanwhile. No run lock: one fenced row update
        and an outbox row, like a lease."""

        async def attempt_tx(tx: Tx) -> bool:
            run = await repo.get_run(tx.conn, run_id)
            dag = await self.definitions.get(tx.conn, run.workflow_id, run.version)
            again = await repo.redispatch_task(tx.conn, run_id, task_id, attempt)
            if again is None:
                return False
            queue = again.queue or dag.queue(again.node_id)
            if queue is None:  # pragma: no cover - only worker nodes are dispatched
                raise BadRequest(f"node {again.node_id} of run {run_id} has no queue")
            await write_dispatch(
                tx,
                repo.TaskRef(run_id, task_id, again.node_id, attempt),
                queue=queue,
                not_before=None,
            )
            tx.writes.history.append(
                repo.NewHistory(
                    run_id,
                    "task.dispatched",
                    node_id=again.node_id,
                    task_id=task_id,
                    attempt=attempt,
                    detail={"queue": queue, "again": "its message was lost"},
                )
            )
            return True

        return await self._in_tx(attempt_tx)

    async def signal(
        self,
        run_id: str,
        name: str,
        payload: Json = None,
        *,
        idempotency_key: str | None = None,
        sent_by: str | None = None,
    ) -> bool:
        """Send a signal; True if a waiting node took it, False if it was buffered.

        A name no WAIT_FOR_EVENT node of the run's version waits for is refused
        (UnknownSignal) rather than buffered where nothing would ever take it; a
        finished run refuses any signal (Conflict).

        A repeated ``idempotency_key`` (a client sending again a request whose answer
        it lost) changes nothing and answers as the first request did; the same key
        for another signal name is a Conflict. Every signal is kept with ``sent_by``
        (the name of the API token that sent it): one a waiting node took at once
        is kept consumed (``repo.run_signals``)."""
        _refuse_sealed_looking(payload, "the signal payload")

        async def attempt(tx: Tx) -> bool:
            locked = await repo.load_run(tx.conn, run_id)
            if idempotency_key is not None:
                seen = await repo.signal_key(tx.conn, run_id, idempotency_key)
                if seen is not None:
                    first_name, delivered = seen
                    if first_name != name:
                        raise Conflict(
                            f"Idempotency-Key {idempotency_key!r} was used for signal "
                            f"{first_name!r} of this run, not {name!r}: use a new key"
                        )
                    return delivered
            dag = await self.definitions.get(tx.conn, locked.run.workflow_id, locked.run.version)
            # a finished run takes no signal at all: the machine says so (Conflict)
            running = not locked.run.status.is_terminal
            if running and name.strip() and not dag.waits_for_signal(name):
                raise _unknown_signal(locked.run, dag, name)
            tr = await self._decide(tx, dag, locked, SignalReceived(name, payload), by=sent_by)
            await self._keep_signal(tx, locked, name, payload, tr, sent_by)
            if idempotency_key is not None:
                await repo.record_signal_key(
                    tx.conn, run_id, idempotency_key, name=name, delivered=tr.signal_delivered
                )
            return tr.signal_delivered

        return await self._in_tx(attempt)

    async def _keep_signal(
        self,
        tx: Tx,
        locked: repo.LockedRun,
        name: str,
        payload: Json,
        transition: Transition,
        sent_by: str | None,
    ) -> None:
        """Record who sent the signal: on its buffered row, or on a row of its own,
        consumed at once (its payload sealed like the run's other documents), when a
        waiting node took it (the first wait it resolved)."""
        run_id = locked.run.run_id
        for action in transition.actions:
            if isinstance(action, BufferSignal):
                if sent_by is not None:
                    await repo.record_signal_sender(tx.conn, run_id, action.signal_id, sent_by)
                return
        taker = next((a.node_id for a in transition.actions if isinstance(a, ResolveWait)), None)
        if transition.signal_delivered and taker is not None:
            seal = await self._run_seal(tx, locked)  # the decision's: its key is stored now
            await repo.record_taken_signal(
                tx.conn,
                run_id,
                self._new_id(),
                name,
                seal.doc(payload),
                node_id=taker,
                sent_by=sent_by,
            )

    async def cancel(
        self, run_id: str, reason: str = "", *, cancelled_by: str | None = None
    ) -> None:
        """Cancel a run that is still going (Conflict when it finished otherwise; a
        cancelled run answers as the first cancel did). ``cancelled_by``, the name of
        the API token, is recorded with the cancel that took effect."""
        if looks_sealed(reason):  # it is stored as the run's and its tasks' error
            raise BadRequest(
                "the cancel reason starts with '$sealed:v1:', which Composer keeps for sealed "
                "documents: word it otherwise"
            )

        async def attempt(tx: Tx) -> Transition:
            locked = await repo.load_run(tx.conn, run_id)
            dag = await self.definitions.get(tx.conn, locked.run.workflow_id, locked.run.version)
            transition = await self._decide(tx, dag, locked, RunCancelled(reason), by=cancelled_by)
            if cancelled_by is not None and transition.ignored is None:
                await repo.record_cancelled_by(tx.conn, run_id, cancelled_by)
            return transition

        await self._in_tx(attempt)

    async def retry(
        self,
        run_id: str,
        from_node: str,
        *,
        version: int | None = None,
        input: Json = None,
        config: Json = None,
        retried_by: str | None = None,
    ) -> None:
        """Restart a finished run from a node (refused while tasks are active).

        ``version`` None keeps the run's version, 0 moves it to the deployed
        one, a positive number to that version; ``input``/``config`` replace the run's.
        ``retried_by``, the name of the API token, is recorded as the run's last
        retrier. The run keeps the calling context of its start.
        """

        async def attempt(tx: Tx) -> Transition:
            locked = await repo.load_run(tx.conn, run_id)
            run = locked.run
            if version is None:
                dag = await self.definitions.get(tx.conn, run.workflow_id, run.version)
            elif version == 0:
                dag = await self.definitions.deployed(tx.conn, run.workflow_id)
            elif version > 0:
                dag = await self.definitions.get(tx.conn, run.workflow_id, version)
            else:
                raise BadRequest(
                    f"version must be 0 (the deployed one) or a version number, not {version}"
                )
            transition = await self._decide(
                tx, dag, locked, RunRetried(from_node, input, config), by=retried_by
            )
            if retried_by is not None and transition.ignored is None:
                await repo.record_retried_by(tx.conn, run_id, retried_by)
            return transition

        await self._in_tx(attempt)

    async def acquire_lease(
        self,
        run_id: str,
        task_id: str,
        attempt: int,
        *,
        owner: str,
        ttl: float,
        claim: str = "",
        queues: frozenset[str] | None = None,
        queue: str | None = None,
        node_types: frozenset[NodeType] | None = None,
    ) -> LeaseGrant:
        """Grant a worker the attempt under a fresh token (no run lock needed: one
        fenced row update); Forbidden when the task is on none of ``queues``, Misrouted
        when it is not on ``queue``, not of ``node_types`` or not due yet."""
        request = repo.LeaseRequest(
            run_id,
            task_id,
            attempt,
            owner,
            ttl,
            claim=claim,
            queues=queues,
            queue=queue,
            node_types=node_types,
        )
        [answer] = await self.acquire_leases([request])
        if isinstance(answer, EngineError):
            raise answer
        return answer

    async def lease(self, request: repo.LeaseRequest) -> LeaseGrant:
        """``acquire_lease`` in the next batch of leases (``acquire_leases``)."""
        return await self._leases.submit(request)

    async def renew(self, request: repo.LeaseRequest) -> dt.datetime | None:
        """``renew_lease`` in the next batch of renewals (``renew_leases``)."""
        return await self._renewals.submit(request)

    async def acquire_leases(
        self, requests: Sequence[repo.LeaseRequest]
    ) -> list[LeaseGrant | EngineError]:
        """Grant many leases in one statement (no transaction: each is one fenced row
        update), each under a fresh token. An attempt asked for twice in the batch is
        asked again after it."""
        tokened = [dataclasses.replace(r, token=self._new_lease_token()) for r in requests]

        async def grant(
            conn: repo.Connection, batch: Sequence[repo.LeaseRequest]
        ) -> list[LeaseGrant | EngineError]:
            return await grant_leases(
                conn,
                self.definitions,
                batch,
                max_input_bytes=self.max_node_input_bytes,
                sealer=self.sealer,
                park_for=self.park_for,
            )

        answers = await self._fenced_batch(tokened, grant, self._acquire_one)
        first, _ = _once_each(requests)  # a repeat was answered, and failed, by itself
        too_large = [
            (requests[i], answer)
            for i in first
            if isinstance(answer := answers[i], LeaseGrant) and answer.too_large
        ]
        if too_large:
            await asyncio.gather(*(self._fail_too_large(r, a) for r, a in too_large))
        return answers

    async def _fail_too_large(self, request: repo.LeaseRequest, grant: LeaseGrant) -> None:
        """Fail for good an attempt whose input is over the node input limit (the
        lease statement just took it, under a token no worker holds). Should this
        fail, the lease runs out and the lease-sweeper retries the attempt, whose
        lease is refused again, and this runs again."""
        event = NodeFailed(
            request.task_id,
            grant.node_id,
            request.attempt,
            grant.reason,
            ErrorCode.INPUT_TOO_LARGE,
            permanent=True,
        )
        try:
            await self.handle(request.run_id, event)
        except EngineError as exc:
            log.warning(
                "run %s: could not fail %s, whose input is too large (%s): the lease "
                "sweeper will take it back",
                request.run_id,
                grant.node_id,
                exc,
            )

    async def renew_leases(
        self, requests: Sequence[repo.LeaseRequest]
    ) -> list[dt.datetime | EngineError | None]:
        """Renew many leases in one statement; for each the new expiry, or None: lost
        (or not this token's)."""
        return await self._fenced_batch(requests, repo.renew_leases, self._renew_one)

    async def _fenced_batch(
        self,
        requests: Sequence[repo.LeaseRequest],
        statement: Callable[[repo.Connection, Sequence[repo.LeaseRequest]], Awaitable[list[A]]],
        alone: Callable[[repo.LeaseRequest], Awaitable[B]],
    ) -> list[A | B | EngineError]:
        """``statement`` for the first request of each attempt, as one statement; the
        repeats of an attempt ``alone``, after it."""
        first, repeats = _once_each(requests)

        async def run(tx: Tx) -> list[A]:
            return await statement(tx.conn, [requests[i] for i in first])

        try:
            answers = await self._in_tx(run, single_statement=True)
        except EngineError as exc:
            return [exc] * len(requests)
        ordered: dict[int, A | B | EngineError] = dict(zip(first, answers, strict=True))
        for i in repeats:
            try:
                ordered[i] = await alone(requests[i])
            except EngineError as exc:
                ordered[i] = exc
        return [ordered[i] for i in range(len(requests))]

    async def _acquire_one(self, r: repo.LeaseRequest) -> LeaseGrant:
        return await self.acquire_lease(
            r.run_id,
            r.task_id,
            r.attempt,
            owner=r.owner,
            ttl=r.ttl,
            claim=r.claim,
            queues=r.queues,
            queue=r.queue,
            node_types=r.node_types,
        )

    async def renew_lease(
        self,
        run_id: str,
        task_id: str,
        attempt: int,
        *,
        owner: str,
        ttl: float,
        token: str,
        queues: frozenset[str] | None = None,
    ) -> dt.datetime | None:
        """Extend the lease ``token`` names; None when it is lost or not this token's."""

        async def attempt_tx(tx: Tx) -> dt.datetime | None:
            return await repo.renew_lease(
                tx.conn, run_id, task_id, attempt, owner=owner, ttl=ttl, token=token, queues=queues
            )

        return await self._in_tx(attempt_tx, single_statement=True)

    async def _renew_one(self, r: repo.LeaseRequest) -> dt.datetime | None:
        return await self.renew_lease(
            r.run_id, r.task_id, r.attempt, owner=r.owner, ttl=r.ttl, token=r.token, queues=r.queues
        )

    # -- the shell -------------------------------------------------------------

    async def _decide(
        self,
        tx: Tx,
        dag: WorkflowDAG,
        locked: repo.LockedRun,
        event: Event,
        *,
        by: str | None = None,
        attempt_log: AttemptLog | None = None,
        in_batch: bool = False,
    ) -> Transition:
        """Apply ``event`` to the locked run and persist what it decided, with its
        history rows (``by``: the API token's name behind the event, if any).

        ``in_batch`` (a group commit): an event whose templates need more than their
        share of the event loop is not decided here but raises _LeavesTheBatch, having
        written nothing: the batch goes on without it, and it is applied alone."""
        kind = type(event).__name__
        node_id = getattr(event, "node_id", None)
        # names only: an event's and its actions' values may be sealed documents,
        # which are never logged
        about = f"run {locked.run.run_id}, event {kind}" + (f" of {node_id}" if node_id else "")
        tx.deciding = lambda: about
        seal = await self._run_seal(tx, locked)
        run = _opened.snapshot(self.sealer, locked.run)
        if run is not locked.run:
            locked = dataclasses.replace(locked, run=run)
        attributes = {
            "composer.run_id": run.run_id,
            "composer.workflow_id": run.workflow_id,
            "composer.event": kind,
        }
        if node_id:
            attributes["composer.node_id"] = node_id
        with tracer().start_as_current_span(f"apply {kind}", attributes=attributes) as span:
            tx.now = locked.now
            transition = await self._transition(tx, dag, locked, event, in_batch=in_batch)
            if transition is None:
                span.set_attribute("composer.left_the_batch", True)
            else:
                span.set_attribute("composer.actions", len(transition.actions))
                outcome = "applied"
                if transition.ignored is None:
                    actions = transition.actions
                    tx.deciding = lambda: (
                        f"{about}, actions {', '.join(type(a).__name__ for a in actions)}"
                    )
                    effects = await persist(
                        tx, dag, run, transition.actions, seal, context=locked.context
                    )
                    tx.writes.history.extend(_history.rows(run, event, actions, seal, by=by))
                    if attempt_log is not None and isinstance(event, NodeCompleted | NodeFailed):
                        tx.writes.keep_log(run.run_id, event, attempt_log, seal)
                    announce(
                        tx,
                        effects,
                        redis=self.redis,
                        prefix=self.prefix,
                        run=run,
                        log_error=not seal.sealing,
                    )
                else:
                    outcome = "ignored"
                    span.set_attribute("composer.ignored", transition.ignored)
                    log.debug("run %s: %s ignored: %s", run.run_id, kind, transition.ignored)
                tx.after_commit(
                    lambda: instruments().events.add(1, {"event": kind, "outcome": outcome})
                )
        if transition is None:
            raise _LeavesTheBatch
        return transition

    async def _transition(
        self, tx: Tx, dag: WorkflowDAG, locked: repo.LockedRun, event: Event, *, in_batch: bool
    ) -> Transition | None:
        """Apply the machine, loading what it asks for (one query per ask) and applying
        again on the extended snapshot until it decides.

        The decision runs on the event loop until its templates pass their share of it
        (ON_LOOP_SHARE of the event's budget); then it is made again from the start on
        the engine's decision thread, on a budget of its own, so the loop goes on
        serving (the GIL passes between the two every few milliseconds). ``in_batch``:
        None instead (a group commit applies such an event alone, not in the batch)."""
        deps = Deps(locked.now, self._new_id, self.input_limit)
        budget = Budget(pause_at=ON_LOOP_SHARE)
        machine = Machine(dag, deps, budget=budget)
        on_loop = True
        snapshot = locked.run
        for _ in range(len(snapshot.nodes) + 2):  # every ask loads something new
            try:
                if on_loop:
                    try:
                        result = machine.apply(snapshot, event)
                    except core_errors.WorkPaused:
                        if in_batch:
                            return None
                        on_loop, machine = False, Machine(dag, deps)
                        result = await self._off_loop(machine, snapshot, event)
                else:
                    result = await self._off_loop(machine, snapshot, event)
            except core_errors.InvalidRequest as exc:
                raise BadRequest(str(exc)) from exc
            except (core_errors.RunFinished, core_errors.RunActive) as exc:
                raise Conflict(str(exc)) from exc
            if not isinstance(result, Missing):
                if on_loop:
                    tx.loop_work += budget.used
                return result
            run_id = snapshot.run_id
            snapshot = snapshot.with_data(
                _opened.outputs(
                    self.sealer, run_id, await repo.load_outputs(tx.conn, run_id, result.outputs)
                )
                if result.outputs
                else None,
                _opened.signals(self.sealer, run_id, await repo.pending_signals(tx.conn, run_id))
                if result.signals
                else None,
            )
        raise AssertionError(f"the machine keeps asking for data it was given: {result}")

    async def _off_loop(self, machine: Machine, run: Run, event: Event) -> Transition | Missing:
        """``machine.apply`` on the decision thread: one, so that heavy decisions take
        turns and the event loop competes for the GIL with one thread at most."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._decider, machine.apply, run, event)

    async def _run_seal(self, tx: Tx, locked: repo.LockedRun) -> RunSeal:
        """What seals the run's documents; a run started before sealing was turned on
        gets its data key now."""
        data_key = locked.data_key
        run_id = locked.run.run_id
        if data_key is None:
            new_key = self.sealer.new_data_key(run_id)
            if new_key is None:
                return self.sealer.for_run(run_id, None)
            data_key = await repo.set_data_key(tx.conn, run_id, new_key)
        return self.sealer.for_run(run_id, data_key)

    async def _in_tx(
        self, fn: Callable[[Tx], Awaitable[T]], *, single_statement: bool = False
    ) -> T:
        return await in_transaction(
            self.pool,
            fn,
            attempts=self._attempts,
            single_statement=single_statement,
            publish=self._publish,
        )


# -- the one retry loop -----------------------------------------------------------
#
# One transaction, run again while the database is briefly unavailable — the one retry
# loop of the engine, shared by events on runs and the definitions use case.
#
# What goes wrong maps to one EngineError (docs/architecture.md §4.7):
#
# - a lost connection (``repo.Transient``) or a lost race that may succeed now (a
#   retryable ``repo.Conflict``: two creates of the next definition version) rolls
#   back and runs the whole function again, with jittered backoff; after
#   ``attempts`` tries it is Unavailable;
# - a StaleSnapshot (a fenced write matched no row under the run lock) is applied
#   once more on a fresh snapshot; a second one is a bug;
# - the repository's NotFound, Conflict and Invalid, and a template error, are
#   the caller's: NotFound, Conflict, BadRequest;
# - anything else is a bug: logged once as an ALERT naming what the transaction
#   was deciding, and raised as Internal — never Unavailable, which would make
#   clients retry a bug forever.

#: How many times a transaction is tried before the caller is told to try again later.
DEFAULT_ATTEMPTS = 6


async def in_transaction(
    pool: repo.Pool,
    fn: Callable[[Tx], Awaitable[T]],
    *,
    attempts: int = DEFAULT_ATTEMPTS,
    single_statement: bool = False,
    first_delay: float = 0.02,
    publish: Callable[[Sequence[Dispatched]], Awaitable[None]] | None = None,
) -> T:
    """Run ``fn`` in a transaction on ``pool``, commit, then ``publish`` the
    dispatches it committed and run its after-commit work.

    ``single_statement``: ``fn`` runs one statement, atomic by itself, so no
    BEGIN/COMMIT is sent around it (leases use it: two round trips fewer).
    ``first_delay``: the first backoff (jittered, doubling up to a second).
    """
    if attempts < 1:
        raise ValueError(f"attempts must be at least 1, not {attempts}")
    backoff = cq.Backoff(first_delay, 1.0)
    borrow = repo.connection if single_statement else repo.tracked_transaction
    stale = 0
    for attempt in range(1, attempts + 1):
        tx: Tx | None = None
        try:
            try:
                async with borrow(pool) as conn:
                    tx = Tx(conn)
                    result = await fn(tx)
                    await tx.writes.flush(tx)
            except repo.CommitUnknown as exc:
                if not await committed(pool, exc, attempts=attempts):
                    raise
            assert tx is not None  # the block ran to its COMMIT
            if publish is not None and tx.dispatched:
                await publish(tx.dispatched)
            await tx.run_after_commit()
            return result
        except (repo.Transient, repo.Conflict) as exc:
            if not exc.retryable:
                raise Conflict(str(exc)) from exc
            if attempt == attempts:
                raise Unavailable(
                    f"database unavailable after {attempt} attempts: {exc}; try again later"
                ) from exc
            delay = backoff.next()
            log.warning("%s; retrying in %.2fs", exc, delay)
            await asyncio.sleep(delay)
        except StaleSnapshot as exc:
            stale += 1
            if stale > 1:
                raise _internal(tx, f"stale snapshot twice in a row: {exc}") from exc
            log.warning("stale snapshot (%s); applying the event once more", exc)
        except repo.NotFound as exc:
            raise NotFound(str(exc)) from exc
        except (repo.Invalid, core_errors.TemplateError) as exc:
            raise BadRequest(str(exc)) from exc
        except EngineError:
            raise
        except KeyUnavailable as exc:
            raise _parked(tx, exc) from exc
        except Exception as exc:  # a bug, here or below: say so once, never retry it
            raise _internal(tx, f"{type(exc).__name__}: {exc}") from exc
    raise Unavailable(f"gave up after {attempts} attempts")  # pragma: no cover


async def committed(pool: repo.Pool, lost: repo.CommitUnknown, *, attempts: int) -> bool:
    """Whether the transaction whose COMMIT answer was lost committed after all.

    Why: applying its event again blind would apply it twice — one signal would
    complete two WAIT_FOR_EVENT nodes, a start would find its own run and answer
    409. Committed: the caller goes on as after a commit it saw (publish, hooks,
    answer). Raises Unavailable when the database cannot say within ``attempts``
    tries: the outcome is unknown, and the caller must not be told it failed."""
    backoff = cq.Backoff(0.05, 1.0)
    for attempt in range(1, attempts + 1):
        try:
            status = await repo.commit_status(pool, lost.xid, lost.backend_pid)
        except repo.Transient as exc:
            if attempt == attempts:
                raise Unavailable(
                    f"the outcome of a commit is unknown ({lost}); the database could not "
                    f"be asked after {attempt} attempts: {exc}; look before trying again"
                ) from exc
            await asyncio.sleep(backoff.next())
            continue
        log.warning(
            "the connection was lost during COMMIT of transaction %s: it %s",
            lost.xid,
            "committed" if status == "committed" else "was rolled back; applying it again",
        )
        return status == "committed"
    raise AssertionError("unreachable")  # pragma: no cover


def _unknown_signal(run: Run, dag: WorkflowDAG, name: str) -> UnknownSignal:
    declared = list(dag.signal_names)
    waits = (
        f"its WAIT_FOR_EVENT nodes wait for {', '.join(map(repr, declared))}"
        if declared
        else "it has no WAIT_FOR_EVENT node, so it takes no signal"
    )
    return UnknownSignal(
        f"run {run.run_id} (workflow {run.workflow_id!r} version {run.version}) has no node "
        f"that waits for signal {name!r}: {waits}; check the name",
        signal=name,
        declared=declared,
    )


def _parked(tx: Tx | None, exc: KeyUnavailable) -> Parked:
    """A run whose documents do not open here waits, unchanged, until its key is
    configured again: one ALERT line naming the key, and Unavailable (the caller
    tries again later; nothing was written, no attempt spent)."""
    where = tx.deciding() if tx is not None and tx.deciding else "outside a decision"
    alert(log, "parked (%s): %s", where, exc)
    return Parked(f"the run is parked: {exc}")


def _input_too_large(limit: int, size: int, exact: bool) -> str:
    return limits.over_limit(
        "node input", size, limit, "COMPOSER_MAX_NODE_INPUT_BYTES", at_least=not exact
    )


def _refuse_sealed_looking(value: Json, what: str) -> None:
    if looks_sealed(value):
        raise BadRequest(
            f"{what} is a string that starts with '$sealed:v1:', which Composer keeps for "
            "sealed documents: wrap it in an object"
        )


def _internal(tx: Tx | None, problem: str) -> Internal:
    """The Internal error of a failed transaction, after its one ALERT line."""
    where = tx.deciding() if tx is not None and tx.deciding else "outside a decision"
    alert(log, "internal error (%s): %s", where, problem)
    return Internal(f"internal error: {problem}")
