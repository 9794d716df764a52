"""Small builders shared by the repository tests."""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Iterator
from typing import Any

import composer_repo as repo
from composer_core.model import NodeType, TaskState
from composer_core.statemachine import MapProgress
from composer_repo._sql import QUERIES

_last_ms = 0
_seq = 0


def uuid7(at: dt.datetime | None = None) -> str:
    """A UUIDv7 text for ``at`` (default now), increasing within a process like real ones."""
    global _last_ms, _seq
    moment = at or dt.datetime.now(dt.UTC)
    ms = int(moment.timestamp() * 1000)
    if at is None:
        if ms <= _last_ms:
            ms, _seq = _last_ms, _seq + 1
        else:
            _seq = 0
        _last_ms = ms
    rand = int.from_bytes(os.urandom(8), "big")
    value = (ms << 80) | (0x7 << 76) | ((_seq & 0xFFF) << 64) | (0b10 << 62) | (rand >> 2)
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


SPEC = {"id": "wf", "nodes": [{"id": "a", "type": "HTTP", "spec": {"url": "https://x"}}]}


async def ensure_definition(conn: repo.Connection, workflow_id: str = "wf") -> int:
    """A deployed version of ``workflow_id`` (created on first use); returns its version."""
    try:
        return (await repo.get_definition(conn, workflow_id)).version
    except repo.NotFound:
        created = await repo.create_definition(
            conn, workflow_id, name=workflow_id, spec=SPEC, deploy=True
        )
        return created.version


async def new_run(
    conn: repo.Connection,
    workflow_id: str = "wf",
    *,
    run_id: str | None = None,
    input: object = None,
) -> str:
    version = await ensure_definition(conn, workflow_id)
    run_id = run_id or uuid7()
    await repo.insert_run(conn, run_id, workflow_id=workflow_id, version=version, input=input)
    return run_id


async def new_worker_task(
    conn: repo.Connection,
    run_id: str,
    node_id: str = "a",
    *,
    input: object = None,
    queue: str = "http",
) -> repo.TaskRef:
    """A PENDING HTTP task on ``node_id``; returns the ref of its attempt 0."""
    task_id = uuid7()
    assert await repo.insert_task(
        conn,
        run_id,
        task_id,
        node_id,
        node_type=NodeType.HTTP,
        state=TaskState.PENDING,
        input=input,
        queue=queue,
    )
    return repo.TaskRef(run_id, task_id, node_id, 0)


async def new_map_run(
    conn: repo.Connection, *, items: int, in_flight: int, sent: TaskState = TaskState.RUNNING
) -> tuple[str, list[str]]:
    """A run with a WAITING MAP node "m" of ``items`` TASK items, the first ``in_flight``
    sent (in state ``sent``), the others waiting for a place; returns the run id and the
    items' task ids."""
    run_id = await new_run(conn)
    ids = [uuid7() for _ in range(items)]
    progress = MapProgress(items, in_flight, 0, 0, tuple(range(in_flight)))
    await repo.insert_tasks(
        conn,
        [
            repo.NewTask(
                uuid7(),
                run_id,
                "m",
                NodeType.MAP,
                TaskState.WAITING,
                input={"items": list(range(items))},
                map_progress=progress.as_json(),
            ),
            *(
                repo.NewTask(
                    task_id,
                    run_id,
                    "m",
                    NodeType.TASK,
                    sent if i < in_flight else TaskState.PENDING,
                    queue="q",
                    item=i,
                    waits=i >= in_flight,
                )
                for i, task_id in enumerate(ids)
            ),
        ],
    )
    return run_id, ids


def _scans(plan: dict[str, Any], table: str) -> Iterator[dict[str, Any]]:
    if "Scan" in plan["Node Type"] and plan.get("Relation Name", "").startswith(table):
        yield plan
    for child in plan.get("Plans", []):
        yield from _scans(child, table)


async def rows_read(
    conn: repo.Connection, name: str, *args: Any, table: str = "task_instances"
) -> int:
    """The rows the scans of ``table`` (its partitions) in statement ``name`` read (kept
    or filtered out), run under EXPLAIN ANALYZE in a transaction rolled back, with the
    planner settings of the services' pools (composer_repo.INDEX_PLANS): as on a table
    too big to scan whole, the choice left is between indexes."""
    tx = conn.transaction()
    await tx.start()
    try:
        for setting, value in repo.INDEX_PLANS.items():
            await conn.execute(f"SET LOCAL {setting} = {value}")
        (row,) = await conn.fetch("EXPLAIN (ANALYZE, FORMAT JSON) " + QUERIES[name], *args)
    finally:
        await tx.rollback()
    value = row[0]
    plan = (json.loads(value) if isinstance(value, str) else value)[0]["Plan"]
    return sum(
        (
            s.get("Actual Rows", 0)
            + s.get("Rows Removed by Filter", 0)
            + s.get("Rows Removed by Index Recheck", 0)
        )
        * s.get("Actual Loops", 1)
        for s in _scans(plan, table)
    )
