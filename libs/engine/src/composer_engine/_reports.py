"""Reports: a worker's report of one attempt, applied in a group commit
(docs/architecture.md §3.1) — many reports, one transaction — or alone when its
run is held elsewhere, when its batch failed as a whole, or when its decision is
too heavy for the batch. The timer's due waits go through the same group commit
(``fire_timers``: a ``Fired`` is a report with no lease to check).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import composer_repo as repo
from composer_common import limits
from composer_common.batching import Batcher
from composer_common.codes import ErrorCode
from composer_core.statemachine import NodeCompleted, NodeFailed, TimerFired
from composer_core.templates import Json
from composer_engine._lease_ahead import Decided, lease_ahead
from composer_engine._leases import LeaseGrant, Reporter
from composer_engine._leasing import Leasing
from composer_engine._publish import Dispatched
from composer_engine._reported import NextTask, Report
from composer_engine._run_event_delivery import start_handed
from composer_engine._shell import ON_LOOP_SHARE, LeavesTheBatch, Shell
from composer_engine._transaction import committed
from composer_engine._tx import Tx
from composer_engine._writes import with_band
from composer_engine.errors import EngineError, Forbidden, NotFound, Unavailable
from composer_engine.sealing import looks_sealed

log = logging.getLogger("composer.engine")


class _Busy:
    """A report's run was held by another transaction: submit it to the next batch."""


class _Alone:
    """A report left its batch (_LeavesTheBatch): its submitter applies it alone, so the
    batch's slot is not held while it is decided."""


@dataclass(frozen=True, slots=True)
class Fired:
    """A wait's timer, applied in a group commit as a report is (the timer's pass):
    no lease to check, no log to store."""

    run_id: str
    task_id: str
    node_id: str
    attempt: int = 0
    reporter: None = None
    log: None = None

    def event(self) -> TimerFired:
        return TimerFired(self.task_id, self.node_id)


_BUSY = _Busy()
_ALONE = _Alone()
#: How many batches a report whose run is held waits for before it is applied alone.
_BUSY_RETRIES = 3


