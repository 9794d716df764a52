"""A MAP item's statements read its own row, never its run's other items.

A MAP of n items is a run of n + 1 task rows. Each statement that touches items by
(run id, task id) — a batch of leases, of completions, of items that go, the group
commit's snapshot — must take its rows by the primary key (or by item index), one
probe each: an index scan on the run id alone would read all n rows for every item,
which the planner chooses as soon as its statistics say runs are small (most are),
so a MAP's item would cost n times a FORK branch (docs/architecture.md §2, "MAP").

Each statement runs here under EXPLAIN ANALYZE (in a transaction rolled back) on a
database whose statistics were taken over many one-task runs, with a MAP of ``ITEMS``
items beside them; the rows its task_instances scans read (kept or filtered out) must
stay within a few per item it touches.
"""

from __future__ import annotations

import secrets

import pytest

import composer_repo as repo
from composer_core.model import NodeType, TaskState

from .helpers import new_map_run, new_run, rows_read, uuid7

ITEMS = 300
BATCH = 20
SMALL_RUNS = 2000


@pytest.fixture
async def small_runs(conn: repo.Connection) -> None:
    """Statistics taken over many runs of one task each: the planner thinks a run small
    (and the table is too big for a scan of it to be cheaper than probes)."""
    runs = [await new_run(conn) for _ in range(SMALL_RUNS)]
    await repo.insert_tasks(
        conn,
        [
            repo.NewTask(uuid7(), run_id, "a", NodeType.TASK, TaskState.COMPLETED, queue="q")
            for run_id in runs
        ],
    )
    await conn.execute("ANALYZE task_instances")


async def test_leasing_and_completing_items_read_one_row_each(
    conn: repo.Connection, small_runs: None
) -> None:
    run_id, ids = await new_map_run(conn, items=ITEMS, in_flight=ITEMS, sent=TaskState.QUEUED)
    batch = ids[100 : 100 + BATCH]
    runs = [run_id] * BATCH
    lease = await rows_read(
        conn,
        "acquire_leases",
        runs,
        batch,
        [0] * BATCH,
        ["w"] * BATCH,
        [30.0] * BATCH,
        [secrets.token_hex(8) for _ in batch],
        [""] * BATCH,
        [None] * BATCH,
        [None] * BATCH,
        [None] * BATCH,
        16 * 1024,  # as a report's own transaction leases (engine/_reports.py)
    )
    complete = await rows_read(
        conn, "complete_tasks", runs, batch, ["m"] * BATCH, [0] * BATCH, ["{}"] * BATCH
    )

    # a lease and a completion find and lock each row, then write it: two probes
    # (queries.sql, "Batched fenced updates"), the second only for a row granted
    assert (lease, complete) == (2 * BATCH, 2 * BATCH)


async def test_items_that_go_and_the_group_commits_snapshot_read_what_they_name(
    conn: repo.Connection, small_runs: None
) -> None:
    run_id, ids = await new_map_run(conn, items=ITEMS, in_flight=100)
    waiting = ids[100 : 100 + BATCH]
    reported = ids[:BATCH]

    start = await rows_read(conn, "start_items", [run_id] * BATCH, waiting)
    snapshot = await rows_read(conn, "load_task_states_of_runs", [run_id]) + await rows_read(
        conn, "load_map_items_of_runs", [run_id], [run_id] * BATCH, reported
    )

    assert start <= 2 * BATCH  # a probe to lock each item, one to write it
    # the MAP's own row, the reported items and as many of the next (each read twice
    # at most: once by the run's MAP row, once by its own probe)
    assert snapshot <= 2 * (1 + 2 * BATCH)
