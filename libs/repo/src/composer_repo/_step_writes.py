"""The held writes of a transaction that go in one round trip.

A worker's report, flushed alone, took a statement each for the attempt it
completes, the task it creates, the history rows and the attempt's log: four
round trips of the coordinator's loop and a database backend, each a wake-up
of both, on the path from one handler to the next (docs/architecture.md §3,
step 19). These four touch different rows and read nothing another writes, so
they go together as one statement (``_sql.together``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from composer_core.templates import Json
from composer_repo._db import Connection, translated
from composer_repo._history import NewHistory, insert_history_args
from composer_repo._logs import NewTaskLog, insert_task_logs_args
from composer_repo._records import FinishedTask, NewTask, TaskRef
from composer_repo._sql import TOGETHER_ROW, together
from composer_repo._tasks import complete_tasks_args, completed, insert_tasks_args


@dataclass(frozen=True, slots=True)
class StepWritten:
    """What ``write_step`` wrote: the attempts completed (by task id, as
    ``complete_tasks``) and the ids of the tasks inserted (as ``insert_tasks``)."""

    completed: dict[str, FinishedTask]
    inserted: set[str]


@translated
async def write_step(
    conn: Connection,
    *,
    completions: Sequence[tuple[TaskRef, Json]],
    tasks: Sequence[NewTask],
    history: Sequence[NewHistory],
    logs: Sequence[NewTaskLog],
) -> StepWritten:
    """``complete_tasks``, ``insert_tasks``, ``insert_history`` and
    ``insert_task_logs`` in one statement; at least one of ``completions`` and
    ``tasks`` must be given. History rows keep their order (``seq``)."""
    if not completions and not tasks:
        raise ValueError("write_step needs completions or tasks: its statement returns theirs")
    main, main_args = (
        ("complete_tasks", complete_tasks_args(completions))
        if completions
        else ("insert_tasks", insert_tasks_args(tasks))
    )
    sides: list[tuple[str, bool]] = []
    args: list[Any] = list(main_args)
    if completions and tasks:
        sides.append(("insert_tasks", True))
        args += insert_tasks_args(tasks)
    if history:
        sides.append(("insert_history", False))
        args += insert_history_args(history)
    if logs:
        sides.append(("insert_task_logs", False))
        args += insert_task_logs_args(logs)
    rows = await conn.fetch(together(main, tuple(sides)), *args)
    mains = [r for r in rows if r[TOGETHER_ROW]]
    if not completions:
        return StepWritten({}, {r["id"] for r in mains})
    inserted = rows[0]["side_0"] if tasks else None
    return StepWritten(completed(mains), set(inserted or ()))
