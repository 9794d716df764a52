"""GET /v1/runs/{run_id}/history: what happened to a run, a page at a time.

The rows are the engine's (libs/engine/_history.py), written with each event;
here they are opened (a sealed run's details are sealed at rest) and, for a
viewer who may not see the run's payloads, redacted: the detail's input,
config, error and reason are null. Durations of finished attempts are measured
from the attempt's lease, which may be on an earlier page.
"""

from __future__ import annotations

import datetime as dt

from aiohttp import web

import composer_repo as repo
from composer_api_gateway import bodies
from composer_api_gateway.definitions import json_response
from composer_api_gateway.models import History, HistoryEntry, HistoryQuery
from composer_api_gateway.problems import bad_request
from composer_api_gateway.runs import BAD_CURSOR, decode_cursor, encode_cursor, shows_payloads
from composer_api_gateway.state import CALLER, ENGINE, POOL
from composer_engine import opened
from composer_engine.sealing import Sealer

_CURSOR_PREFIX = "h1:"
#: Detail keys that hold the run's data: null for a viewer who may not see payloads.
_PAYLOAD_KEYS = ("input", "config", "error", "reason")
#: Kinds that end an attempt: they carry its duration from the lease.
_ENDS_ATTEMPT = frozenset({"task.completed", "task.failed", "task.retry_scheduled"})


async def show(request: web.Request) -> web.Response:
    run_id = bodies.run_id_param(request)
    query = bodies.read_query(request, HistoryQuery)
    after = 0
    if query.cursor:
        seq = decode_cursor(query.cursor, _CURSOR_PREFIX)
        if not seq.isdigit():
            raise bad_request(BAD_CURSOR)
        after = int(seq)
    engine = request.app[ENGINE]
    async with repo.transaction(request.app[POOL]) as conn:
        run = await repo.get_run(conn, run_id)  # NotFound: 404
        rows = await repo.run_history(conn, run_id, after=after, limit=query.limit + 1)
        leased = (
            await repo.lease_times(conn, run_id)
            if any(r.kind in _ENDS_ATTEMPT for r in rows)
            else {}
        )
        shown = await shows_payloads(
            conn, engine.definitions, request[CALLER], run.workflow_id, run.version
        )
    more = len(rows) > query.limit
    rows = rows[: query.limit]
    entries = [_entry(engine.sealer, run_id, r, leased, shown) for r in rows]
    return json_response(
        History(
            run_id=run_id,
            entries=entries,
            next_cursor=encode_cursor(str(rows[-1].seq), _CURSOR_PREFIX) if more else None,
        )
    )


def _entry(
    sealer: Sealer,
    run_id: str,
    row: repo.HistoryEntry,
    leased: dict[tuple[str, int], dt.datetime],
    shown: bool,
) -> HistoryEntry:
    detail = opened.shown(sealer, run_id, row.detail)
    if isinstance(detail, str):  # a detail that does not open here: say why
        detail = {"sealed": detail}
    redacted = False
    if not shown and isinstance(detail, dict):
        hidden = [k for k in _PAYLOAD_KEYS if detail.get(k) is not None]
        if hidden:
            detail = {**detail, **dict.fromkeys(hidden)}
            redacted = True
    duration = None
    if row.kind in _ENDS_ATTEMPT and row.task_id is not None and row.attempt is not None:
        start = leased.get((row.task_id, row.attempt))
        if start is not None:
            duration = round((row.at - start).total_seconds() * 1000, 3)
    return HistoryEntry(
        seq=row.seq,
        at=row.at,
        kind=row.kind,
        node_id=row.node_id,
        task_id=row.task_id,
        attempt=row.attempt,
        actor=row.actor,
        detail=detail if isinstance(detail, dict) else None,
        duration_ms=duration,
        redacted=redacted,
    )
