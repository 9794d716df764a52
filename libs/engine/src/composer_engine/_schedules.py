"""The schedules use case: create, read, pause, trigger and backfill schedules, and
fire the due ones (the timer's pass), each fire time once (docs/architecture.md §6.8).

A fire starts its run under the idempotency key ``schedule:<id>:<fire time>``
(``composer_core.schedules.idempotency_key``): whichever replica fires it, and
however often a crash makes it try, the run is started once and the same run
comes back. A schedule's row is claimed for the pass (``claimed_until``) rather
than locked, so the starts run in transactions of their own; a replica that dies
with a claim lets it run out, and the next one repeats the starts, which find
their runs. The write-back is fenced by the claim and by the row's revision, so
a pause, resume or deploy in between keeps its own fire times.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import dataclasses
import datetime as dt
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import ValidationError

import composer_queue as cq
import composer_repo as repo
from composer_common import ids
from composer_common.batching import Batcher
from composer_common.caller import Caller
from composer_core.model import RunStatus, WorkflowDAG, WorkflowSpec
from composer_core.schedules import (
    Act,
    Overlap,
    ScheduleSpec,
    due_at,
    due_fires,
    idempotency_key,
    next_fire,
    on_fire,
    upcoming,
)
from composer_engine._metrics import instruments
from composer_engine._runs import RunCommands, Started, StartInTx, check_input
from composer_engine._shell import Shell, utcnow
from composer_engine._tx import Tx
from composer_engine.errors import (
    BadRequest,
    Conflict,
    EngineError,
    IdempotencyKeyReused,
    NotFound,
    Unavailable,
)

log = logging.getLogger("composer.schedules")

#: How long a pass's claim on a schedule holds before another replica may take it: how
#: late a fire can be after the replica that claimed it died. A pass that outlasts its
#: claim is safe (a second replica's starts find the same runs), only wasted work.
CLAIM_SECONDS = 5.0
#: A schedule with a fire kept for its last run's end (buffer_one) is looked at again
#: this soon.
RECHECK_SECONDS = 1.0
#: The most fire times one backfill may cover.
MAX_BACKFILL_FIRES = 10_000
#: The role a schedule's runs are started with (its caller's name: ``schedule <id>``).
_ROLE = "schedule"

BackfillOverlap = Literal["allow_all", "skip", "buffer_all"]


@dataclass(frozen=True, slots=True)
class ScheduleView:
    """A schedule for a person: its row, its next fire times, what happened lately."""

    record: repo.ScheduleRecord
    spec: ScheduleSpec
    next_fires: list[dt.datetime]
    events: list[repo.ScheduleEvent]
    backfills: list[repo.BackfillRecord]


@dataclass(frozen=True, slots=True)
class Fired:
    """A trigger's outcome: the run it started (None: skipped or buffered) and what
    the overlap policy did."""

    run_id: str | None
    act: Act
    detail: str


@dataclass
class FirePass:
    """What one pass did."""

    schedules: int = 0
    started: int = 0
    skipped: int = 0
    missed: int = 0
    #: Seconds from each started fire's due time to its start's commit.
    lags: list[float] = dataclasses.field(default_factory=list)


def parse_spec(document: object, *, where: str = "schedule") -> ScheduleSpec:
    """A ScheduleSpec from a request body; BadRequest listing every problem."""
    try:
        return ScheduleSpec.model_validate(document)
    except ValidationError as exc:
        problems = "; ".join(
            f"{where}.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
            if e["loc"]
            else f"{where}: {e['msg']}"
            for e in exc.errors()
        )
        raise BadRequest(problems) from None


def _spec_of(record: repo.ScheduleRecord) -> ScheduleSpec:
    return ScheduleSpec.model_validate(record.spec)


def _document(spec: ScheduleSpec) -> dict[str, object]:
    return spec.model_dump(mode="json")


class Schedules:
    def __init__(self, shell: Shell, runs: RunCommands) -> None:
        self._shell = shell
        self._runs = runs
        # What the fires of a pass ask of the database, gathered (a group commit): a
        # start is a dozen statements, so 4 connections with 25 starts a commit each.
        self._starts: Batcher[StartInTx, Started] = Batcher(
            runs.start_many, max_size=25, max_in_flight=4, name="schedule-starts", linger=True
        )
        self._writes: Batcher[_WriteBack, bool] = Batcher(
            self._write_all, max_size=100, max_in_flight=2, name="schedule-writes", linger=True
        )
        self._statuses: Batcher[str, RunStatus | None] = Batcher(
            self._read_statuses,
            max_size=500,
            max_in_flight=1,
            name="schedule-statuses",
            linger=True,
        )

    async def settle(self) -> None:
        """Return once none of a pass's batches is in flight (Engine.aclose)."""
        for batcher in (self._statuses, self._starts, self._writes):
            await batcher.settle()

    async def _write_all(self, writes: Sequence[_WriteBack]) -> builtins.list[bool]:
        """Several schedules' write-backs (their events, their outcomes) in one
        transaction of two statements: the pass's events, then its outcomes."""

        async def together(tx: Tx) -> set[tuple[str, str]]:
            await repo.insert_schedule_events(tx.conn, [e for w in writes for e in w.events])
            held: set[tuple[str, str]] = set()
            # a replica passes one token; fire_due takes any, so each is fenced by its own
            for token in sorted({w.token for w in writes}):
                mine = [(w.schedule_id, w.outcome) for w in writes if w.token == token]
                kept = await repo.finish_schedule_claims(tx.conn, token, mine)
                held |= {(token, sid) for sid in kept}
            return held

        held = await self._shell.in_tx(together)
        return [(w.token, w.schedule_id) in held for w in writes]

    # --- a person's requests -------------------------------------------------

    async def create(
        self,
        workflow_id: str,
        spec: ScheduleSpec,
        *,
        created_by: str | None = None,
        now: dt.datetime | None = None,
    ) -> repo.ScheduleRecord:
        """Store a schedule of a deployed workflow (``POST /v1/schedules``). Conflict
        when the id is taken; NotFound when the workflow has no deployed version;
        InputInvalid when its input fails that version's ``input_schema``."""
        now = now or utcnow()

        async def write(tx: Tx) -> repo.ScheduleRecord:
            dag = await self._deployed(tx, workflow_id)
            # every fire would be refused: say so now, not at the first fire
            check_input(dag, spec.input, workflow_id, f"schedule {spec.id!r}'s input")
            first = next_fire(spec, now)
            stored = await repo.insert_schedule(
                tx.conn,
                spec.id,
                workflow_id=workflow_id,
                spec=_document(spec),
                source="api",
                paused=spec.paused,
                next_fire_at=first,
                due_at=due_at(spec, first),
                created_by=created_by,
            )
            if not stored:
                raise Conflict(
                    f"schedule {spec.id!r} exists already: delete it first, or give another id"
                )
            await repo.insert_schedule_events(
                tx.conn, [repo.NewScheduleEvent(spec.id, "created", actor=created_by)]
            )
            return await repo.get_schedule(tx.conn, spec.id)

        record = await self._shell.in_tx(write)
        await self._wake()
        return record

    async def get(self, schedule_id: str, *, now: dt.datetime | None = None) -> ScheduleView:
        """The schedule, its next five fire times, its last events and backfills."""
        now = now or utcnow()

        async def read(tx: Tx) -> ScheduleView:
            record = await self._record(tx, schedule_id)
            spec = _spec_of(record)
            after = max(record.next_fire_at - dt.timedelta(microseconds=1), now)
            return ScheduleView(
                record,
                spec,
                [] if record.paused else upcoming(spec, after, 5),
                await repo.schedule_events(tx.conn, schedule_id, 50),
                await repo.schedule_backfills(tx.conn, schedule_id, 20),
            )

        return await self._shell.in_tx(read)

    async def list(self, *, workflow_id: str | None = None) -> list[repo.ScheduleRecord]:
        async def read(tx: Tx) -> list[repo.ScheduleRecord]:
            return await repo.list_schedules(tx.conn, workflow_id=workflow_id)

        return await self._shell.in_tx(read)

    async def delete(self, schedule_id: str) -> None:
        """Delete a schedule made through the API; one a definition wrote is removed by
        deploying a version without it (Conflict says so). Its runs stay."""

        async def write(tx: Tx) -> None:
            record = await self._record(tx, schedule_id, lock=True)
            if record.source == "definition":
                raise Conflict(
                    f"schedule {schedule_id!r} comes from workflow {record.workflow_id!r}'s "
                    "definition: deploy a version without it to remove it, or pause it"
                )
            await repo.delete_schedule(tx.conn, schedule_id)

        await self._shell.in_tx(write)

    async def pause(self, schedule_id: str, *, by: str | None = None) -> repo.ScheduleRecord:
        """Stop firing (idempotent). A buffered fire stays kept for resume."""

        async def write(tx: Tx) -> repo.ScheduleRecord:
            record = await self._record(tx, schedule_id, lock=True)
            if not record.paused:
                await repo.set_schedule_paused(tx.conn, schedule_id, True)
                await repo.insert_schedule_events(
                    tx.conn, [repo.NewScheduleEvent(schedule_id, "paused", actor=by)]
                )
            return await repo.get_schedule(tx.conn, schedule_id)

        return await self._shell.in_tx(write)

    async def resume(
        self, schedule_id: str, *, by: str | None = None, now: dt.datetime | None = None
    ) -> repo.ScheduleRecord:
        """Fire again from the next fire time after now (idempotent): the fires that
        fell while it was paused are not made up."""
        now = now or utcnow()

        async def write(tx: Tx) -> repo.ScheduleRecord:
            record = await self._record(tx, schedule_id, lock=True)
            if record.paused:
                spec = _spec_of(record)
                first = next_fire(spec, now)
                await repo.set_schedule_paused(
                    tx.conn, schedule_id, False, next_fire_at=first, due_at=due_at(spec, first)
                )
                await repo.insert_schedule_events(
                    tx.conn, [repo.NewScheduleEvent(schedule_id, "resumed", actor=by)]
                )
            return await repo.get_schedule(tx.conn, schedule_id)

        record = await self._shell.in_tx(write)
        await self._wake()
        return record

    async def trigger(
        self,
        schedule_id: str,
        *,
        by: str | None = None,
        overlap: Overlap | None = None,
        request_id: str | None = None,
        now: dt.datetime | None = None,
    ) -> Fired:
        """Fire now, outside the schedule's times, under its overlap policy (or the one
        given): a run marked with ``scheduled_for`` now. ``request_id`` makes a repeat
        of the same request start nothing more (it is the fire's key)."""
        now = now or utcnow()
        record = await self._shell.in_tx(lambda tx: self._record(tx, schedule_id))
        spec = _spec_of(record)
        policy = overlap or spec.overlap
        key = f"schedule:{schedule_id}:trigger:{request_id or uuid.uuid4()}"
        if request_id is not None:  # a repeat of a request that started its run
            repeated = await self._shell.in_tx(
                lambda tx: repo.idempotent_run_id(tx.conn, record.workflow_id, key)
            )
            if repeated is not None:
                return Fired(repeated, Act.START, f"started run {repeated}")
        running = await self._running(record.last_run_id)
        act = on_fire(policy, running=running, buffered=record.buffered_for is not None)
        if act in (Act.SKIP, Act.BUFFER):
            detail = f"not started: run {record.last_run_id} still goes (overlap {policy.value})"

            async def skip(tx: Tx) -> None:
                await repo.note_schedule_skip(tx.conn, schedule_id)
                await repo.insert_schedule_events(
                    tx.conn, [repo.NewScheduleEvent(schedule_id, "skipped", now, None, detail, by)]
                )

            await self._shell.in_tx(skip)
            instruments().schedule_fires.add(1, {"outcome": "skipped"})
            return Fired(None, Act.SKIP, detail)
        if act is Act.CANCEL_AND_START and record.last_run_id is not None:
            await self._cancel_other(record.last_run_id, schedule_id, now)
        run_id = await self._start(record, spec, now, key=key)

        async def note(tx: Tx) -> None:
            await repo.note_schedule_run(tx.conn, schedule_id, run_id)
            await repo.insert_schedule_events(
                tx.conn,
                [repo.NewScheduleEvent(schedule_id, "triggered", now, run_id, None, by)],
            )

        await self._shell.in_tx(note)
        return Fired(run_id, Act.START, f"started run {run_id}")

    async def backfill(
        self,
        schedule_id: str,
        start_at: dt.datetime,
        end_at: dt.datetime,
        *,
        overlap: BackfillOverlap = "allow_all",
        by: str | None = None,
    ) -> repo.BackfillRecord:
        """Start the schedule's fires over [start_at, end_at] in the background (the
        timer): one run per fire time — a time that fired already is not started again
        (the same key). ``overlap``: allow_all, skip (a fire while the backfill's last
        run goes is skipped) or buffer_all (each waits for the one before)."""
        if start_at.tzinfo is None or end_at.tzinfo is None:
            raise BadRequest("start and end need a time zone (2026-12-01T00:00:00Z)")
        if end_at < start_at:
            raise BadRequest(f"end ({end_at.isoformat()}) is before start ({start_at.isoformat()})")
        if overlap not in ("allow_all", "skip", "buffer_all"):
            raise BadRequest(
                f"overlap {overlap!r} is not one of allow_all, skip, buffer_all for a backfill"
            )

        async def write(tx: Tx) -> repo.BackfillRecord:
            record = await self._record(tx, schedule_id)
            spec = _spec_of(record)
            total, at = 0, next_fire(spec, start_at - dt.timedelta(microseconds=1))
            while at <= end_at:
                total += 1
                if total > MAX_BACKFILL_FIRES:
                    raise BadRequest(
                        f"{start_at.isoformat()} to {end_at.isoformat()} holds more than "
                        f"{MAX_BACKFILL_FIRES} fire times: backfill a shorter range at a time"
                    )
                at = next_fire(spec, at)
            backfill_id = ids.new_id()
            await repo.insert_backfill(
                tx.conn,
                backfill_id,
                schedule_id,
                start_at=start_at,
                end_at=end_at,
                overlap=overlap,
                total=total,
                requested_by=by,
            )
            await repo.insert_schedule_events(
                tx.conn,
                [
                    repo.NewScheduleEvent(
                        schedule_id,
                        "backfill",
                        detail=f"backfill {backfill_id}: {total} fire time(s) from "
                        f"{start_at.isoformat()} to {end_at.isoformat()} ({overlap})",
                        actor=by,
                    )
                ],
            )
            return await repo.get_backfill(tx.conn, backfill_id)

        record = await self._shell.in_tx(write)
        await self._wake()
        return record

    async def backfill_progress(self, schedule_id: str, backfill_id: str) -> repo.BackfillRecord:
        """One backfill of the schedule: how far it got; NotFound naming either."""

        async def read(tx: Tx) -> repo.BackfillRecord:
            await self._record(tx, schedule_id)
            try:
                found = await repo.get_backfill(tx.conn, backfill_id)
            except repo.NotFound:
                found = None
            if found is None or found.schedule_id != schedule_id:
                raise NotFound(f"schedule {schedule_id!r} has no backfill {backfill_id!r}")
            return found

        return await self._shell.in_tx(read)

    # --- the timer's pass ----------------------------------------------------

    async def next_due(self) -> dt.datetime | None:
        """The soonest due time of a schedule that is not paused."""
        return await self._shell.in_tx(lambda tx: repo.next_schedule_due(tx.conn), attempts=1)

    async def fire_due(
        self,
        *,
        token: str,
        now: dt.datetime | None = None,
        limit: int = 100,
        concurrency: int = 8,
    ) -> FirePass:
        """Claim the due schedules (at most ``limit``) and start their fires, the
        schedules ``concurrency`` at a time (each schedule's fires in order): one pass.
        ``token`` names this replica's claims."""
        now = now or utcnow()
        began = time.monotonic()
        until = now + dt.timedelta(seconds=CLAIM_SECONDS)
        claimed = await self._shell.in_tx(
            lambda tx: repo.claim_due_schedules(tx.conn, now, token, until, limit), attempts=1
        )
        out = FirePass(schedules=len(claimed))
        slots = asyncio.Semaphore(concurrency)

        async def fire(record: repo.ScheduleRecord) -> None:
            async with slots:
                await self._fire(record, token, now, began, out)

        results = await asyncio.gather(*(fire(r) for r in claimed), return_exceptions=True)
        failure = next((r for r in results if isinstance(r, BaseException)), None)
        if failure is not None:  # the others' outcomes are written; theirs runs out
            raise failure
        backfills = await self._shell.in_tx(
            lambda tx: repo.claim_backfills(tx.conn, now, token, until, 10), attempts=1
        )
        for backfill in backfills:
            await self._advance_backfill(backfill, token, now, out)
        return out

    async def _fire(
        self,
        record: repo.ScheduleRecord,
        token: str,
        now: dt.datetime,
        began: float,
        out: FirePass,
    ) -> None:
        sid = record.schedule_id
        try:
            spec = _spec_of(record)
        except ValidationError as exc:  # stored under rules that changed: leave it be
            log.error("schedule %s cannot be read (%s): pause or replace it", sid, exc)
            return
        due = due_fires(spec, record.next_fire_at, now)
        events: list[repo.NewScheduleEvent] = []
        fired = skipped = 0
        missed = 0
        if due.missed is not None:
            m = due.missed
            missed = m.count
            events.append(
                repo.NewScheduleEvent(
                    sid,
                    "missed",
                    m.first,
                    detail=f"{'at least ' if m.at_least else ''}{m.count} fire time(s) from "
                    f"{m.first.isoformat()} to {m.last.isoformat()} were older than the "
                    f"catch-up window ({spec.catchup_window_seconds} s): not started",
                )
            )
            instruments().schedule_fires.add(m.count, {"outcome": "missed"})
        last_run = record.last_run_id
        last_fired = record.last_fired_for
        buffered = record.buffered_for
        # allow_all starts whatever goes: its last run's status is read only for a buffer
        asks = spec.overlap is not Overlap.ALLOW_ALL or buffered is not None
        running = asks and await self._running(last_run)
        if buffered is not None and not running:  # the run it waited for ended
            last_run = await self._start(record, spec, buffered)
            events.append(repo.NewScheduleEvent(sid, "fired", buffered, last_run, "buffered"))
            out.lags.append(_lag(now, began, due_at(spec, buffered)))
            fired, running, buffered = fired + 1, True, None
        for fire in due.fires:
            act = on_fire(spec.overlap, running=running, buffered=buffered is not None)
            if act is Act.CANCEL_AND_START and last_run is not None:
                await self._cancel_other(last_run, sid, fire)
            if act in (Act.START, Act.CANCEL_AND_START):
                try:
                    last_run = await self._start(record, spec, fire)
                except (Unavailable, StartRefused) as exc:
                    if isinstance(exc, Unavailable):
                        raise
                    events.append(repo.NewScheduleEvent(sid, "failed", fire, None, str(exc)))
                    skipped += 1
                    continue
                events.append(repo.NewScheduleEvent(sid, "fired", fire, last_run))
                out.lags.append(_lag(now, began, due_at(spec, fire)))
                fired, running = fired + 1, True
            elif act is Act.BUFFER:
                buffered = fire
                events.append(
                    repo.NewScheduleEvent(
                        sid, "buffered", fire, None, f"starts when run {last_run} ends"
                    )
                )
            else:
                skipped += 1
                events.append(
                    repo.NewScheduleEvent(
                        sid,
                        "skipped",
                        fire,
                        None,
                        f"run {last_run} still goes (overlap {spec.overlap.value})",
                    )
                )
            last_fired = fire
        if fired:
            instruments().schedule_fires.add(fired, {"outcome": "started"})
        if skipped:
            instruments().schedule_fires.add(skipped, {"outcome": "skipped"})
        next_due = due_at(spec, due.next_fire_at)
        if buffered is not None:
            next_due = min(next_due, now + dt.timedelta(seconds=RECHECK_SECONDS))
        outcome = repo.ScheduleOutcome(
            revision=record.revision,
            next_fire_at=due.next_fire_at,
            due_at=next_due,
            buffered_for=buffered,
            last_run_id=last_run,
            last_fired_for=last_fired,
            fired=fired,
            skipped=skipped,
            missed=missed,
        )

        if not await self._writes.submit(_WriteBack(sid, token, outcome, events)):
            log.warning("schedule %s: its claim ran out during the pass (the next repeats it)", sid)
        out.started += fired
        out.skipped += skipped
        out.missed += missed

    async def _advance_backfill(
        self, backfill: repo.BackfillRecord, token: str, now: dt.datetime, out: FirePass
    ) -> None:
        """Start the backfill's next fire times (at most 100 a pass)."""
        try:
            record = await self._shell.in_tx(lambda tx: self._record(tx, backfill.schedule_id))
        except NotFound:
            return  # deleted with its schedule
        spec = _spec_of(record)
        after = backfill.cursor or (backfill.start_at - dt.timedelta(microseconds=1))
        at = next_fire(spec, after)
        cursor, last_run = backfill.cursor, backfill.last_run_id
        started = skipped = 0
        running = await self._running(last_run)
        events: list[repo.NewScheduleEvent] = []
        while at <= backfill.end_at and started + skipped < 100:
            act = on_fire(backfill.overlap, running=running, buffered=False)  # type: ignore[arg-type]
            if act is Act.BUFFER:
                break  # buffer_all: the next waits for this run's end
            if act is Act.SKIP:
                skipped += 1
                events.append(
                    repo.NewScheduleEvent(
                        spec.id, "skipped", at, None, f"backfill: run {last_run} still goes"
                    )
                )
            else:
                try:
                    last_run = await self._start(record, spec, at)
                    started += 1
                    running = True
                except StartRefused as exc:
                    skipped += 1
                    events.append(repo.NewScheduleEvent(spec.id, "failed", at, None, str(exc)))
            cursor = at
            at = next_fire(spec, at)
        finished = at > backfill.end_at

        async def write(tx: Tx) -> bool:
            await repo.insert_schedule_events(tx.conn, events)
            return await repo.finish_backfill_claim(
                tx.conn,
                backfill.backfill_id,
                token,
                cursor=cursor,
                started=started,
                skipped=skipped,
                last_run_id=last_run,
                finished=finished,
            )

        await self._shell.in_tx(write)
        out.started += started
        out.skipped += skipped

    # --- helpers -------------------------------------------------------------

    async def _start(
        self,
        record: repo.ScheduleRecord,
        spec: ScheduleSpec,
        fire: dt.datetime,
        *,
        key: str | None = None,
    ) -> str:
        """Start the run of one fire time (or find the one started for it). The starts
        of fires going at once share a transaction (a ``Batcher``)."""
        try:
            prepared = self._runs.prepare_start(
                record.workflow_id,
                input=spec.input,
                idempotency_key=key or idempotency_key(spec.id, fire),
                caller=Caller(f"schedule {spec.id}", _ROLE),
                schedule=(spec.id, fire),
            )
            started = await self._starts.submit(prepared)
        except IdempotencyKeyReused as exc:  # its input changed since: that run stands
            return str(exc.extensions["run_id"])
        except Unavailable:
            raise
        except EngineError as exc:  # the workflow was deleted, the input no longer fits
            raise StartRefused(
                f"run of workflow {record.workflow_id!r} not started: {exc}"
            ) from exc
        if started.created:
            log.debug(
                "schedule %s started run %s for %s", spec.id, started.run_id, fire.isoformat()
            )
        return started.run_id

    async def _running(self, run_id: str | None) -> bool:
        """Whether the run still goes (the reads of fires going at once share one
        statement)."""
        if run_id is None:
            return False
        status = await self._statuses.submit(run_id)
        return status is not None and not status.is_terminal

    async def _read_statuses(self, run_ids: Sequence[str]) -> builtins.list[RunStatus | None]:
        async def read(tx: Tx) -> dict[str, RunStatus]:
            return await repo.run_statuses(tx.conn, run_ids)

        found = await self._shell.in_tx(read)
        return [found.get(run_id) for run_id in run_ids]

    async def _cancel_other(self, run_id: str, schedule_id: str, fire: dt.datetime) -> None:
        with contextlib.suppress(Conflict, NotFound):  # it ended meanwhile
            await self._runs.cancel(
                run_id,
                f"schedule {schedule_id}: the fire of {fire.isoformat()} replaces it "
                "(overlap cancel_other)",
                cancelled_by=f"schedule {schedule_id}",
            )

    async def _record(self, tx: Tx, schedule_id: str, *, lock: bool = False) -> repo.ScheduleRecord:
        try:
            return await repo.get_schedule(tx.conn, schedule_id, lock=lock)
        except repo.NotFound:
            raise NotFound(f"no schedule {schedule_id!r}") from None

    async def _deployed(self, tx: Tx, workflow_id: str) -> WorkflowDAG:
        try:
            return await self._shell.definitions.deployed(tx.conn, workflow_id)
        except repo.NotFound:
            raise NotFound(
                f"workflow {workflow_id!r} has no deployed version: deploy one before scheduling it"
            ) from None

    async def _wake(self) -> None:
        """Tell the timer a schedule may be due sooner than it thinks (its poll covers
        a lost hint)."""
        redis = self._shell.redis
        if redis is not None:
            await cq.send_hint(redis, self._shell.prefix, cq.TIMER)


