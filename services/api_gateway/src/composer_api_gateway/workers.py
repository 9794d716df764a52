"""GET /v1/workers, and the hint on a task that waits on a queue nobody serves.

Workers beat to the coordinator, which keeps their last beat in PostgreSQL
(composer_coordinator.presence). A worker is live while it has not stopped and
its last beat is at most COMPOSER_WORKER_LIVE_SECONDS old (the database's clock
both ways). A run's PENDING or QUEUED task whose queue no live worker serves
carries ``waiting_hint``, so "why is my run stuck" is answered on the run itself.
"""

from __future__ import annotations

import datetime as dt

from aiohttp import web

from composer_api_gateway.definitions import json_response
from composer_api_gateway.models import Worker, WorkerList, WorkerStatus
from composer_api_gateway.state import CONFIG, ENGINE
from composer_engine.records import UnservedQueue, WorkerRecord


def status_of(w: WorkerRecord, live_seconds: float) -> tuple[WorkerStatus, bool]:
    """The worker's status (SERVING, DRAINING, STOPPED, LOST) and whether it is live."""
    if w.state == "STOPPED":
        return "STOPPED", False
    if (w.now - w.last_seen_at).total_seconds() > live_seconds:
        return "LOST", False
    return w.state, True


async def list_workers(request: web.Request) -> web.Response:
    live_seconds = request.app[CONFIG].worker_live_seconds
    records = await request.app[ENGINE].reads.workers()
    workers = []
    for w in records:
        status, live = status_of(w, live_seconds)
        workers.append(
            Worker(
                worker_id=w.worker_id,
                host=w.host,
                queues=list(w.queues),
                status=status,
                live=live,
                concurrency=w.concurrency,
                in_flight=w.in_flight,
                sdk_version=w.sdk_version,
                started_at=w.started_at,
                last_seen_at=w.last_seen_at,
                last_seen_seconds_ago=round(max(0.0, (w.now - w.last_seen_at).total_seconds()), 1),
                stopped_at=w.stopped_at,
            )
        )
    workers.sort(key=lambda w: not w.live)  # stable: each group keeps its order
    return json_response(WorkerList(workers=workers, live_seconds=live_seconds))


def ago(seconds: float) -> str:
    """A short duration: 45s, 5m, 2h10m, 3d."""
    s = int(max(0.0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        hours, minutes = divmod(s // 60, 60)
        return f"{hours}h{minutes:02d}m" if minutes else f"{hours}h"
    return f"{s // 86400}d"


def hint(unserved: UnservedQueue) -> str:
    """What a task waiting on ``unserved`` says: since when nobody serves it, and the fix."""
    fix = "start a worker with a handler for it (composer workers lists those running)"
    if unserved.last_seen_at is None:
        return f"no worker has ever served queue '{unserved.queue}': {fix}"
    since = (unserved.now - unserved.last_seen_at).total_seconds()
    seen = unserved.last_seen_at.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return (
        f"no worker has served queue '{unserved.queue}' for {ago(since)} (last seen {seen}): {fix}"
    )
