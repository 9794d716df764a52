"""Workers: who serves which queue, as their heartbeats say (V011).

The coordinator records beats (at most one write per worker every few
seconds, never one per task); the API lists workers and tells which queues of a
run's waiting tasks nobody serves. "Live" is the reader's threshold: a worker
not stopped and seen within it.
"""

from __future__ import annotations

from typing import cast

from composer_repo._db import Connection, translated
from composer_repo._records import UnservedQueue, WorkerBeat, WorkerRecord, WorkerState
from composer_repo._sql import q


@translated
async def record_worker_heartbeat(conn: Connection, beat: WorkerBeat) -> bool:
    """Upsert the worker's row; False when this process had already said it stopped
    (a late beat, dropped). A later ``started_at`` is a new process: it is recorded."""
    written = await conn.fetchval(
        q("record_worker_heartbeat"),
        beat.worker_id,
        beat.host,
        list(beat.queues),
        beat.concurrency,
        beat.in_flight,
        beat.sdk_version,
        beat.state,
        beat.started_at,
    )
    return written is not None


@translated
async def list_workers(conn: Connection, *, limit: int = 1000) -> list[WorkerRecord]:
    """The workers recorded (pruned after a day unseen), the most recently seen first."""
    rows = await conn.fetch(q("list_workers"), limit)
    return [
        WorkerRecord(
            worker_id=r["id"],
            host=r["host"],
            queues=tuple(r["queues"]),
            concurrency=r["concurrency"],
            in_flight=r["in_flight"],
            sdk_version=r["sdk_version"],
            state=cast(WorkerState, r["state"]),
            started_at=r["started_at"],
            last_seen_at=r["last_seen_at"],
            stopped_at=r["stopped_at"],
            now=r["now"],
        )
        for r in rows
    ]


@translated
async def prune_workers(conn: Connection, *, unseen_seconds: float, limit: int = 1000) -> int:
    """Delete at most ``limit`` workers unseen for ``unseen_seconds``; how many went."""
    rows = await conn.fetch(q("prune_workers"), float(unseen_seconds), limit)
    return len(rows)


@translated
async def unserved_queues(
    conn: Connection, run_id: str, *, live_seconds: float
) -> list[UnservedQueue]:
    """The queues the run's waiting worker tasks (PENDING, QUEUED) are on that no live
    worker (not stopped, seen within ``live_seconds``) serves, by name."""
    rows = await conn.fetch(q("unserved_queues"), run_id, float(live_seconds))
    return [UnservedQueue(r["queue"], r["last_seen_at"], r["now"]) for r in rows]
