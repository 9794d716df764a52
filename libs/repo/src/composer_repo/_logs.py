"""Task logs: the lines each worker attempt logged, one row per reported attempt."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from composer_repo._db import Connection, translated
from composer_repo._sql import q


@dataclass(frozen=True, slots=True)
class NewTaskLog:
    """An attempt's log to insert (``insert_task_logs``)."""

    run_id: str
    task_id: str
    node_id: str
    attempt: int
    #: The lines joined by newlines, as stored (sealed when the run is).
    lines: str
    #: How many lines the worker dropped past its bound.
    truncated: int = 0


@dataclass(frozen=True, slots=True)
class TaskLogRecord:
    """An attempt's log as stored: ``lines`` may be sealed (open it before showing)."""

    task_id: str
    node_id: str
    attempt: int
    lines: str
    truncated: int
    created_at: dt.datetime


@translated
async def insert_task_logs(conn: Connection, logs: Sequence[NewTaskLog]) -> None:
    """Write the logs of many attempts in one statement (an attempt that has its row
    already keeps it)."""
    if not logs:
        return
    await conn.execute(q("insert_task_logs"), *insert_task_logs_args(logs))


def insert_task_logs_args(logs: Sequence[NewTaskLog]) -> tuple[Any, ...]:
    """The parameters of ``insert_task_logs`` (and of ``together`` statements holding it)."""
    return (
        [log.run_id for log in logs],
        [log.task_id for log in logs],
        [log.node_id for log in logs],
        [log.attempt for log in logs],
        [log.lines for log in logs],
        [log.truncated for log in logs],
    )


@translated
async def get_task_logs(
    conn: Connection, run_id: str, *, node_id: str | None = None
) -> list[TaskLogRecord]:
    """A run's attempt logs (of one node, or all), oldest report first."""
    rows = await conn.fetch(q("get_task_logs"), run_id, node_id)
    return [
        TaskLogRecord(
            r["task_id"], r["node_id"], r["attempt"], r["lines"], r["truncated"], r["created_at"]
        )
        for r in rows
    ]
