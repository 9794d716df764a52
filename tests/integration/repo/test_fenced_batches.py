"""A batched fenced update reads the rows it names, however wrong the planner's estimates.

The group commit ends waits, completes attempts, publishes dispatches and finishes
runs a hundred or more at a time, each statement given its rows' keys in arrays and
a fence (the state the engine expects). On a young partition without statistics (the
first minutes of a month, a burst of timers) the planner takes the fence to match a
handful of rows, and joined in one step it scanned every row of the partition once
and compared each with every key of the batch: 100 x 1,000 comparisons a statement
in W4, 1,600 x 1,600 in W2's publish (queries.sql, "Batched fenced updates").

Here each statement runs under EXPLAIN ANALYZE on this module's fresh database, with
``ROWS`` rows in the fenced state and no statistics, on a batch of ``BATCH`` keys
whose rows all pass the fence: it must read exactly two rows of its table per key,
one probe to find and lock the row and one to write it (so every row named is also
written).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

import composer_repo as repo
from composer_core.model import NodeType, TaskState

from .helpers import ensure_definition, rows_read, uuid7

ROWS = 1000
BATCH = 100

#: (run ids, task ids) of the batch -> the statement's arguments.
Arguments = Callable[[list[str], list[str]], tuple[Any, ...]]


def each(value: object) -> list[object]:
    """``value`` for every key of the batch."""
    return [value] * BATCH


def tokens() -> list[str]:
    return [f"token-{i}" for i in range(BATCH)]


@dataclass(frozen=True)
class Case:
    statement: str
    #: The state the statement's fence expects of the batch's tasks.
    state: TaskState
    arguments: Arguments
    table: str = "task_instances"
    #: The batch's attempts are leased first (to owner "w", under ``tokens()``).
    leased: bool = False


CASES = [
    Case(
        "resolve_waits",
        TaskState.WAITING,
        lambda runs, tasks: (runs, tasks, each("a"), each("COMPLETED"), each("{}"), each(None)),
    ),
    Case(
        "complete_tasks",
        TaskState.RUNNING,
        lambda runs, tasks: (runs, tasks, each("a"), each(0), each("{}")),
    ),
    Case("mark_published", TaskState.PENDING, lambda runs, tasks: ([], runs, tasks, each(0))),
    Case(
        "finish_runs",
        TaskState.COMPLETED,
        lambda runs, _: (runs, each("SUCCEEDED"), each("{}"), each(None)),
        table="workflow_runs",
    ),
    Case(
        "acquire_leases",
        TaskState.QUEUED,
        lambda runs, tasks: (
            runs,
            tasks,
            each(0),
            each("w"),
            each(30.0),
            tokens(),
            each(""),
            each(None),
            each(None),
            each(None),
            None,
        ),
    ),
    Case(
        "renew_leases",
        TaskState.QUEUED,
        lambda runs, tasks: (runs, tasks, each(0), each("w"), each(30.0), tokens(), each(None)),
        leased=True,
    ),
    Case(
        "hold_tasks",
        TaskState.PENDING,
        lambda runs, tasks: (runs, tasks, each(0), each("limit")),
    ),
]


async def runs_with_one_task(
    conn: repo.Connection, state: TaskState
) -> tuple[list[str], list[str]]:
    """``ROWS`` RUNNING runs, each with one task "a" in ``state``: their ids, the tasks'."""
    version = await ensure_definition(conn)
    runs = [uuid7() for _ in range(ROWS)]
    await repo.insert_runs(conn, [repo.NewRun(r, "wf", version) for r in runs])
    tasks = [uuid7() for _ in runs]
    node_type = NodeType.WAIT if state is TaskState.WAITING else NodeType.TASK
    await repo.insert_tasks(
        conn,
        [
            repo.NewTask(t, r, "a", node_type, state, queue="q")
            for r, t in zip(runs, tasks, strict=True)
        ],
    )
    return runs, tasks


@pytest.fixture
async def fresh(conn: repo.Connection) -> repo.Connection:
    """The connection, on tables emptied and never analysed (no statistics)."""
    await conn.execute("TRUNCATE workflow_runs, task_instances, outbox, run_history CASCADE")
    return conn


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.statement)
async def test_a_batched_fenced_update_reads_each_row_it_names_twice(
    fresh: repo.Connection, case: Case
) -> None:
    runs, tasks = await runs_with_one_task(fresh, case.state)
    runs, tasks = runs[:BATCH], tasks[:BATCH]
    if case.leased:
        leases = await repo.acquire_leases(
            fresh,
            [
                repo.LeaseRequest(r, t, 0, "w", 30.0, token)
                for r, t, token in zip(runs, tasks, tokens(), strict=True)
            ],
        )
        assert all(leases)

    read = await rows_read(fresh, case.statement, *case.arguments(runs, tasks), table=case.table)

    assert read == 2 * BATCH
