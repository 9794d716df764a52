"""Events between runs (V015).

An event addressed to another run (a child's end to its parent's node, a
parent's cancel to its children) is an outbox row of kind ``run_event``,
written in the transaction of its cause and deleted in the transaction that
applies it, under the target run's lock: applied once, whoever delivers it
and however often (docs/architecture.md §4.10).

A task the admission step holds is PENDING with a reason and no dispatch
time (the sweeper leaves it alone) until a release dispatches it
(docs/architecture.md §4.11).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from composer_core.templates import Json
from composer_repo._db import Connection, translated
from composer_repo._errors import NotFound
from composer_repo._records import ParentRef
from composer_repo._sql import q


@dataclass(frozen=True, slots=True)
class NewRunEvent:
    """An event for another run (``enqueue_run_events``): ``event`` names it, ``payload``
    holds it."""

    run_id: str
    task_id: str | None
    event: str
    payload: Json
    #: Due no earlier than this (None: at once, delivered right after the commit).
    not_before: dt.datetime | None = None


@dataclass(frozen=True, slots=True)
class TakenRunEvent:
    """A run event deleted by the transaction that applies it (``take_run_event``)."""

    run_id: str
    task_id: str | None
    event: str
    payload: Json
    attempts: int


@translated
async def set_run_parent(conn: Connection, run_id: str, parent: ParentRef) -> None:
    """Record ``parent`` on a run just inserted (its start's transaction)."""
    done = await conn.fetchval(
        q("set_run_parent"), run_id, parent.run_id, parent.node_id, parent.task_id, parent.attempt
    )
    if done is None:
        raise NotFound(f"workflow run {run_id} does not exist")


@translated
async def active_children(conn: Connection, run_id: str) -> list[str]:
    """The ids of the runs started for ``run_id``'s nodes that are still going."""
    return [r["id"] for r in await conn.fetch(q("active_children"), run_id)]


@translated
async def active_children_of_tasks(
    conn: Connection, run_id: str, task_ids: Sequence[str]
) -> list[str]:
    """The ids of the runs started for these tasks of ``run_id`` still going (not
    abandoned): a MAP's cancelled items' children."""
    rows = await conn.fetch(q("active_children_of_tasks"), run_id, list(task_ids))
    return [r["id"] for r in rows]


@translated
async def enqueue_run_events(conn: Connection, events: Sequence[NewRunEvent]) -> list[int]:
    """Write events for other runs in one statement: their outbox ids, in order."""
    if not events:
        return []
    rows = await conn.fetch(
        q("enqueue_run_events"),
        [e.run_id for e in events],
        [e.task_id for e in events],
        [e.event for e in events],
        [e.payload for e in events],
        [e.not_before for e in events],
    )
    return [r["id"] for r in rows]


@translated
async def run_event_target(conn: Connection, event_id: int) -> str | None:
    """The run event ``event_id`` is addressed to (None: applied already, or unknown)."""
    value = await conn.fetchval(q("run_event_target"), event_id)
    return None if value is None else str(value)


@translated
async def take_run_event(conn: Connection, event_id: int) -> TakenRunEvent | None:
    """Delete the event's row and return it, under its target run's lock, in the
    transaction that applies it (None: another transaction applied it first)."""
    row = await conn.fetchrow(q("take_run_event"), event_id)
    if row is None:
        return None
    return TakenRunEvent(
        row["run_id"], row["task_id"], row["destination"], row["payload"], row["attempts"]
    )


@translated
async def due_run_events(conn: Connection, *, limit: int, grace: float) -> list[int]:
    """Events not delivered ``grace`` seconds after they were written, oldest first."""
    return [r["id"] for r in await conn.fetch(q("due_run_events"), limit, grace)]


@translated
async def postpone_run_event(conn: Connection, event_id: int, delay: float, error: str) -> int:
    """Try a failed delivery again in ``delay`` seconds: the attempts so far (0: gone)."""
    attempts = await conn.fetchval(q("postpone_run_event"), event_id, delay, error)
    return 0 if attempts is None else int(attempts)
