"""The tasks an admission policy holds (V015): PENDING with a reason and no
dispatch time but a retry's backoff end (the sweeper leaves them alone) until a
release dispatches them, no earlier than that end
(docs/architecture.md §4.12).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from composer_repo._db import Connection, translated
from composer_repo._pauses import PAUSED_HOLD
from composer_repo._records import TaskRef
from composer_repo._sql import q


@translated
async def lock_queue_admission(conn: Connection, queue: str) -> None:
    """Take ``queue``'s admission lock until the transaction ends."""
    await conn.execute(q("lock_queue_admission"), queue)


@dataclass(frozen=True, slots=True)
class QueueLoad:
    """A queue's tasks with a worker or on their way to one, and those held."""

    in_flight: int
    held: int


@translated
async def queue_load(conn: Connection, queue: str, *, leaving_out: Sequence[str] = ()) -> QueueLoad:
    """How many tasks of ``queue`` are in flight (except those whose ids are in
    ``leaving_out``) and how many are held."""
    row = await conn.fetchrow(q("queue_load"), queue, list(leaving_out), PAUSED_HOLD)
    assert row is not None  # an aggregate answers one row
    return QueueLoad(int(row["in_flight"]), int(row["held"]))


@translated
async def hold_tasks(conn: Connection, held: Sequence[tuple[TaskRef, str]]) -> set[str]:
    """Hold PENDING attempts with their reasons: the ids of those held."""
    if not held:
        return set()
    rows = await conn.fetch(
        q("hold_tasks"),
        [ref.run_id for ref, _ in held],
        [ref.task_id for ref, _ in held],
        [ref.attempt for ref, _ in held],
        [reason for _, reason in held],
    )
    return {r["id"] for r in rows}


@translated
async def held_tasks(conn: Connection, queue: str, limit: int) -> list[TaskRef]:
    """The held attempts of ``queue`` that go first, at most ``limit``, locked (SKIP
    LOCKED): by their run's priority less a level per minute since the task was
    created, then first come (§4.16); not those of paused runs, which go at their
    run's resume."""
    rows = await conn.fetch(q("held_tasks"), queue, limit, PAUSED_HOLD)
    return [TaskRef(r["run_id"], r["id"], r["node_id"], r["attempt"]) for r in rows]


@dataclass(frozen=True, slots=True)
class Released:
    """A held attempt let go: ``not_before`` its retry's backoff end when that is still
    ahead (its dispatch waits until then), else None (it goes now)."""

    not_before: dt.datetime | None


@translated
async def release_task(conn: Connection, ref: TaskRef) -> Released | None:
    """Let a held attempt go, due for dispatch from now or from its retry's backoff end
    if that is later; None when it is no longer held."""
    row = await conn.fetchrow(q("release_task"), ref.run_id, ref.task_id, ref.attempt)
    if row is None:
        return None
    return Released(row["dispatched_at"] if row["later"] else None)
