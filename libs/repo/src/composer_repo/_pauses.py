"""Paused runs (V018): the run's status, and its attempts held until its resume
(docs/architecture.md §4.14).

A paused run's attempts that wait for a worker are held like the admission step
holds one (``held_reason``, no outbox row, a stream entry refused by the lease),
with a reason of their own, ``PAUSED_HOLD``: the admission step's release and its
count of held tasks leave them out, and only the run's resume lets them go.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from composer_repo._db import Connection, translated
from composer_repo._sql import q

#: The held_reason of a paused run's attempts (shown as their ``waiting_hint``).
PAUSED_HOLD = "the run is paused: this task goes to a worker when the run is resumed"
#: When the start of a child a paused run's node wrote is due: not before the parent's
#: resume (``release_child_starts`` makes it due then).
CHILD_START_HELD = dt.datetime(9999, 1, 1, tzinfo=dt.UTC)


@dataclass(frozen=True, slots=True)
class HeldAttempt:
    """An attempt of a paused run held (or released at its resume)."""

    task_id: str
    node_id: str
    attempt: int
    queue: str
    #: Released with a retry backoff still ahead: due then (None: at once).
    not_before: dt.datetime | None = None


@translated
async def pause_run(conn: Connection, run_id: str) -> bool:
    """Mark a RUNNING run PAUSED; False when it is not running."""
    return await conn.fetchval(q("pause_run"), run_id) is not None


@translated
async def resume_run(conn: Connection, run_id: str) -> bool:
    """Mark a PAUSED run RUNNING again; False when it is not paused."""
    return await conn.fetchval(q("resume_run"), run_id) is not None


@translated
async def hold_run_tasks(
    conn: Connection, run_id: str, task_ids: Sequence[str] | None = None
) -> list[HeldAttempt]:
    """Hold the run's attempts that wait for a worker (``task_ids``: only these; None:
    all), deleting their unsent dispatches: those newly held. In an event's
    transaction (its clock decides whether a retry's backoff is still ahead)."""
    rows = await conn.fetch(
        q("hold_run_tasks"), run_id, None if task_ids is None else list(task_ids), PAUSED_HOLD
    )
    return [HeldAttempt(r["id"], r["node_id"], r["attempt"], r["queue"]) for r in rows]


@translated
async def release_run_tasks(conn: Connection, run_id: str) -> list[HeldAttempt]:
    """Let the held attempts of a resumed run go: each with the end of its retry
    backoff when that is still ahead. The caller writes their dispatches."""
    rows = await conn.fetch(q("release_run_tasks"), run_id, PAUSED_HOLD)
    return [
        HeldAttempt(r["id"], r["node_id"], r["attempt"], r["queue"], r["not_before"]) for r in rows
    ]


@translated
async def release_child_starts(conn: Connection, parent_run_id: str) -> list[int]:
    """Make the held starts of the children a paused run's nodes wrote due now (its
    resume). Their run events' ids, for the caller to deliver."""
    rows = await conn.fetch(q("release_child_starts"), parent_run_id, CHILD_START_HELD)
    return [r["id"] for r in rows]


@translated
async def settle_child_starts(conn: Connection, parent_run_id: str) -> list[int]:
    """A paused run cancelled: the held starts of the children its cancel reaches are
    dropped (the cancel ends them unstarted), those of abandoned ones made due now.
    Their run events' ids, for the caller to deliver."""
    rows = await conn.fetch(q("settle_child_starts"), parent_run_id, CHILD_START_HELD)
    return [r["id"] for r in rows]
