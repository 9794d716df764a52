"""Events between runs: a child run's end reaches the node of its parent that
started it, and a parent's cancel reaches its children, all the way down —
each applied exactly once, whatever dies between the commit of its cause and
its delivery (docs/architecture.md §4.10).

The parent's node here is a TASK node that no worker serves: the child's end
stands in for its report, fenced by the same task and attempt.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import composer_queue as cq
import composer_repo as repo
from composer_core.model import RunStatus, TaskState
from composer_engine import Engine, Unavailable, Workflows, validate_definition
from composer_outbox_enqueuer.loop import Enqueuer
from tests.integration.pgproxy import PgProxy
from tests.integration.waits import until

FINISH_CHILD = Path(__file__).with_name("finish_child.py")

PARENT = {
    "id": "parent",
    "nodes": [
        {
            "id": "child",
            "type": "TASK",
            "queue": "stands-for-a-child",
            "spec": {},
            "retry": {"max_attempts": 2, "initial_seconds": 0},
        }
    ],
}
CHILD = {
    "id": "child",
    "output": {"total": "{{tasks.work.output.total}}"},
    "nodes": [{"id": "work", "type": "TASK", "queue": "kids", "spec": {}}],
}


@pytest.fixture
async def engine(pool: repo.Pool) -> AsyncIterator[Engine]:
    workflows = Workflows(pool)
    for spec in (PARENT, CHILD):
        await workflows.create(validate_definition(spec), deploy=True)
    e = Engine(pool)
    try:
        yield e
    finally:
        await e.aclose()


async def task(pool: repo.Pool, run_id: str, node_id: str) -> repo.TaskRecord:
    async with repo.connection(pool) as conn:
        return {t.node_id: t for t in await repo.get_run_tasks(conn, run_id)}[node_id]


async def run(pool: repo.Pool, run_id: str) -> repo.RunRecord:
    async with repo.connection(pool) as conn:
        return await repo.get_run(conn, run_id)


async def pending_events(pool: repo.Pool) -> int:
    async with repo.connection(pool) as conn:
        return int(await conn.fetchval("SELECT count(*) FROM outbox WHERE kind = 'run_event'"))


async def history(pool: repo.Pool, run_id: str) -> list[repo.HistoryEntry]:
    async with repo.connection(pool) as conn:
        return await repo.run_history(conn, run_id, limit=1000)


async def start_child(engine: Engine, pool: repo.Pool, parent_id: str) -> str:
    """A child run started for the parent's ``child`` node, at its current attempt."""
    node = await task(pool, parent_id, "child")
    parent = repo.ParentRef(parent_id, "child", node.task_id, node.attempt)
    return (await engine.start("child", parent=parent)).run_id


async def finish_child(engine: Engine, pool: repo.Pool, child_id: str, output: Any) -> None:
    work = await task(pool, child_id, "work")
    assert await engine.report_completed(child_id, work.task_id, "work", 0, output)


async def status_is(pool: repo.Pool, run_id: str, status: RunStatus) -> bool:
    return (await run(pool, run_id)).status is status


async def test_a_child_s_end_completes_its_parent_s_node_with_its_output(
    engine: Engine, pool: repo.Pool
) -> None:
    parent = (await engine.start("parent")).run_id
    child = await start_child(engine, pool, parent)

    await finish_child(engine, pool, child, {"total": 42})

    await until(lambda: status_is(pool, parent, RunStatus.SUCCEEDED), what="parent succeeded")
    node = await task(pool, parent, "child")
    assert node.state is TaskState.COMPLETED
    assert node.output == {"total": 42}
    assert await pending_events(pool) == 0
    completed = [h for h in await history(pool, parent) if h.kind == "task.completed"]
    assert len(completed) == 1
    assert completed[0].actor == f"run {child}"


async def test_a_child_s_failure_fails_its_parent_s_node_with_the_child_s_error(
    engine: Engine, pool: repo.Pool
) -> None:
    parent = (await engine.start("parent")).run_id
    child = await start_child(engine, pool, parent)
    work = await task(pool, child, "work")

    await engine.report_failed(child, work.task_id, "work", 0, "card declined", permanent=True)

    # the node's retry policy applies: attempt 1 of the parent's node is under way
    await until(
        lambda: _attempt_is(pool, parent, 1), what="the parent's node retried after the failure"
    )
    node = await task(pool, parent, "child")
    assert node.state in (TaskState.PENDING, TaskState.QUEUED)
    failed = [h for h in await history(pool, parent) if h.kind == "task.retry_scheduled"]
    assert failed, [h.kind for h in await history(pool, parent)]
    assert child in str(failed[0].detail)
    assert "card declined" in str(failed[0].detail)


async def _attempt_is(pool: repo.Pool, run_id: str, attempt: int) -> bool:
    return (await task(pool, run_id, "child")).attempt == attempt


async def test_a_late_end_for_an_attempt_that_moved_on_changes_nothing(
    engine: Engine, pool: repo.Pool
) -> None:
    parent = (await engine.start("parent")).run_id
    child = await start_child(engine, pool, parent)  # for attempt 0
    node = await task(pool, parent, "child")
    assert await engine.report_failed(parent, node.task_id, "child", 0, "gave up on it")
    assert (await task(pool, parent, "child")).attempt == 1

    await finish_child(engine, pool, child, {"total": -1})

    await until(lambda: _no_events(pool), what="the late event consumed")
    node = await task(pool, parent, "child")
    assert node.attempt == 1
    assert node.state in (TaskState.PENDING, TaskState.QUEUED)
    assert node.output is None
    assert (await run(pool, parent)).status is RunStatus.RUNNING