class Reports:
    """Workers' reports: one at a time through a batcher (``report``), or many at once
    (``report_many``), group-committed either way."""

    def __init__(
        self,
        shell: Shell,
        *,
        batch_size: int,
        batches_in_flight: int,
        max_output_bytes: int | None,
        leasing: Leasing | None = None,
    ) -> None:
        """``batch_size`` and ``batches_in_flight`` bound the group commit: how many
        reports go in one transaction, how many transactions at once.
        ``max_output_bytes`` (COMPOSER_MAX_OUTPUT_BYTES): a report of a larger output
        fails its node for good instead (None: no limit). ``leasing`` grants the tasks a
        report's transaction leases to its worker (``Report.take_next``; None: none is)."""
        self._shell = shell
        self._leasing = leasing
        self.max_output_bytes = max_output_bytes
        self._batcher: Batcher[Report, bool | NextTask | _Busy | _Alone] = Batcher(
            lambda reports: self._group_commit(reports, defer_busy=True),
            max_size=batch_size,
            max_in_flight=batches_in_flight,
            name="reports",
            # a run's reports never in two batches at once: they would queue on its lock
            key=lambda report: report.run_id,
        )

    async def settle(self) -> None:
        """Return once no group commit is in flight (Engine.aclose)."""
        await self._batcher.settle()

    async def report(self, report: Report) -> bool | NextTask:
        """Apply a worker's report in the next group commit (``report_many``); False
        when it was stale (acknowledged, nothing changed), and a ``NextTask`` when it
        was accepted and a task it dispatched was leased to its worker with it
        (``report.take_next``).

        A report whose run another batch holds (a fan-in spread over two batches in
        flight) waits for the next batch, a few times, before it is applied alone:
        alone, it would queue on the lock in a transaction of its own."""
        report = self._storable(report)
        for _ in range(_BUSY_RETRIES):
            result = await self._batcher.submit(report)
            if isinstance(result, _Alone):
                break
            if not isinstance(result, _Busy):
                return result
        answer = await self._report_alone(report)
        if isinstance(answer, EngineError):
            raise answer
        return answer

    async def report_many(self, reports: Sequence[Report]) -> list[bool | NextTask | EngineError]:
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

    async def fire_timers(
        self, waits: Sequence[tuple[str, str, str]], *, at: dt.datetime | None = None
    ) -> list[bool | EngineError | None]:
        """TimerFired for many due waits, each a (run, task, node), in one transaction:
        the timer's pass, group-committed as reports are. For each: True, fired; False,
        the wait no longer needed it; None, another transaction holds its run (the
        timer comes back to it); or the error it met applied alone (a broken
        definition, Parked).

        ``at`` stages the group ahead of its time (docs/architecture.md §3.1, "Waits
        due together"): the waits are decided now under their runs' locks, on a clock
        that reads ``at``, and the transaction commits once the database's clock has
        passed ``at``; nothing of it is seen before. None: they are due, and commit
        at once."""
        fires = [Fired(run_id, task_id, node_id) for run_id, task_id, node_id in waits]
        results = await self._group_commit(fires, defer_busy=True, at=at)
        out: list[bool | EngineError | None] = []
        for fire, result in zip(fires, results, strict=True):
            if isinstance(result, _Busy):
                out.append(None)
            elif isinstance(result, _Alone):  # too heavy for the batch: alone, off it
                try:
                    tr = await self._shell.apply(fire.run_id, fire.event(), skip_locked=True)
                except EngineError as exc:
                    out.append(exc)
                    continue
                out.append(None if tr is None else tr.ignored is None)
            else:  # a fire offers to take no task: never a NextTask
                out.append(bool(result) if isinstance(result, NextTask) else result)
        return out

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
        self,
        reports: Sequence[Report | Fired],
        *,
        defer_busy: bool,
        at: dt.datetime | None = None,
    ) -> list[bool | NextTask | EngineError | _Busy | _Alone]:
        """``report_many``; with ``defer_busy`` a report whose run another transaction
        holds is answered ``_BUSY`` (its caller submits it again) instead of applied alone,
        and one too heavy for the batch ``_ALONE`` (its caller applies it alone).
        ``at``: the batch's clock reads no earlier than it, and it commits no sooner
        (``fire_timers``)."""
        results: list[bool | NextTask | EngineError | _Busy | _Alone | None] = [None] * len(reports)
        #: The dispatches leased with their reports (not published), and the leases
        #: refused them (one too large fails its attempt after the commit).
        taken: list[Dispatched] = []
        refused: list[tuple[repo.LeaseRequest, LeaseGrant | EngineError]] = []
        busy: list[int] = []
        heavy: list[int] = []
        #: run id → its definition and snapshot as locked, for each run decided
        decided: dict[str, Decided] = {}

        async def apply(tx: Tx) -> None:
            locked = await repo.lock_runs(
                tx.conn, [(r.run_id, r.task_id) for r in reports], not_before=at
            )
            if locked.now is None:  # every run is held by another transaction (or gone)
                busy.extend(range(len(reports)))
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
                dag = await self._shell.definitions.get(tx.conn, run.workflow_id, run.version)
                if r.run_id not in decided:
                    decided[r.run_id] = Decided(dag, run, locked.priorities.get(r.run_id))
                # the run as the batch's earlier reports left it, with its key and context
                this = dataclasses.replace(locked.locked(r.run_id), run=run)
                try:
                    transition = await self._shell.decide(
                        tx, dag, this, r.event(), attempt_log=r.log, in_batch=True
                    )
                except LeavesTheBatch:
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

        #: Set when the batch's COMMIT answer was lost and the database could not say
        #: whether it committed (docs/architecture.md §4.8).
        unknown: Unavailable | None = None
        try:
            try:
                async with repo.tracked_transaction(self._shell.pool) as conn:
                    tx = Tx(conn, self._shell.gate)
                    tx.writes.keep_handed = True
                    if self._leasing is not None and self._shell.publish is not None:
                        tx.writes.clear_inputs = {}
                    await apply(tx)
                    self._offer(tx, reports, results)
                    self._lease_ahead(tx, reports, results, decided)
                    await tx.writes.flush(tx)
                    await self._start_handed(tx)
                    taken, refused = await self._take_next(tx, reports, results)
                    if at is not None:
                        await _hold_until(conn, at)
            except repo.CommitUnknown as lost:
                try:
                    applied = await committed(self._shell.pool, lost, attempts=self._shell.attempts)
                except Unavailable as outcome:
                    unknown = outcome
                else:
                    if not applied:
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
            if unknown is None:
                if self._shell.publish is not None:
                    self._shell.publish.forget(taken)
                    if tx.dispatched:
                        await self._shell.publish(tx.dispatched)
                if refused and self._leasing is not None:
                    await self._leasing.fail_too_large(refused)
                if self._shell.deliver is not None and tx.run_events:
                    self._shell.deliver(tx.run_events)
                await tx.run_after_commit()
            else:
                # Applied again alone, a report the batch did commit would be refused as
                # stale: the worker would hear "stale" for a report that counted, or,
                # had the batch rolled back, a report that did not. It hears "try again"
                # instead; a report sent again is fenced by its attempt. Refusals (the
                # lease, a stale attempt) hold whatever the commit did.
                log.warning(
                    "a group commit of %d report(s) has an unknown outcome: %s",
                    len(reports),
                    unknown,
                )
                results = [unknown if r is True or isinstance(r, NextTask) else r for r in results]
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

    async def _start_handed(self, tx: Tx) -> None:
        """Start the runs handed the slots the batch's finished runs freed, in the
        batch's transaction (``start_handed``); one whose lock another transaction
        holds is sent its start as an event. A run started may finish at once and hand
        its own slot on: round after round, until none is handed."""
        writes = tx.writes
        while writes.handed:
            handed, writes.handed = writes.handed, []
            for h in handed:
                if not await start_handed(self._shell, tx, h):
                    writes.run_events.append(h.event())
            await writes.flush(tx)

    def _offer(
        self,
        tx: Tx,
        reports: Sequence[Report | Fired],
        results: list[bool | NextTask | EngineError | _Busy | _Alone | None],
    ) -> None:
        """Tell the writes which tasks the accepted reports offer to take
        (``Writes.offers``): their dispatches are flushed without outbox rows until
        ``_take_next`` knows which were leased."""
        if self._leasing is None or self._shell.publish is None:
            return
        for i, r in enumerate(reports):
            if _offers(r, results[i]):
                assert isinstance(r, Report) and r.take_next is not None
                tx.writes.offers[(r.run_id, r.take_next.queue)] += 1

    def _lease_ahead(
        self,
        tx: Tx,
        reports: Sequence[Report | Fired],
        results: list[bool | NextTask | EngineError | _Busy | _Alone | None],
        decided: dict[str, Decided],
    ) -> None:
        """Lease the next tasks the accepted reports offer to take as their rows are
        inserted, where nothing may hold them (engine/_lease_ahead.py); each one
        leased, its report's ``results`` entry becomes its ``NextTask``. The other
        offers are ``_take_next``'s, after the flush."""
        if self._leasing is None or not tx.writes.offers:
            return
        offers = [
            (i, r)
            for i, r in enumerate(reports)
            if isinstance(r, Report) and _offers(r, results[i])
        ]
        answers = lease_ahead(
            tx,
            offers,
            decided,
            new_token=self._leasing.new_token,
            sealer=self._shell.sealer,
            max_input_bytes=self._leasing.max_node_input_bytes,
        )
        for i, answer in answers.items():
            results[i] = answer

    async def _take_next(
        self,
        tx: Tx,
        reports: Sequence[Report | Fired],
        results: list[bool | NextTask | EngineError | _Busy | _Alone | None],
    ) -> tuple[list[Dispatched], list[tuple[repo.LeaseRequest, LeaseGrant | EngineError]]]:
        """Lease to each accepted report's worker that offers to take one
        (``Report.take_next``) a task of its own run the transaction dispatched on its
        handler's queue, in one statement before the commit
        (docs/architecture.md §3.2); its ``results`` entry becomes the ``NextTask``.
        Returns the dispatches leased that had outbox rows, which leave
        ``tx.dispatched`` (no stream entry; their rows are deleted after the commit,
        as published ones'), and the leases refused, whose tasks are published as they
        would have been. A dispatch set aside for an offer (``Writes.offered``) has no
        outbox row: leased, it never gets one; not, it gets it here
        (``Writes.enqueue_offered``). A worker's next task then costs no outbox row,
        no stream entry, no read, no lease call and no lease statement of its own.
        Never another run's task: that one waits its turn on the stream, by priority,
        so a chain never runs on into the runs of its key that its run's end started
        (§4.13) while other keys' runs wait."""
        writes = tx.writes
        if self._leasing is None or self._shell.publish is None:
            return [], []
        free = [_Candidate(d.queue, d.ref, d.fields, d) for d in tx.dispatched] + [
            _Candidate(row.queue, ref, fields, None) for row, ref, fields, *_ in writes.offered
        ]
        matched: list[tuple[int, _Candidate]] = []
        requests: list[repo.LeaseRequest] = []
        for i, r in enumerate(reports):
            if not _offers(r, results[i]):
                continue
            assert isinstance(r, Report) and r.take_next is not None and r.reporter is not None
            offer = r.take_next
            c = next((c for c in free if c.queue == offer.queue and c.ref.run_id == r.run_id), None)
            if c is None:
                continue
            free.remove(c)
            matched.append((i, c))
            requests.append(
                repo.LeaseRequest(
                    c.ref.run_id,
                    c.ref.task_id,
                    c.ref.attempt,
                    r.reporter.owner,
                    offer.ttl,
                    queues=r.reporter.queues,
                    queue=offer.queue,
                    node_types=offer.node_types,
                )
            )
        answers = await self._leasing.grant_in(tx.conn, requests) if matched else []
        taken: list[Dispatched] = []
        leased: set[str] = set()
        refused: list[tuple[repo.LeaseRequest, LeaseGrant | EngineError]] = []
        for (i, c), request, answer in zip(matched, requests, answers, strict=True):
            if not (isinstance(answer, LeaseGrant) and answer.granted):
                refused.append((request, answer))
                continue
            leased.add(c.ref.task_id)
            if c.dispatched is not None:
                taken.append(c.dispatched)
            else:  # set aside before its outbox row gave it its band: the grant's
                with_band(c.fields, answer.priority)
            results[i] = NextTask(c.fields, answer)
        await writes.enqueue_offered(tx, leased)
        if taken:
            ids = {id(d) for d in taken}
            tx.dispatched = [d for d in tx.dispatched if id(d) not in ids]
        return taken, refused

    async def _report_alone(self, r: Report | Fired) -> bool | EngineError:
        try:
            transition = await self._shell.apply(
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
        tr = await self._shell.handle(
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
        tr = await self._shell.handle(run_id, event, reporter=reporter)
        return tr.ignored is None


class _Candidate(NamedTuple):
    """A dispatch of the transaction a report's offer may take: its queue, attempt and
    stream message, and its committed dispatch (None: set aside, no outbox row)."""

    queue: str
    ref: repo.TaskRef
    fields: dict[str, str]
    dispatched: Dispatched | None


async def _hold_until(conn: repo.Connection, at: dt.datetime) -> None:
    """Keep a staged batch's transaction open until ``at`` has passed by the database's
    clock, the one that set its waits' wake_at: its commit is never early."""
    # the database's clock is read, not awaited: there is no event to wait on; the
    # loop's timers may wake a fraction of a millisecond early, hence the margin
    while (seconds := await repo.seconds_until(conn, at)) > 0:  # noqa: ASYNC110
        await asyncio.sleep(seconds + 0.001)


def _offers(r: Report | Fired, result: object) -> bool:
    """Whether ``r``, applied with ``result``, offers its worker's next task."""
    return (
        result is True
        and isinstance(r, Report)
        and r.take_next is not None
        and r.reporter is not None
    )
