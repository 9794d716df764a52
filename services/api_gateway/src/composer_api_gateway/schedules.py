"""Handlers of /v1/schedules: create, list, show, delete, pause, resume, trigger and
backfill schedules (docs/architecture.md §6.8); the engine's ``Engine.schedules``
does the work, the timer service fires them.

A schedule's ``input`` is stored in plain text, never sealed. A viewer token reads
it as the run routes show a run's input: null with ``redacted: true`` unless the
workflow's deployed version sets ``viewers_see_payloads: true``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from aiohttp import web

from composer_api_gateway import bodies
from composer_api_gateway.definitions import json_response
from composer_api_gateway.models import (
    BackfillSchedule,
    BackfillView,
    NewSchedule,
    Schedule,
    ScheduleDeleted,
    ScheduleEventView,
    ScheduleList,
    ScheduleListQuery,
    ScheduleTriggered,
    TriggerSchedule,
)
from composer_api_gateway.problems import bad_request, not_found
from composer_api_gateway.runs import check_run_input, full_access, idempotency_key
from composer_api_gateway.state import CALLER, ENGINE, WORKFLOWS
from composer_core.schedules import ScheduleSpec
from composer_engine import ScheduleView
from composer_engine.records import BackfillRecord, ScheduleEvent, ScheduleRecord

ACCEPTED = 202
_SCHEDULE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def schedule_id_param(request: web.Request) -> str:
    """The ``{schedule_id}`` path value; 404 when no schedule could have that id."""
    raw = request.match_info["schedule_id"]
    if not _SCHEDULE_ID.fullmatch(raw):
        shown = raw if len(raw) <= 80 else raw[:80] + "…"
        raise not_found(f"no schedule {shown!r}")
    return raw


async def _shown_workflows(request: web.Request, workflow_ids: Iterable[str]) -> set[str]:
    """The workflows (of ``workflow_ids``) whose schedules' input the caller may read:
    every one for an operator; for a viewer, those whose deployed version sets
    ``viewers_see_payloads``."""
    wanted = set(workflow_ids)
    if full_access(request[CALLER]):
        return wanted
    workflows = request.app[WORKFLOWS]
    shown: set[str] = set()
    for summary in await workflows.summaries():
        if summary.workflow_id in wanted and summary.deployed_version is not None:
            version = await workflows.get(summary.workflow_id, summary.deployed_version)
            spec = version.spec if isinstance(version.spec, dict) else {}
            if spec.get("viewers_see_payloads") is True:
                shown.add(summary.workflow_id)
    return shown


def _schedule(record: ScheduleRecord, shown: bool) -> Schedule:
    spec = ScheduleSpec.model_validate(record.spec)
    return Schedule(
        id=record.schedule_id,
        workflow_id=record.workflow_id,
        source="definition" if record.source == "definition" else "api",
        paused=record.paused,
        cron=spec.cron,
        every_seconds=spec.every_seconds,
        timezone=spec.timezone,
        input=dict(spec.input) if shown else None,
        overlap=spec.overlap,
        catchup_window_seconds=spec.catchup_window_seconds,
        jitter_seconds=spec.jitter_seconds,
        next_fire_at=None if record.paused else record.next_fire_at,
        last_run_id=record.last_run_id,
        last_fired_for=record.last_fired_for,
        buffered_for=record.buffered_for,
        fired=record.fired,
        skipped=record.skipped,
        missed=record.missed,
        created_by=record.created_by,
        created_at=record.created_at,
        updated_at=record.updated_at,
        redacted=not shown,
    )


def _event(e: ScheduleEvent) -> ScheduleEventView:
    return ScheduleEventView(
        kind=e.kind,
        at=e.at,
        scheduled_for=e.scheduled_for,
        run_id=e.run_id,
        detail=e.detail,
        actor=e.actor,
    )


def _backfill(b: BackfillRecord) -> BackfillView:
    return BackfillView(
        id=b.backfill_id,
        start=b.start_at,
        end=b.end_at,
        overlap=b.overlap,
        total=b.total,
        started=b.started,
        skipped=b.skipped,
        done=b.finished_at is not None,
        last_run_id=b.last_run_id,
        requested_by=b.requested_by,
        created_at=b.created_at,
        finished_at=b.finished_at,
    )


async def _view(request: web.Request, view: ScheduleView) -> Schedule:
    shown = await _shown_workflows(request, [view.record.workflow_id])
    out = _schedule(view.record, view.record.workflow_id in shown)
    out.next_fires = list(view.next_fires)
    out.events = [_event(e) for e in view.events]
    out.backfills = [_backfill(b) for b in view.backfills]
    return out


async def _answer(request: web.Request, schedule_id: str, status: int = 200) -> web.Response:
    view = await request.app[ENGINE].schedules.get(schedule_id)
    headers = {"Location": f"/v1/schedules/{schedule_id}"} if status == 201 else {}
    return json_response(await _view(request, view), status, **headers)


async def create(request: web.Request) -> web.Response:
    body = await bodies.read_model(request, NewSchedule)
    spec = ScheduleSpec.model_validate(body.model_dump(exclude={"workflow_id"}))
    check_run_input(request, spec.input, None)
    await request.app[ENGINE].schedules.create(
        body.workflow_id, spec, created_by=request[CALLER].name
    )
    return await _answer(request, spec.id, 201)


async def list_schedules(request: web.Request) -> web.Response:
    query = bodies.read_query(request, ScheduleListQuery)
    records = await request.app[ENGINE].schedules.list(workflow_id=query.workflow_id)
    shown = await _shown_workflows(request, {r.workflow_id for r in records})
    return json_response(
        ScheduleList(schedules=[_schedule(r, r.workflow_id in shown) for r in records])
    )


async def show(request: web.Request) -> web.Response:
    return await _answer(request, schedule_id_param(request))


async def delete(request: web.Request) -> web.Response:
    schedule_id = schedule_id_param(request)
    await request.app[ENGINE].schedules.delete(schedule_id)
    return json_response(ScheduleDeleted(id=schedule_id))


async def pause(request: web.Request) -> web.Response:
    schedule_id = schedule_id_param(request)
    await request.app[ENGINE].schedules.pause(schedule_id, by=request[CALLER].name)
    return await _answer(request, schedule_id)


async def resume(request: web.Request) -> web.Response:
    schedule_id = schedule_id_param(request)
    await request.app[ENGINE].schedules.resume(schedule_id, by=request[CALLER].name)
    return await _answer(request, schedule_id)


async def trigger(request: web.Request) -> web.Response:
    schedule_id = schedule_id_param(request)
    body = await bodies.read_model(request, TriggerSchedule)
    fired = await request.app[ENGINE].schedules.trigger(
        schedule_id,
        by=request[CALLER].name,
        overlap=body.overlap,
        request_id=idempotency_key(request),
    )
    return json_response(
        ScheduleTriggered(
            schedule_id=schedule_id,
            started=fired.run_id is not None,
            run_id=fired.run_id,
            detail=fired.detail,
        )
    )


async def backfill(request: web.Request) -> web.Response:
    schedule_id = schedule_id_param(request)
    body = await bodies.read_model(request, BackfillSchedule)
    for name, value in (("start", body.start), ("end", body.end)):
        if value.tzinfo is None:
            raise bad_request(f"{name} needs a time zone, e.g. 2026-01-01T00:00:00Z")
    record = await request.app[ENGINE].schedules.backfill(
        schedule_id, body.start, body.end, overlap=body.overlap, by=request[CALLER].name
    )
    return json_response(
        _backfill(record),
        ACCEPTED,
        Location=f"/v1/schedules/{schedule_id}/backfills/{record.backfill_id}",
    )


async def show_backfill(request: web.Request) -> web.Response:
    schedule_id = schedule_id_param(request)
    backfill_id = request.match_info["backfill_id"]
    record = await request.app[ENGINE].schedules.backfill_progress(schedule_id, backfill_id)
    return json_response(_backfill(record))