async def _no_events(pool: repo.Pool) -> bool:
    return await pending_events(pool) == 0


async def test_deliveries_that_race_apply_the_event_once(
    engine: Engine, pool: repo.Pool, database_url: str
) -> None:
    parent = (await engine.start("parent")).run_id
    child = await start_child(engine, pool, parent)
    others = await repo.create_pool(database_url, min_size=3, max_size=3)
    try:
        async with repo.transaction(pool) as holder:  # the parent locked: deliveries queue up
            await holder.fetchval("SELECT 1 FROM workflow_runs WHERE id = $1 FOR UPDATE", parent)
            await finish_child(engine, pool, child, {"total": 1})
            async with repo.connection(pool) as conn:
                (event_id,) = await repo.due_run_events(conn, limit=10, grace=0)
            racing = [
                asyncio.create_task(Engine(others).deliver_run_event(event_id)) for _ in range(3)
            ]
            # the committer's own delivery and the three others, all on the parent's lock
            await until(lambda: _lock_waiters(pool, 4), what="four deliveries waiting")
        results = await asyncio.gather(*racing)
    finally:
        await others.close()

    await until(lambda: status_is(pool, parent, RunStatus.SUCCEEDED), what="parent succeeded")
    assert results.count(True) <= 1
    completed = [h for h in await history(pool, parent) if h.kind == "task.completed"]
    assert len(completed) == 1
    assert await pending_events(pool) == 0


async def _lock_waiters(pool: repo.Pool, n: int) -> bool:
    async with repo.connection(pool) as conn:
        waiting = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND datname = current_database()"
        )
    return int(waiting) >= n


async def test_an_end_whose_sender_was_killed_after_its_commit_is_delivered_by_the_enqueuer(
    engine: Engine, pool: repo.Pool, database_url: str, redis_url: str
) -> None:
    parent = (await engine.start("parent")).run_id
    child = await start_child(engine, pool, parent)
    work = await task(pool, child, "work")
    async with repo.transaction(pool) as holder:  # its delivery blocks on the parent's lock
        await holder.fetchval("SELECT 1 FROM workflow_runs WHERE id = $1 FOR UPDATE", parent)
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(FINISH_CHILD),
            database_url,
            child,
            work.task_id,
            "work",
            json.dumps({"total": 7}),
            stdout=asyncio.subprocess.PIPE,
        )
        try:
            assert proc.stdout is not None
            assert await asyncio.wait_for(proc.stdout.readline(), 30) == b"committed\n"
            await until(lambda: _lock_waiters(pool, 1), what="its delivery waiting")
        finally:
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
        # its connection dies with it: end its backend, waiting on the lock, now
        await holder.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE wait_event_type = 'Lock' AND datname = current_database() "
            "AND pid <> pg_backend_pid()"
        )
    assert (await run(pool, child)).status is RunStatus.SUCCEEDED
    assert (await run(pool, parent)).status is RunStatus.RUNNING
    assert await pending_events(pool) == 1

    queue = cq.connect(redis_url)
    stop = asyncio.Event()
    prefix = f"t{uuid.uuid4().hex[:8]}"
    fallback = Engine(pool, redis=queue, redis_prefix=prefix)
    enqueuer = Enqueuer(
        fallback,
        queue,
        prefix=prefix,
        grace=0.2,
        poll_seconds=0.05,
        run_events=True,
    )
    loop = asyncio.create_task(enqueuer.run(stop))
    try:
        await until(lambda: status_is(pool, parent, RunStatus.SUCCEEDED), what="parent succeeded")
    finally:
        stop.set()
        await loop
        await fallback.aclose()
        await queue.close()
    assert (await task(pool, parent, "child")).output == {"total": 7}
    assert await pending_events(pool) == 0
    assert enqueuer.run_events_delivered >= 1


async def test_a_parent_s_cancel_reaches_its_children_all_the_way_down(
    engine: Engine, pool: repo.Pool
) -> None:
    parent = (await engine.start("parent")).run_id
    child = await start_child(engine, pool, parent)
    work = await task(pool, child, "work")
    # a grandchild, for the child's node
    grandchild = (
        await engine.start(
            "child", parent=repo.ParentRef(child, "work", work.task_id, work.attempt)
        )
    ).run_id

    await engine.cancel(parent, "the order was withdrawn")

    await until(lambda: status_is(pool, child, RunStatus.CANCELLED), what="child cancelled")
    await until(
        lambda: status_is(pool, grandchild, RunStatus.CANCELLED), what="grandchild cancelled"
    )
    assert "the order was withdrawn" in ((await run(pool, grandchild)).error or "")
    # the children's own ends reach runs that finished: ignored, and consumed
    await until(lambda: _no_events(pool), what="every event consumed")
    assert (await run(pool, parent)).status is RunStatus.CANCELLED


async def test_looking_for_undelivered_events_while_the_database_is_away_is_unavailable(
    database_url: str,
) -> None:
    """The outbox-enqueuer backs off on Unavailable; a driver error would stop it."""
    proxy = await PgProxy(database_url).start()
    through = await repo.create_pool(proxy.url, min_size=0, max_size=1)
    try:
        await proxy.close()  # the database is away from here on
        with pytest.raises(Unavailable):
            await Engine(through).deliver_due_run_events(grace=0)
    finally:
        await through.close()
