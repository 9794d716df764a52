"""Every statement's generic plan reads the run tables by key, even made on empty
partitions.

The pooled connections plan each prepared statement once, without its values
(``plan_cache_mode = force_generic_plan`` in ``repo.INDEX_PLANS``), and keep the
plan up to ``COMPOSER_DB_PLAN_SECONDS``: one made while a month's partitions are
empty (a new install, a new month) runs while they fill. Such a plan once walked a
whole index of the month for ``run_id = ANY($1) AND item IS NULL``: without the ids
the planner assumes ten of them, and ten probes cost more than walking an empty
index. Here each statement is planned generically on this module's empty database,
and every scan of a run table must find its rows through an index condition on a
value of the statement (a parameter, or a row it joins), or be one of the partial
indexes whose rows are few by design (docs/architecture.md §5, "Plans are generic").
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import composer_repo as repo
from composer_repo._sql import QUERIES, parameters, together

#: The tables whose partitions grow with every run.
RUN_TABLES = ("task_instances", "workflow_runs", "run_history", "task_logs")

#: Indexes read whole on purpose: partial, over the few rows they exist to find.
SMALL_BY_DESIGN = {
    "dispatched_at_idx": "the attempts in flight (the sweeper, queue loads)",
    "limit_key_created_at_idx": "the tasks held for a concurrency key",
    "limit_key_idx": "the tasks held for a concurrency key",
    "rate_key_created_at_idx": "the tasks held for a rate limit",
    "status_id_idx": "the runs of one status, PAUSED here (the timer passes them over)",
    # next_wake_at walks it in order, generic or not, and stops at the first timer
    "wake_at_idx": "the pending timers",
}

#: The statements composed of named ones (``repo.write_step``), planned as they run.
COMPOSED = {
    "write_step (a report's)": together(
        "complete_tasks",
        (("insert_tasks", True), ("insert_history", False), ("insert_task_logs", False)),
    ),
    "write_step (a start's)": together(
        "insert_tasks", (("insert_history", False), ("enqueue_dispatches", True))
    ),
}

#: A condition names a value of the statement: a parameter, or a column of another
#: relation of the plan (``u.run_id``, ``(f.id)::text``).
NAMES_A_VALUE = re.compile(r"\$\d+|\b[a-z]\w*\.\w+")


def scans(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    if plan["Node Type"].endswith("Scan"):
        yield plan
    for child in plan.get("Plans", []):
        yield from scans(child)


def by_key(scan: dict[str, Any], relation: str) -> bool:
    if scan["Node Type"] == "Seq Scan":
        return False
    if scan["Node Type"] == "Bitmap Heap Scan":  # its index scans say how it finds rows
        return any(
            by_key(index, relation)
            for index in scans(scan)
            if index["Node Type"] == "Bitmap Index Scan"
        )
    condition = scan.get("Index Cond") or ""
    own = f"{relation}."  # the scanned table's own columns are no value of the statement
    names = [m for m in NAMES_A_VALUE.findall(condition) if not m.startswith(own)]
    index = scan.get("Index Name", "")
    return bool(names) or any(index.endswith(suffix) for suffix in SMALL_BY_DESIGN)


async def generic_plan(conn: repo.Connection, sql: str) -> dict[str, Any]:
    count = parameters(sql)
    await conn.execute(f"PREPARE generic AS {sql}")
    try:
        # a generic plan is the same whatever the values: NULLs stand in for them
        values = f"({', '.join(['NULL'] * count)})" if count else ""
        (row,) = await conn.fetch(f"EXPLAIN (FORMAT JSON) EXECUTE generic{values}")
    finally:
        await conn.execute("DEALLOCATE generic")
    value = row[0]
    plan: dict[str, Any] = (json.loads(value) if isinstance(value, str) else value)[0]["Plan"]
    return plan


async def test_every_statements_generic_plan_on_empty_partitions_reads_by_key(
    conn: repo.Connection,
) -> None:
    for setting, value in repo.INDEX_PLANS.items():
        await conn.execute(f"SET {setting} = {value}")
    assert await conn.fetchval("SHOW plan_cache_mode") == "force_generic_plan"
    planned, walks = 0, []
    for name, sql in [*sorted(QUERIES.items()), *COMPOSED.items()]:
        if not re.match(r"(\s*--[^\n]*\n)*\s*(WITH|SELECT|INSERT|UPDATE|DELETE)\b", sql):
            continue  # DDL and the migrations' helpers: nothing to plan
        planned += 1
        for scan in scans(await generic_plan(conn, sql)):
            relation = scan.get("Relation Name", "")
            if relation.startswith(RUN_TABLES) and not by_key(scan, scan.get("Alias", relation)):
                walks.append(
                    f"{name}: {scan['Node Type']} of {relation} "
                    f"({scan.get('Index Name', 'no index')}, {scan.get('Index Cond', 'no condition')})"
                )
    assert planned > 100
    assert walks == [], "\n".join(walks)
