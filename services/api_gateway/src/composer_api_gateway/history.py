"""GET /v1/runs/{run_id}/history: what happened to a run, a page at a time.

The rows are the engine's (libs/engine/_history.py), written with each event,
read through its read side (``Engine.reads.history``), which opens them (a
sealed run's details are sealed at rest) and, for a viewer who may not see the
run's payloads, redacts them: the detail's input, config, error and reason are
null. Durations of finished attempts are measured
from the attempt's lease, which may be on an earlier page.
"""

from __future__ import annotations

import datetime as dt

from aiohttp import web

from composer_api_gateway import bodies
from composer_api_gateway.definitions import json_response
from composer_api_gateway.models import History, HistoryEntry, HistoryQuery
from composer_api_gateway.problems import bad_request
from composer_api_gateway.runs import BAD_CURSOR, decode_cursor, encode_cursor, full_access
from composer_api_gateway.state import CALLER, ENGINE
from composer_engine import HISTORY_ENDS_ATTEMPT, HistoryRow

_CURSOR_PREFIX = "h1:"


async def show(request: web.Request) -> web.Response:
    run_id = bodies.run_id_param(request)
    query = bodies.read_query(request, HistoryQuery)
    after = 0
    if query.cursor:
        seq = decode_cursor(query.cursor, _CURSOR_PREFIX)
        if not seq.isdigit():
            raise bad_request(BAD_CURSOR)
        after = int(seq)
    page = await request.app[ENGINE].reads.history(
        run_id, full_access=full_access(request[CALLER]), after=after, limit=query.limit
    )
    rows = [r.entry for r in page.rows]
    entries = [_entry(r, page.leased) for r in page.rows]
    more = page.more
    return json_response(
        History(
            run_id=run_id,
            entries=entries,
            next_cursor=encode_cursor(str(rows[-1].seq), _CURSOR_PREFIX) if more else None,
        )
    )


def _entry(shown: HistoryRow, leased: dict[tuple[str, int], dt.datetime]) -> HistoryEntry:
    row = shown.entry
    duration = None
    if row.kind in HISTORY_ENDS_ATTEMPT and row.task_id is not None and row.attempt is not None:
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
        detail=shown.detail,
        duration_ms=duration,
        redacted=shown.redacted,
    )
