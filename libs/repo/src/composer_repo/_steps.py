"""A step's writes in one statement: the group commit's hot path.

An engine step (a report applied) completes an attempt, inserts the tasks it
reached, writes their dispatches and appends its history rows: four statements,
four round trips of the coordinator to PostgreSQL, each its own parse, plan and
executor start. ``write_step`` sends them as one statement (``_sql.fuse``), with
the parameters, the rows and the meaning of each part unchanged. Their rows
never meet in one statement: the attempt completed is not a task inserted, and
the outbox and history rows reference tasks by id only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from composer_core.templates import Json
from composer_repo._db import Connection, translated
from composer_repo._history import NewHistory, insert_history_args
from composer_repo._outbox import Enqueued, enqueue_dispatches_args, enqueued
from composer_repo._records import FinishedTask, NewDispatch, NewTask, TaskRef
from composer_repo._sql import Fused, fuse
from composer_repo._tasks import complete_tasks_args, finished_task, insert_tasks_args

_STEP: Final[Fused] = fuse("complete_tasks", "insert_tasks", "enqueue_dispatches", "insert_history")


@dataclass(frozen=True, slots=True)
class StepWritten:
    """What ``complete_tasks``, ``insert_tasks`` and ``enqueue_dispatches`` would have
    answered."""

    completed: dict[str, FinishedTask]
    inserted: set[str]
    enqueued: dict[str, Enqueued]


@translated
async def write_step(
    conn: Connection,
    completions: Sequence[tuple[TaskRef, Json]],
    tasks: Sequence[NewTask],
    dispatches: Sequence[NewDispatch],
    history: Sequence[NewHistory],
) -> StepWritten:
    """``complete_tasks``, ``insert_tasks``, ``enqueue_dispatches`` and
    ``insert_history`` in one round trip (any of them may be empty)."""
    row = await conn.fetchrow(
        _STEP.sql,
        *complete_tasks_args(completions),
        *insert_tasks_args(tasks),
        *enqueue_dispatches_args(dispatches),
        *insert_history_args(history),
    )
    assert row is not None  # a SELECT of arrays answers one row

    def rows(part: str) -> list[dict[str, object]]:
        names = _STEP.columns[part]
        return [dict(zip(names, values, strict=True)) for values in row[part]]

    return StepWritten(
        {str(r["id"]): finished_task(r) for r in rows("complete_tasks")},
        {str(r["id"]) for r in rows("insert_tasks")},
        enqueued(rows("enqueue_dispatches")),
    )
