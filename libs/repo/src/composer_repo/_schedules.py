"""Schedules (V024): a schedule's row and its claim, what happened to it, its
backfills, and the runs it started (docs/architecture.md §6.8)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from composer_core.model import RunStatus
from composer_core.templates import Json
from composer_repo._db import Connection, translated
from composer_repo._errors import NotFound
from composer_repo._sql import q


@dataclass(frozen=True, slots=True)
class ScheduleRecord:
    schedule_id: str
    workflow_id: str
    #: The ScheduleSpec as JSON.
    spec: dict[str, Any]
    #: 'definition' (a deployed version's schedules:) or 'api'.
    source: str
    paused: bool
    revision: int
    next_fire_at: dt.datetime
    due_at: dt.datetime
    buffered_for: dt.datetime | None
    last_run_id: str | None
    last_fired_for: dt.datetime | None
    fired: int
    skipped: int
    missed: int
    claimed_by: str | None
    claimed_until: dt.datetime | None
    created_by: str | None
    created_at: dt.datetime
    updated_at: dt.datetime


def _schedule(r: Any) -> ScheduleRecord:
    return ScheduleRecord(
        schedule_id=r["id"],
        workflow_id=r["workflow_id"],
        spec=r["spec"],
        source=r["source"],
        paused=r["paused"],
        revision=r["revision"],
        next_fire_at=r["next_fire_at"],
        due_at=r["due_at"],
        buffered_for=r["buffered_for"],
        last_run_id=r["last_run_id"],
        last_fired_for=r["last_fired_for"],
        fired=r["fired"],
        skipped=r["skipped"],
        missed=r["missed"],
        claimed_by=r["claimed_by"],
        claimed_until=r["claimed_until"],
        created_by=r["created_by"],
        created_at=r["created_at"],
        updated_at=r["updated_at"],
    )


@translated
async def insert_schedule(
    conn: Connection,
    schedule_id: str,
    *,
    workflow_id: str,
    spec: Json,
    source: str,
    paused: bool,
    next_fire_at: dt.datetime,
    due_at: dt.datetime,
    created_by: str | None,
) -> bool:
    """Store a new schedule; False when the id is taken (nothing stored)."""
    row = await conn.fetchval(
        q("insert_schedule"),
        schedule_id,
        workflow_id,
        spec,
        source,
        paused,
        next_fire_at,
        due_at,
        created_by,
    )
    return row is not None


@translated
async def get_schedule(conn: Connection, schedule_id: str, *, lock: bool = False) -> ScheduleRecord:
    """The schedule (locked FOR UPDATE with ``lock``); NotFound when there is none."""
    if lock:
        r = await conn.fetchrow(q("lock_schedule"), schedule_id)
    else:
        r = await conn.fetchrow(q("get_schedule"), schedule_id)
    if r is None:
        raise NotFound(f"no schedule {schedule_id!r}")
    return _schedule(r)


@translated
async def list_schedules(
    conn: Connection, *, workflow_id: str | None = None
) -> list[ScheduleRecord]:
    return [_schedule(r) for r in await conn.fetch(q("list_schedules"), workflow_id)]


@translated
async def workflow_schedules(conn: Connection, workflow_id: str) -> list[ScheduleRecord]:
    """The schedules the workflow's deployed definition wrote, locked."""
    return [_schedule(r) for r in await conn.fetch(q("workflow_schedules"), workflow_id)]


@translated
async def replace_schedule_spec(
    conn: Connection,
    schedule_id: str,
    *,
    spec: Json,
    paused: bool,
    next_fire_at: dt.datetime,
    due_at: dt.datetime,
) -> None:
    await conn.execute(q("replace_schedule_spec"), schedule_id, spec, paused, next_fire_at, due_at)


@translated
async def delete_schedule(conn: Connection, schedule_id: str) -> bool:
    """Delete the schedule, its events and backfills; False when there was none."""
    await conn.execute(q("delete_schedule_events"), schedule_id)
    return await conn.fetchval(q("delete_schedule"), schedule_id) is not None


@translated
async def set_schedule_paused(
    conn: Connection,
    schedule_id: str,
    paused: bool,
    *,
    next_fire_at: dt.datetime | None = None,
    due_at: dt.datetime | None = None,
) -> bool:
    row = await conn.fetchval(q("set_schedule_paused"), schedule_id, paused, next_fire_at, due_at)
    return row is not None


@translated
async def claim_due_schedules(
    conn: Connection, now: dt.datetime, token: str, until: dt.datetime, limit: int
) -> list[ScheduleRecord]:
    """Claim up to ``limit`` due schedules (no live claim on them) until ``until``."""
    rows = await conn.fetch(q("claim_due_schedules"), now, token, until, limit)
    return [_schedule(r) for r in rows]


@dataclass(frozen=True, slots=True)
class ScheduleOutcome:
    """What a pass did with a claimed schedule."""

    revision: int
    next_fire_at: dt.datetime
    due_at: dt.datetime
    buffered_for: dt.datetime | None
    last_run_id: str | None
    last_fired_for: dt.datetime | None
    fired: int
    skipped: int
    missed: int


