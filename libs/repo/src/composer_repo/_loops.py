"""What the background loops look for: due timers, expired leases, lost dispatches.

Each query reads one small partial index (see V001): rows leave it as soon as
the loop's work on them is done, so the scans stay short however many tasks
the tables hold.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from composer_core.model import NodeType, TaskState
from composer_repo._db import Connection, translated
from composer_repo._records import (
    DueWait,
    ExpiredLease,
    LostDispatch,
    Redispatch,
    TaskAttempt,
    TaskRef,
)
from composer_repo._sql import q


@translated
async def due_waits(
    conn: Connection, *, limit: int = 200, now: dt.datetime | None = None
) -> list[DueWait]:
    """WAITING tasks whose timer is due at ``now`` (default: the database's clock), oldest first."""
    rows = await conn.fetch(q("due_waits"), limit, now)
    return [DueWait(r["run_id"], r["id"], r["node_id"], r["wake_at"]) for r in rows]


@translated
async def park_wait(conn: Connection, run_id: str, task_id: str, *, until: dt.datetime) -> bool:
    """Move a WAITING task's timer to ``until``: a wait that cannot be fired now stops
    coming back in every batch of due waits. False when it is no longer waiting."""
    return await conn.fetchval(q("park_wait"), run_id, task_id, until) is not None


@translated
async def next_wake_at(conn: Connection) -> dt.datetime | None:
    """The earliest pending timer (None: no timers): how long the timer loop may sleep."""
    wake: dt.datetime | None = await conn.fetchval(q("next_wake_at"))
    return wake


@translated
async def seconds_until(conn: Connection, at: dt.datetime) -> float:
    """Seconds from now to ``at`` by the database's clock, which set every wake_at
    (negative: ``at`` is past)."""
    seconds: float = await conn.fetchval(q("seconds_until"), at)
    return seconds


@translated
async def expired_leases(
    conn: Connection, *, limit: int = 200, now: dt.datetime | None = None
) -> list[ExpiredLease]:
    """RUNNING attempts whose lease expired before ``now`` (default: the database's clock)."""
    rows = await conn.fetch(q("expired_leases"), limit, now)
    return [
        ExpiredLease(
            run_id=r["run_id"],
            task_id=r["id"],
            node_id=r["node_id"],
            attempt=r["attempt"],
            owner=r["lease_owner"],
            expired_at=r["lease_expires_at"],
        )
        for r in rows
    ]


@translated
async def lost_dispatches(
    conn: Connection, *, older_than: dt.datetime, limit: int = 200
) -> list[LostDispatch]:
    """PENDING or QUEUED attempts due for dispatch before ``older_than`` that have no
    outbox row left. Whether their stream entry is still alive is for the caller to
    check in Redis before ``redispatch_task``."""
    rows = await conn.fetch(q("lost_dispatches"), older_than, limit)
    return [
        LostDispatch(
            run_id=r["run_id"],
            task_id=r["id"],
            node_id=r["node_id"],
            attempt=r["attempt"],
            state=TaskState(r["state"]),
            dispatched_at=r["dispatched_at"],
            queue=r["queue"],
        )
        for r in rows
    ]


@translated
async def redispatch_task(
    conn: Connection, run_id: str, task_id: str, attempt: int
) -> Redispatch | None:
    """Make a lost attempt PENDING and due again from the transaction's clock on;
    returns what its dispatch (``enqueue_dispatch`` in the same transaction) needs,
    or None if it moved on."""
    row = await conn.fetchrow(q("redispatch_task"), run_id, task_id, attempt)
    if row is None:
        return None
    return Redispatch(
        run_id=run_id,
        task_id=task_id,
        node_id=row["node_id"],
        node_type=NodeType(row["node_type"]),
        attempt=attempt,
        queue=row["queue"],
        input=row["input"],
    )


@translated
async def lock_expired_lease(conn: Connection, ref: TaskRef, owner: str | None) -> bool:
    """Under the run lock: is the attempt still RUNNING under ``owner``'s lease, and is
    that lease still expired? True locks the task row until the transaction ends, so a
    renewal cannot land between this check and the failure the caller writes."""
    row = await conn.fetchval(q("lock_expired_lease"), ref.run_id, ref.task_id, ref.attempt, owner)
    return row is not None


@translated
async def task_attempts(
    conn: Connection, tasks: Sequence[tuple[str, str]]
) -> dict[str, TaskAttempt]:
    """The state and current attempt of each (run id, task id), by task id; tasks that
    no longer exist are absent."""
    if not tasks:
        return {}
    rows = await conn.fetch(
        q("task_attempts"), [run_id for run_id, _ in tasks], [task_id for _, task_id in tasks]
    )
    return {
        r["id"]: TaskAttempt(
            r["run_id"], r["id"], TaskState(r["state"]), r["attempt"], r["node_id"]
        )
        for r in rows
    }
