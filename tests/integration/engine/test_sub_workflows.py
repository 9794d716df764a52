"""SUB_WORKFLOW nodes in the engine, on PostgreSQL: each attempt writes its child run
with its own transaction and starts it under the child's lock, so there is exactly
one child per attempt, whatever dies between the parent's commit and the child's
start (docs/architecture.md §4.13). The API's view is in tests/integration/e2e."""

from __future__ import annotations

import asyncio
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import composer_queue as cq
import composer_repo as repo
from composer_core.model import RunStatus, TaskState
from composer_engine import Engine, Workflows, validate_definition
from composer_outbox_enqueuer.loop import Enqueuer
from tests.integration.waits import until

START_PARENT = Path(__file__).with_name("start_parent.py")

PARENT = {
    "id": "sw-parent",
    "output": {"child": "{{tasks.call.output}}"},
    "nodes": [
        {
            "id": "call",
            "type": "SUB_WORKFLOW",
            "spec": {"workflow": "sw-child", "input": {"n": "{{input.n}}"}},
        }
    ],
}
#: A MAP of 3 SUB_WORKFLOW items, 2 at once: each item's attempt starts one sw-child.
MAP_PARENT = {
    "id": "sw-map-parent",
    "output": {"children": "{{tasks.lines.output}}"},
    "nodes": [
        {
            "id": "lines",
            "type": "MAP",
            "spec": {
                "items": "{{input.ns}}",
                "max_parallel": 2,
                "node": {
                    "type": "SUB_WORKFLOW",
                    "spec": {"workflow": "sw-child", "input": {"n": "{{item}}"}},
                },
            },
        }
    ],
}
CHILD = {
    "id": "sw-child",
    "output": {"doubled": "{{tasks.work.output.doubled}}"},
    "nodes": [{"id": "work", "type": "TASK", "queue": "sw-kids", "spec": {"n": "{{input.n}}"}}],
}


#: A child with a priority of its own, rendered from its input, and its parent.
RANKED_CHILD = {
    "id": "sw-ranked-child",
    "priority": "{{input.p}}",
    "nodes": [{"id": "work", "type": "TASK", "queue": "sw-kids", "spec": {}}],
}
#: A parent whose child starts after a worker's node: it can be paused before.
LATE_PARENT = {
    "id": "sw-late-parent",
    "nodes": [
        {"id": "first", "type": "TASK", "queue": "sw-first", "spec": {}},
        {"id": "call", "type": "SUB_WORKFLOW", "spec": {"workflow": "sw-child", "input": {"n": 1}}},
        {
            "id": "loose",
            "type": "SUB_WORKFLOW",
            "spec": {"workflow": "sw-child", "input": {"n": 2}, "on_parent_cancel": "abandon"},
        },
    ],
    "edges": [{"from": "first", "to": "call"}, {"from": "first", "to": "loose"}],
}
RANKED_PARENT = {
    "id": "sw-ranked-parent",
    "nodes": [
        {
            "id": "call",
            "type": "SUB_WORKFLOW",
            "spec": {"workflow": "sw-ranked-child", "input": {"p": 1}},
        }
    ],
}


@pytest.fixture
async def engine(pool: repo.Pool) -> AsyncIterator[Engine]:
    workflows = Workflows(pool)
    for spec in (CHILD, PARENT, MAP_PARENT, RANKED_CHILD, RANKED_PARENT, LATE_PARENT):
        await workflows.create(validate_definition(spec), deploy=True)
    e = Engine(pool)
    try:
        yield e
    finally:
        await e.aclose()


async def children(pool: repo.Pool, run_id: str) -> list[repo.ChildSummary]:
    async with repo.connection(pool) as conn:
        return await repo.run_children(conn, run_id)


async def run(pool: repo.Pool, run_id: str) -> repo.RunRecord:
    async with repo.connection(pool) as conn:
        return await repo.get_run(conn, run_id)


async def task(pool: repo.Pool, run_id: str, node_id: str) -> repo.TaskRecord | None:
    async with repo.connection(pool) as conn:
        return {t.node_id: t for t in await repo.get_run_tasks(conn, run_id)}.get(node_id)


async def one_child_running(pool: repo.Pool, parent: str) -> repo.ChildSummary:
    async def started() -> bool:
        kids = await children(pool, parent)
        return bool(kids) and kids[-1].status is RunStatus.RUNNING

    await until(started, what="the child started")
    return (await children(pool, parent))[-1]


