"""A pooled connection's plans are made again as its tables grow.

PostgreSQL keeps the generic plan of a prepared statement until the statistics of
its tables change (ANALYZE). asyncpg prepares each statement once per connection, so
a plan made while this month's partitions were nearly empty (a new install, a new
month, a server whose autovacuum has not come round yet) scanned them whole as they
filled: on W1 the lease statement took 7.1 ms a call. ``create_pool`` has each
connection prepare a statement again ``plan_seconds`` after it first did
(COMPOSER_DB_PLAN_SECONDS); the new plan sees the table's present size and probes
the primary key. And with ``index_plans`` (the default, COMPOSER_DB_INDEX_PLANS)
the plan made on the nearly empty partition probes it from the start.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterator
from typing import Any

import composer_repo as repo
from composer_core.model import NodeType, TaskState
from composer_repo._sql import QUERIES

from .helpers import new_run, uuid7

#: Task rows the partition grows by after the first plan was made.
GROWTH = 20_000
PLAN_SECONDS = 1


def scans(plan: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """The plan's scans of task_instances partitions: (partition, node type)."""
    if "Scan" in plan["Node Type"] and plan.get("Relation Name", "").startswith("task_instances"):
        yield plan["Relation Name"], plan["Node Type"]
    for child in plan.get("Plans", []):
        yield from scans(child)


async def prepared(conn: repo.Connection, statement: str) -> tuple[str, float] | None:
    """The connection's prepared statement of ``statement`` (asyncpg's name), with
    when it was prepared (the server's clock, epoch seconds)."""
    row = await conn.fetchrow(
        "SELECT name, extract(epoch FROM prepare_time)::float8 AS at"
        " FROM pg_prepared_statements WHERE statement = $1 ORDER BY prepare_time DESC LIMIT 1",
        statement,
    )
    return None if row is None else (row["name"], row["at"])


async def plan_scans(conn: repo.Connection, name: str, args: list[Any]) -> dict[str, str]:
    """How the prepared statement ``name``'s plan reads each task_instances partition."""
    # EXECUTE takes no parameters: array literals of the test's plain values
    params = ", ".join("'{" + ",".join(f'"{v}"' for v in values) + "}'" for values in args)
    # EXECUTE runs the prepared statement as it is cached: its generic plan, once chosen
    (row,) = await conn.fetch(f"EXPLAIN (FORMAT JSON) EXECUTE {name}({params})")
    value = row[0]
    plan = (json.loads(value) if isinstance(value, str) else value)[0]["Plan"]
    return dict(scans(plan))


async def test_a_statements_plan_is_made_again_after_plan_seconds(
    conn: repo.Connection, database_url: str
) -> None:
    run_id = await new_run(conn)
    partition = await conn.fetchval(
        "SELECT tableoid::regclass::text FROM workflow_runs WHERE id = $1", run_id
    )
    partition = partition.replace("workflow_runs", "task_instances")
    await conn.execute("ANALYZE task_instances")  # statistics of a nearly empty table
    statement = QUERIES["complete_tasks"]
    # a completion that matches no row: the statement runs, nothing changes
    args: list[Any] = [[run_id], [uuid7()], ["a"], [0], ["{}"]]
    # PostgreSQL's own planner settings: the plan's age alone
    pool = await repo.create_pool(
        database_url, min_size=1, max_size=1, plan_seconds=PLAN_SECONDS, index_plans=False
    )
    try:
        async with pool.acquire() as pooled:
            for _ in range(8):  # past PostgreSQL's five custom plans: the generic one is kept
                assert await pooled.fetch(statement, *args) == []
            first = await prepared(pooled, statement)
            assert first is not None
            # the plan made on the nearly empty partition reads it whole, and would go on
            # doing so as it grows (what the setting is for)
            assert (await plan_scans(pooled, first[0], args))[partition] == "Seq Scan"
            await repo.insert_tasks(
                conn,
                [
                    repo.NewTask(uuid7(), run_id, f"n{i}", NodeType.TASK, TaskState.COMPLETED)
                    for i in range(GROWTH)
                ],
            )

            deadline = time.monotonic() + 30 * PLAN_SECONDS
            again: tuple[str, float] | None = first
            while again == first or again is None:
                assert time.monotonic() < deadline, "the statement was not prepared again"
                assert await pooled.fetch(statement, *args) == []
                again = await prepared(pooled, statement)
            assert again[1] > first[1]
            for _ in range(8):
                assert await pooled.fetch(statement, *args) == []
            # made again, the plan probes the grown partition's primary key
            assert (await plan_scans(pooled, again[0], args))[partition] == "Index Scan"
    finally:
        await pool.close()


async def test_with_index_plans_the_plan_made_on_a_nearly_empty_partition_probes_it(
    conn: repo.Connection, database_url: str
) -> None:
    # a run two months ahead: its partition holds the few rows tests put there
    ahead = dt.datetime.now(dt.UTC) + dt.timedelta(days=62)
    run_id = await new_run(conn, run_id=uuid7(ahead))
    partition = await conn.fetchval(
        "SELECT tableoid::regclass::text FROM workflow_runs WHERE id = $1", run_id
    )
    partition = partition.replace("workflow_runs", "task_instances")
    await conn.execute("ANALYZE task_instances")  # statistics of a nearly empty table
    # the statements that scanned the month's partition whole on W1 (the completions,
    # the publisher's deletions), each matching no row here
    cases: list[tuple[str, list[Any]]] = [
        ("complete_tasks", [[run_id], [uuid7()], ["a"], [0], ["{}"]]),
        ("mark_published", [[0], [run_id], [uuid7()], [0]]),
    ]

    async def plans(index_plans: bool) -> dict[str, str]:
        """How each statement's kept plan reads the partition."""
        pool = await repo.create_pool(
            database_url, min_size=1, max_size=1, plan_seconds=0, index_plans=index_plans
        )
        try:
            async with pool.acquire() as pooled:
                found = {}
                for name, args in cases:
                    statement = QUERIES[name]
                    for _ in range(8):  # past the five custom plans: the generic one is kept
                        await pooled.execute(statement, *args)
                    made = await prepared(pooled, statement)
                    assert made is not None
                    found[name] = (await plan_scans(pooled, made[0], args))[partition]
                return found
        finally:
            await pool.close()

    # PostgreSQL's defaults scan the small partition whole, and would go on doing so
    # as it grows; index plans probe it from the start
    assert await plans(index_plans=False) == dict.fromkeys(dict(cases), "Seq Scan")
    assert await plans(index_plans=True) == dict.fromkeys(dict(cases), "Index Scan")


async def test_with_index_plans_a_statement_that_reads_a_table_whole_is_not_jit_compiled(
    conn: repo.Connection, database_url: str
) -> None:
    """``unserved_queues`` reads ``workers`` whole (no index serves ``= ANY(queues)``):
    the cost the settings add to that read put it past ``jit_above_cost``, and each
    call spent 150-750 ms compiling until INDEX_PLANS turned JIT off."""
    run_id = await new_run(conn)
    pool = await repo.create_pool(database_url, min_size=1, max_size=1)
    try:
        async with pool.acquire() as pooled:
            (row,) = await pooled.fetch(
                "EXPLAIN (ANALYZE, FORMAT JSON) " + QUERIES["unserved_queues"], run_id, 30.0
            )
    finally:
        await pool.close()
    value = row[0]
    explained = (json.loads(value) if isinstance(value, str) else value)[0]
    assert explained["Plan"]["Total Cost"] > 100_000  # past jit_above_cost's default
    assert "JIT" not in explained
