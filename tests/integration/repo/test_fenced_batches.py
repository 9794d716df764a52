"""A batched fenced update reads the rows it names, however wrong the planner's estimates.

The group commit ends waits, completes attempts, publishes dispatches and finishes
runs a hundred or more at a time, each statement given its rows' keys in arrays and
a fence (the state the engine expects). On a young partition without statistics (the
first minutes of a month, a burst of timers) the planner takes the fence to match a
handful of rows, and joined in one step it scanned every row of the partition once
and compared each with every key of the batch: 100 x 1,000 comparisons a statement
in W4, 1,600 x 1,600 in W2's publish (queries.sql, "Batched fenced updates").

Here each statement runs under EXPLAIN ANALYZE on this module's fresh database, with
``ROWS`` rows in the fenced state and no statistics, and must read at most two rows
of its table per key of a batch of ``BATCH`` (one probe to find and lock, one to
write).
"""

from __future__ import annotations

import pytest

import composer_repo as repo
from composer_core.model import NodeType, TaskState

from .helpers import ensure_definition, rows_read, uuid7

ROWS = 1000
BATCH = 100


async def runs_with_one_task(conn: repo.Connection, state: TaskState) -> list[tuple[str, str]]:
    """``ROWS`` RUNNING runs, each with one task "a" in ``state``: (run id, task id)."""
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
    return list(zip(runs, tasks, strict=True))


@pytest.fixture
async def fresh(conn: repo.Connection) -> repo.Connection:
    """The connection, on tables emptied and never analysed (no statistics)."""
    await conn.execute("TRUNCATE workflow_runs, task_instances, outbox, run_history CASCADE")
    return conn


async def test_ending_waits_reads_each_wait_it_names(fresh: repo.Connection) -> None:
    pairs = (await runs_with_one_task(fresh, TaskState.WAITING))[:BATCH]
    read = await rows_read(
        fresh,
        "resolve_waits",
        [r for r, _ in pairs],
        [t for _, t in pairs],
        ["a"] * BATCH,
        [TaskState.COMPLETED.value] * BATCH,
        ["{}"] * BATCH,
        [None] * BATCH,
    )
    assert read <= 2 * BATCH


async def test_completing_attempts_reads_each_attempt_it_names(fresh: repo.Connection) -> None:
    pairs = (await runs_with_one_task(fresh, TaskState.RUNNING))[:BATCH]
    read = await rows_read(
        fresh,
        "complete_tasks",
        [r for r, _ in pairs],
        [t for _, t in pairs],
        ["a"] * BATCH,
        [0] * BATCH,
        ["{}"] * BATCH,
    )
    assert read <= 2 * BATCH


async def test_publishing_dispatches_reads_each_task_it_names(fresh: repo.Connection) -> None:
    pairs = (await runs_with_one_task(fresh, TaskState.PENDING))[:BATCH]
    read = await rows_read(
        fresh,
        "mark_published",
        [],
        [r for r, _ in pairs],
        [t for _, t in pairs],
        [0] * BATCH,
    )
    assert read <= 2 * BATCH


async def test_finishing_runs_reads_each_run_it_names(fresh: repo.Connection) -> None:
    pairs = (await runs_with_one_task(fresh, TaskState.COMPLETED))[:BATCH]
    read = await rows_read(
        fresh,
        "finish_runs",
        [r for r, _ in pairs],
        ["SUCCEEDED"] * BATCH,
        ["{}"] * BATCH,
        [None] * BATCH,
        table="workflow_runs",
    )
    assert read <= 2 * BATCH


async def test_leasing_attempts_reads_each_attempt_it_names(fresh: repo.Connection) -> None:
    pairs = (await runs_with_one_task(fresh, TaskState.QUEUED))[:BATCH]
    read = await rows_read(
        fresh,
        "acquire_leases",
        [r for r, _ in pairs],
        [t for _, t in pairs],
        [0] * BATCH,
        ["w"] * BATCH,
        [30.0] * BATCH,
        [f"token-{i}" for i in range(BATCH)],
        [""] * BATCH,
        [None] * BATCH,
        [None] * BATCH,
        [None] * BATCH,
        None,
    )
    assert read <= 2 * BATCH


async def test_renewing_leases_reads_each_lease_it_names(fresh: repo.Connection) -> None:
    pairs = (await runs_with_one_task(fresh, TaskState.RUNNING))[:BATCH]
    read = await rows_read(
        fresh,
        "renew_leases",
        [r for r, _ in pairs],
        [t for _, t in pairs],
        [0] * BATCH,
        ["w"] * BATCH,
        [30.0] * BATCH,
        [f"token-{i}" for i in range(BATCH)],
        [None] * BATCH,
    )
    assert read <= 2 * BATCH


async def test_holding_attempts_reads_each_attempt_it_names(fresh: repo.Connection) -> None:
    pairs = (await runs_with_one_task(fresh, TaskState.PENDING))[:BATCH]
    read = await rows_read(
        fresh,
        "hold_tasks",
        [r for r, _ in pairs],
        [t for _, t in pairs],
        [0] * BATCH,
        ["limit"] * BATCH,
    )
    assert read <= 2 * BATCH