async def finish_work(engine: Engine, pool: repo.Pool, child: str, output: object) -> None:
    work = await task(pool, child, "work")
    assert work is not None
    assert await engine.report_completed(child, work.task_id, "work", 0, output)


async def test_the_child_s_output_is_the_node_s(engine: Engine, pool: repo.Pool) -> None:
    parent = (await engine.start("sw-parent", input={"n": 21})).run_id
    child = await one_child_running(pool, parent)
    node = await task(pool, parent, "call")
    assert node is not None and node.state is TaskState.RUNNING
    assert (child.node_id, child.task_id, child.attempt) == ("call", node.task_id, 0)
    assert (await run(pool, child.run_id)).input == {"n": 21}
    assert (await run(pool, child.run_id)).parent == repo.ParentRef(parent, "call", node.task_id, 0)

    await finish_work(engine, pool, child.run_id, {"doubled": 42})

    await until(lambda: _status(pool, parent, RunStatus.SUCCEEDED), what="parent succeeded")
    assert (await run(pool, parent)).output == {"child": {"doubled": 42}}


async def test_a_child_run_has_its_own_workflow_s_priority(engine: Engine, pool: repo.Pool) -> None:
    parent = (await engine.start("sw-ranked-parent")).run_id
    child = await one_child_running(pool, parent)

    async with repo.connection(pool) as conn:
        priority = await conn.fetchval(
            "SELECT priority FROM workflow_runs WHERE id = $1", child.run_id
        )
        message = await conn.fetchval(
            "SELECT payload FROM outbox WHERE run_id = $1 AND kind = 'dispatch'", child.run_id
        )
    assert priority == 1  # rendered as its start was applied (docs §4.16)
    assert message["priority"] == "1"  # its task goes to band 1


async def _status(pool: repo.Pool, run_id: str, status: RunStatus) -> bool:
    return (await run(pool, run_id)).status is status


async def test_a_parent_killed_after_its_commit_has_exactly_one_child(
    engine: Engine, pool: repo.Pool, database_url: str, redis_url: str
) -> None:
    """The process that starts the parent commits (the child written PENDING with it)
    and dies before it delivers the child's start: a deliverer (here, the enqueuer and
    another engine) starts that child, once; no other is ever written."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(START_PARENT), database_url, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert line.startswith(b"committed "), line
        parent = line.split()[1].decode()
    finally:
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    (child,) = await children(pool, parent)
    assert child.status is RunStatus.PENDING  # written with the parent, not started
    assert await task(pool, child.run_id, "work") is None

    queue = cq.connect(redis_url)
    stop = asyncio.Event()
    prefix = f"t{uuid.uuid4().hex[:8]}"
    fallback = Engine(pool, redis=queue, redis_prefix=prefix)
    enqueuer = Enqueuer(
        fallback, queue, prefix=prefix, grace=0.2, poll_seconds=0.05, run_events=True
    )
    loop = asyncio.create_task(enqueuer.run(stop))
    try:
        # another deliverer races the enqueuer for the same start: it applies once
        async with repo.connection(pool) as conn:
            (start,) = await repo.due_run_events(conn, limit=10, grace=0)
        await engine.deliver_run_event(start)
        await until(lambda: _status(pool, child.run_id, RunStatus.RUNNING), what="child started")
        await finish_work(engine, pool, child.run_id, {"doubled": 2})
        await until(lambda: _status(pool, parent, RunStatus.SUCCEEDED), what="parent succeeded")
    finally:
        stop.set()
        await loop
        await fallback.aclose()
        await queue.close()
    assert [c.run_id for c in await children(pool, parent)] == [child.run_id]
    async with repo.connection(pool) as conn:
        started = await conn.fetchval(
            "SELECT count(*) FROM run_history WHERE run_id = $1 AND kind = 'run.started'",
            child.run_id,
        )
    assert started == 1


async def test_a_map_parent_killed_after_its_commit_has_exactly_one_child_per_item(
    engine: Engine, pool: repo.Pool, database_url: str, redis_url: str
) -> None:
    """The same kill for a MAP of SUB_WORKFLOWs: its first 2 items' children are written
    with the MAP's commit and the process dies before it starts them; the enqueuer
    starts each once, the third item's child follows as a place frees, and the MAP's
    output is theirs in item order — 3 children in all, each started once."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(START_PARENT),
        database_url,
        "sw-map-parent",
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert line.startswith(b"committed "), line
        parent = line.split()[1].decode()
    finally:
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    first = await children(pool, parent)
    assert [c.status for c in first] == [RunStatus.PENDING] * 2  # written, not started

    queue = cq.connect(redis_url)
    stop = asyncio.Event()
    prefix = f"t{uuid.uuid4().hex[:8]}"
    fallback = Engine(pool, redis=queue, redis_prefix=prefix)
    enqueuer = Enqueuer(
        fallback, queue, prefix=prefix, grace=0.2, poll_seconds=0.05, run_events=True
    )
    loop = asyncio.create_task(enqueuer.run(stop))
    try:
        done: set[str] = set()

        async def finish_started() -> bool:
            for child in await children(pool, parent):
                if child.run_id in done or child.status is not RunStatus.RUNNING:
                    continue
                async with repo.connection(pool) as conn:
                    n = (await repo.get_run(conn, child.run_id)).input["n"]
                await finish_work(engine, pool, child.run_id, {"doubled": 2 * n})
                done.add(child.run_id)
            return await _status(pool, parent, RunStatus.SUCCEEDED)

        await until(finish_started, timeout=30, what="every child finished, the parent succeeded")
    finally:
        stop.set()
        await loop
        await fallback.aclose()
        await queue.close()
    final = await run(pool, parent)
    assert final.output == {"children": [{"doubled": 2}, {"doubled": 4}, {"doubled": 6}]}
    kids = await children(pool, parent)
    assert len(kids) == 3 and {k.attempt for k in kids} == {0}
    assert {k.run_id for k in first} <= {k.run_id for k in kids}
    async with repo.connection(pool) as conn:
        started = await conn.fetchval(
            "SELECT count(*) FROM run_history WHERE run_id = ANY($1::text[]) "
            "AND kind = 'run.started'",
            [k.run_id for k in kids],
        )
        item_tasks = await conn.fetchval(
            "SELECT count(DISTINCT parent_task_id) FROM workflow_runs WHERE parent_run_id = $1",
            parent,
        )
    assert started == 3
    assert item_tasks == 3  # each child's parent ref names its own item's task


