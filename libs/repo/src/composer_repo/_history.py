"""Run history rows (V009): appended in the transaction that applied the event,
read a page at a time by the API (docs/architecture.md §6.4)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from composer_core.templates import Json
from composer_repo._db import Connection, translated
from composer_repo._sql import q


@dataclass(frozen=True, slots=True)
class NewHistory:
    """One history row to append (``insert_history``); ``detail`` as stored (sealed
    when the run is)."""

    run_id: str
    kind: str
    node_id: str | None = None
    task_id: str | None = None
    attempt: int | None = None
    actor: str | None = None
    detail: Json = None


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One history row as read: ``seq`` orders a run's rows and is the paging cursor."""

    seq: int
    at: dt.datetime
    kind: str
    node_id: str | None
    task_id: str | None
    attempt: int | None
    actor: str | None
    detail: Json


@translated
async def insert_history(conn: Connection, rows: Sequence[NewHistory]) -> None:
    """Append ``rows`` in one statement, in their order."""
    if not rows:
        return
    await conn.execute(q("insert_history"), *insert_history_args(rows))


def insert_history_args(rows: Sequence[NewHistory]) -> tuple[Any, ...]:
    """The parameters of ``insert_history`` (and of ``together`` statements holding it)."""
    return (
        [r.run_id for r in rows],
        [r.kind for r in rows],
        [r.node_id for r in rows],
        [r.task_id for r in rows],
        [r.attempt for r in rows],
        [r.actor for r in rows],
        [r.detail for r in rows],
    )


@translated
async def run_history(
    conn: Connection, run_id: str, *, after: int = 0, limit: int = 100
) -> list[HistoryEntry]:
    """A page of the run's history, oldest first: the rows after ``after`` (a
    ``seq``; 0 for the first page), at most ``limit``."""
    rows = await conn.fetch(q("run_history"), run_id, after, limit)
    return [
        HistoryEntry(
            r["seq"],
            r["at"],
            r["kind"],
            r["node_id"],
            r["task_id"],
            r["attempt"],
            r["actor"],
            r["detail"],
        )
        for r in rows
    ]


@translated
async def lease_times(conn: Connection, run_id: str) -> dict[tuple[str, int], dt.datetime]:
    """When each attempt of the run was last leased, by (task id, attempt)."""
    rows = await conn.fetch(q("lease_times"), run_id)
    return {(r["task_id"], r["attempt"]): r["at"] for r in rows}