@translated
async def finish_schedule_claims(
    conn: Connection, token: str, outcomes: Sequence[tuple[str, ScheduleOutcome]]
) -> set[str]:
    """Write a pass's outcomes (schedule id, outcome) and let their claims go, in one
    statement; the schedules left out of the answer had lost their claim (it ran out
    and another replica holds it, or the schedule was deleted)."""
    if not outcomes:
        return set()
    rows = await conn.fetch(
        q("finish_schedule_claims"),
        token,
        [sid for sid, _ in outcomes],
        [o.revision for _, o in outcomes],
        [o.next_fire_at for _, o in outcomes],
        [o.due_at for _, o in outcomes],
        [o.buffered_for for _, o in outcomes],
        [o.last_run_id for _, o in outcomes],
        [o.last_fired_for for _, o in outcomes],
        [o.fired for _, o in outcomes],
        [o.skipped for _, o in outcomes],
        [o.missed for _, o in outcomes],
    )
    return {r["id"] for r in rows}


@translated
async def note_schedule_run(conn: Connection, schedule_id: str, run_id: str) -> None:
    await conn.execute(q("note_schedule_run"), schedule_id, run_id)


@translated
async def note_schedule_skip(conn: Connection, schedule_id: str) -> None:
    await conn.execute(q("note_schedule_skip"), schedule_id)


@translated
async def next_schedule_due(conn: Connection) -> dt.datetime | None:
    due: dt.datetime | None = await conn.fetchval(q("next_schedule_due"))
    return due


@dataclass(frozen=True, slots=True)
class NewScheduleEvent:
    schedule_id: str
    kind: str
    scheduled_for: dt.datetime | None = None
    run_id: str | None = None
    detail: str | None = None
    actor: str | None = None


@dataclass(frozen=True, slots=True)
class ScheduleEvent:
    event_id: int
    schedule_id: str
    at: dt.datetime
    kind: str
    scheduled_for: dt.datetime | None
    run_id: str | None
    detail: str | None
    actor: str | None


@translated
async def insert_schedule_events(conn: Connection, events: Sequence[NewScheduleEvent]) -> None:
    if not events:
        return
    await conn.execute(
        q("insert_schedule_events"),
        [e.schedule_id for e in events],
        [e.kind for e in events],
        [e.scheduled_for for e in events],
        [e.run_id for e in events],
        [e.detail for e in events],
        [e.actor for e in events],
    )


@translated
async def schedule_events(
    conn: Connection, schedule_id: str, limit: int = 50
) -> list[ScheduleEvent]:
    """The schedule's newest events first."""
    rows = await conn.fetch(q("schedule_events"), schedule_id, limit)
    return [
        ScheduleEvent(
            r["id"],
            r["schedule_id"],
            r["at"],
            r["kind"],
            r["scheduled_for"],
            r["run_id"],
            r["detail"],
            r["actor"],
        )
        for r in rows
    ]


@translated
async def run_statuses(conn: Connection, run_ids: Sequence[str]) -> dict[str, RunStatus]:
    """The runs' statuses (a run that is gone is left out)."""
    rows = await conn.fetch(q("run_statuses"), list(run_ids))
    return {r["id"]: RunStatus(r["status"]) for r in rows}


@dataclass(frozen=True, slots=True)
class BackfillRecord:
    backfill_id: str
    schedule_id: str
    start_at: dt.datetime
    end_at: dt.datetime
    overlap: str
    #: The last fire time handled; None: none yet.
    cursor: dt.datetime | None
    total: int
    started: int
    skipped: int
    last_run_id: str | None
    requested_by: str | None
    created_at: dt.datetime
    finished_at: dt.datetime | None


def _backfill(r: Any) -> BackfillRecord:
    return BackfillRecord(
        backfill_id=r["id"],
        schedule_id=r["schedule_id"],
        start_at=r["start_at"],
        end_at=r["end_at"],
        overlap=r["overlap"],
        cursor=r["cursor"],
        total=r["total"],
        started=r["started"],
        skipped=r["skipped"],
        last_run_id=r["last_run_id"],
        requested_by=r["requested_by"],
        created_at=r["created_at"],
        finished_at=r["finished_at"],
    )


@translated
async def insert_backfill(
    conn: Connection,
    backfill_id: str,
    schedule_id: str,
    *,
    start_at: dt.datetime,
    end_at: dt.datetime,
    overlap: str,
    total: int,
    requested_by: str | None,
) -> None:
    await conn.execute(
        q("insert_backfill"),
        backfill_id,
        schedule_id,
        start_at,
        end_at,
        overlap,
        total,
        requested_by,
    )


@translated
async def claim_backfills(
    conn: Connection, now: dt.datetime, token: str, until: dt.datetime, limit: int
) -> list[BackfillRecord]:
    rows = await conn.fetch(q("claim_backfills"), now, token, until, limit)
    return [_backfill(r) for r in rows]


@translated
async def finish_backfill_claim(
    conn: Connection,
    backfill_id: str,
    token: str,
    *,
    cursor: dt.datetime | None,
    started: int,
    skipped: int,
    last_run_id: str | None,
    finished: bool,
) -> bool:
    row = await conn.fetchval(
        q("finish_backfill_claim"),
        backfill_id,
        token,
        cursor,
        started,
        skipped,
        last_run_id,
        finished,
    )
    return row is not None


@translated
async def schedule_backfills(
    conn: Connection, schedule_id: str, limit: int = 20
) -> list[BackfillRecord]:
    rows = await conn.fetch(q("schedule_backfills"), schedule_id, limit)
    return [_backfill(r) for r in rows]


@translated
async def get_backfill(conn: Connection, backfill_id: str) -> BackfillRecord:
    r = await conn.fetchrow(q("get_backfill"), backfill_id)
    if r is None:
        raise NotFound(f"no backfill {backfill_id!r}")
    return _backfill(r)