async def _paused_with_children_written(engine: Engine, pool: repo.Pool) -> str:
    """A LATE_PARENT run paused while its first node's attempt is with a worker, whose
    success then writes its two children."""
    parent = (await engine.start("sw-late-parent")).run_id
    first = await task(pool, parent, "first")
    assert first is not None
    grant = await engine.acquire_lease(parent, first.task_id, 0, owner="w", ttl=30.0)
    assert grant.granted
    assert await engine.pause(parent)
    assert await engine.report_completed(parent, first.task_id, "first", 0, {})
    assert len(await children(pool, parent)) == 2
    return parent


async def _held_starts(pool: repo.Pool, parent: str) -> int:
    async with repo.connection(pool) as conn:
        return int(
            await conn.fetchval(
                "SELECT count(*) FROM outbox WHERE kind = 'run_event' AND "
                "destination = 'run_started' AND payload ->> 'from' = $1 "
                "AND next_attempt_at = $2",
                parent,
                repo.CHILD_START_HELD,
            )
        )


async def test_a_paused_parent_s_children_start_at_its_resume(
    engine: Engine, pool: repo.Pool
) -> None:
    """Nothing new goes while a run is paused: a child its node writes then is written
    (one per attempt, as always) but waits PENDING for the parent's resume."""
    parent = await _paused_with_children_written(engine, pool)
    assert await _held_starts(pool, parent) == 2
    assert {c.status for c in await children(pool, parent)} == {RunStatus.PENDING}

    assert await engine.resume(parent)

    async def both_running() -> bool:
        return {c.status for c in await children(pool, parent)} == {RunStatus.RUNNING}

    await until(both_running, what="the children started at the resume")
    assert await _held_starts(pool, parent) == 0


async def test_a_paused_parent_cancelled_ends_its_unstarted_children_and_lets_go_the_abandoned(
    engine: Engine, pool: repo.Pool
) -> None:
    parent = await _paused_with_children_written(engine, pool)

    await engine.cancel(parent, "not needed")

    async def settled() -> bool:
        kids = {c.node_id: c.status for c in await children(pool, parent)}
        return kids == {"call": RunStatus.CANCELLED, "loose": RunStatus.RUNNING}

    await until(settled, what="the reached child cancelled, the abandoned one started")
    assert await _held_starts(pool, parent) == 0
    cancelled = next(c for c in await children(pool, parent) if c.node_id == "call")
    assert await task(pool, cancelled.run_id, "work") is None  # it never started
