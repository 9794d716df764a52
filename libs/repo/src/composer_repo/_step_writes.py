"""The held writes of a transaction that go in one round trip.

A worker's report, flushed alone, took a statement each for the attempt it
completes, the task it creates, the history rows and the attempt's log, and a
start one for its tasks, its history and its dispatches' outbox rows: round
trips of the caller's loop and a database backend, each a wake-up of both
(docs/architecture.md §3, step 19). These touch different rows and read
nothing another writes, so they go together as one statement (``_sql.together``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from composer_core.templates import Json
from composer_repo._db import Connection, translated
from composer_repo._history import NewHistory, insert_history_args
from composer_repo._logs import NewTaskLog, insert_task_logs_args
from composer_repo._outbox import Enqueued, enqueue_dispatches_args, enqueued
from composer_repo._records import FinishedTask, NewDispatch, NewTask, TaskRef
from composer_repo._sql import TOGETHER_ROW, together
from composer_repo._tasks import complete_tasks_args, completed, insert_tasks_args
from composer_repo._tx import note_transaction_id


@dataclass(frozen=True, slots=True)
class StepWritten:
    """What ``write_step`` wrote: the attempts completed (by task id, as
    ``complete_tasks``), the ids of the tasks inserted (as ``insert_tasks``) and the
    dispatches' outbox rows (by task id, as ``enqueue_dispatches``)."""

    completed: dict[str, FinishedTask]
    inserted: set[str]
    enqueued: dict[str, Enqueued] = field(default_factory=dict)


@translated
async def write_step(
    conn: Connection,
    *,
    completions: Sequence[tuple[TaskRef, Json]],
    tasks: Sequence[NewTask],
    history: Sequence[NewHistory],
    logs: Sequence[NewTaskLog],
    dispatches: Sequence[NewDispatch] = (),
) -> StepWritten:
    """``complete_tasks``, ``insert_tasks``, ``insert_history``, ``insert_task_logs``
    and ``enqueue_dispatches`` in one statement; at least one of ``completions`` and
    ``tasks`` must be given. History rows keep their order (``seq``). The
    transaction's id, when a write gave it one, is noted for ``tracked_transaction``."""
    if not completions and not tasks:
        raise ValueError("write_step needs completions or tasks: its statement returns theirs")
    main, main_args = (
        ("complete_tasks", complete_tasks_args(completions))
        if completions
        else ("insert_tasks", insert_tasks_args(tasks))
    )
    sides: list[tuple[str, bool]] = []
    args: list[Any] = list(main_args)

    def side(name: str, returns: bool, side_args: tuple[Any, ...]) -> str:
        sides.append((name, returns))
        args.extend(side_args)
        return f"side_{len(sides) - 1}"

    inserting = (
        side("insert_tasks", True, insert_tasks_args(tasks)) if completions and tasks else None
    )
    if history:
        side("insert_history", False, insert_history_args(history))
    if logs:
        side("insert_task_logs", False, insert_task_logs_args(logs))
    enqueuing = (
        side("enqueue_dispatches", True, enqueue_dispatches_args(dispatches))
        if dispatches
        else None
    )
    rows = await conn.fetch(together(main, tuple(sides)), *args)
    mains = [r for r in rows if r[TOGETHER_ROW]]
    (answers,) = [r for r in rows if not r[TOGETHER_ROW]]
    note_transaction_id(conn, answers["xid"])
    enqueued_rows = (answers[enqueuing] or ()) if enqueuing else ()
    if not completions:
        return StepWritten({}, {r["id"] for r in mains}, enqueued(enqueued_rows))
    inserted = {id_ for (id_,) in answers[inserting] or ()} if inserting else set()
    return StepWritten(completed(mains), inserted, enqueued(enqueued_rows))