async def sync_schedules(tx: Tx, spec: WorkflowSpec, now: dt.datetime | None = None) -> None:
    """Make the schedules a deployed definition lists be the workflow's, in the
    deploy's transaction: new ones stored, changed ones replaced (firing from now
    on), those it no longer lists deleted. Conflict when an id belongs to another
    workflow or to a schedule made through the API."""
    now = now or utcnow()
    mine = {r.schedule_id: r for r in await repo.workflow_schedules(tx.conn, spec.id)}
    wanted = {s.id: s for s in spec.schedules}
    for gone in sorted(set(mine) - set(wanted)):
        await repo.delete_schedule(tx.conn, gone)
    for sid, sched in sorted(wanted.items()):
        first = next_fire(sched, now)
        existing = mine.get(sid)
        if existing is None:
            stored = await repo.insert_schedule(
                tx.conn,
                sid,
                workflow_id=spec.id,
                spec=_document(sched),
                source="definition",
                paused=sched.paused,
                next_fire_at=first,
                due_at=due_at(sched, first),
                created_by=None,
            )
            if not stored:
                other = await repo.get_schedule(tx.conn, sid)
                owner = (
                    "made through the API"
                    if other.source == "api"
                    else f"of workflow {other.workflow_id!r}"
                )
                raise Conflict(
                    f"schedules[{sid}]: schedule id {sid!r} is taken by a schedule "
                    f"{owner}: rename one of them"
                )
        elif _spec_of(existing) != sched:
            await repo.replace_schedule_spec(
                tx.conn,
                sid,
                spec=_document(sched),
                paused=sched.paused,
                next_fire_at=first,
                due_at=due_at(sched, first),
            )
        else:
            continue
        await repo.insert_schedule_events(
            tx.conn,
            [
                repo.NewScheduleEvent(
                    sid, "deployed", detail=f"from workflow {spec.id!r}'s definition"
                )
            ],
        )


@dataclass(frozen=True, slots=True)
class _WriteBack:
    """What a pass writes of one schedule: its events and its outcome, under its claim."""

    schedule_id: str
    token: str
    outcome: repo.ScheduleOutcome
    events: Sequence[repo.NewScheduleEvent]


def _lag(now: dt.datetime, began: float, due: dt.datetime) -> float:
    """Seconds from a fire's due time to its start's return: the pass's ``now`` plus
    the time the pass took so far (its own clock, so a test's fixed ``now`` holds)."""
    return (now - due).total_seconds() + (time.monotonic() - began)


class StartRefused(EngineError):
    """A fire whose run the engine refused to start (recorded; the schedule goes on)."""
