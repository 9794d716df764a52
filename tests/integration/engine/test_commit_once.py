"""Each request takes effect once, even when the answer to its COMMIT is lost.

The engine talks to PostgreSQL through a proxy that forwards a COMMIT and then
drops its answer along with the connection: the transaction committed, and
the engine saw a lost connection. It must find out that it committed (not
apply the event a second time) and answer as if it had seen the commit.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

import composer_repo as repo
from composer_core.model import RunStatus, TaskState
from composer_engine import Engine, Report, Reporter, Unavailable, Workflows, validate_definition
from tests.integration.pgproxy import PgProxy

WAITS = {
    "id": "two-waits",
    "nodes": [
        {"id": "w1", "type": "WAIT_FOR_EVENT", "spec": {"event": "go"}},
        {"id": "w2", "type": "WAIT_FOR_EVENT", "spec": {"event": "go"}},
    ],
    "edges": [{"from": "w1", "to": "w2"}],
}
TASKS = {
    "id": "two-tasks",
    "nodes": [
        {"id": "t1", "type": "TASK", "queue": "q", "spec": {}},
        {"id": "t2", "type": "TASK", "queue": "q", "spec": {}},
    ],
    "edges": [{"from": "t1", "to": "t2"}],
}


@pytest.fixture
async def proxy(database_url: str) -> AsyncIterator[PgProxy]:
    p = await PgProxy(database_url).start()
    try:
        yield p
    finally:
        await p.close()


@pytest.fixture
async def engine(proxy: PgProxy, pool: repo.Pool) -> AsyncIterator[Engine]:
    workflows = Workflows(pool)
    for spec in (WAITS, TASKS):  # (again for each test: a new version, deployed)
        await workflows.create(validate_definition(spec), deploy=True)
    through_proxy = await repo.create_pool(proxy.url, min_size=1, max_size=2)
    try:
        yield Engine(through_proxy)
    finally:
        await through_proxy.close()


async def tasks(pool: repo.Pool, run_id: str) -> dict[str, Any]:
    async with repo.connection(pool) as conn:
        return {t.node_id: t for t in await repo.get_run_tasks(conn, run_id)}


async def status(pool: repo.Pool, run_id: str) -> RunStatus:
    async with repo.connection(pool) as conn:
        return (await repo.get_run(conn, run_id)).status


async def count_runs(pool: repo.Pool, workflow_id: str) -> int:
    async with repo.connection(pool) as conn:
        page = await repo.list_runs(conn, workflow_id=workflow_id, limit=100)
    return len(page.runs)


async def test_a_start_whose_commit_answer_is_lost_answers_created_once(
    engine: Engine, proxy: PgProxy, pool: repo.Pool
) -> None:
    before = await count_runs(pool, "two-waits")
    proxy.lose_next_commit()
    started = await engine.start("two-waits")
    assert proxy.lost_commits == 1
    assert started.created
    assert await count_runs(pool, "two-waits") == before + 1
    assert (await tasks(pool, started.run_id))["w1"].state == TaskState.WAITING


async def test_a_signal_whose_commit_answer_is_lost_completes_one_node(
    engine: Engine, proxy: PgProxy, pool: repo.Pool
) -> None:
    run_id = (await engine.start("two-waits")).run_id
    proxy.lose_next_commit()
    assert await engine.signal(run_id, "go", {"n": 1})  # delivered to the waiting node
    assert proxy.lost_commits == 1
    by_node = await tasks(pool, run_id)
    assert by_node["w1"].state == TaskState.COMPLETED
    assert by_node["w2"].state == TaskState.WAITING  # not completed by the same signal again


async def test_a_cancel_whose_commit_answer_is_lost_succeeds_and_a_second_cancel_too(
    engine: Engine, proxy: PgProxy, pool: repo.Pool
) -> None:
    run_id = (await engine.start("two-waits")).run_id
    proxy.lose_next_commit()
    await engine.cancel(run_id, "no longer needed")
    assert proxy.lost_commits == 1
    assert await status(pool, run_id) == RunStatus.CANCELLED
    await engine.cancel(run_id, "asked twice")  # answers as the first cancel did
    assert await status(pool, run_id) == RunStatus.CANCELLED


async def test_a_retry_from_a_node_whose_commit_answer_is_lost_reopens_the_run_once(
    engine: Engine, proxy: PgProxy, pool: repo.Pool
) -> None:
    run_id = (await engine.start("two-waits")).run_id
    await engine.cancel(run_id)
    proxy.lose_next_commit()
    await engine.retry(run_id, "w1")
    assert proxy.lost_commits == 1
    assert await status(pool, run_id) == RunStatus.RUNNING
    assert (await tasks(pool, run_id))["w1"].state == TaskState.WAITING


async def test_a_report_whose_commit_answer_is_lost_counts_once(
    engine: Engine, proxy: PgProxy, pool: repo.Pool
) -> None:
    run_id = (await engine.start("two-tasks")).run_id
    t1 = (await tasks(pool, run_id))["t1"]
    grant = await engine.acquire_lease(
        run_id, t1.task_id, t1.attempt, owner="w", ttl=30.0, claim="c", queues=None
    )
    assert grant.granted
    proxy.lose_next_commit()
    # the coordinator's path: reports group-committed
    accepted = await engine.report(
        Report(run_id, t1.task_id, "t1", t1.attempt, Reporter(grant.token, "w"), True, {})
    )
    assert proxy.lost_commits == 1
    assert accepted  # the report counted, and the worker is told so
    async with repo.connection(pool) as conn:
        rows = await repo.get_run_tasks(conn, run_id)
    assert [(t.node_id, t.state, t.attempt) for t in rows] == [
        ("t1", TaskState.COMPLETED, t1.attempt),
        ("t2", TaskState.PENDING, 0),  # created once
    ]


async def test_a_commit_that_never_reached_the_server_is_applied_again(
    engine: Engine, proxy: PgProxy, pool: repo.Pool
) -> None:
    run_id = (await engine.start("two-waits")).run_id
    proxy.lose_next_commit(reach_server=False)
    assert await engine.signal(run_id, "go")
    assert proxy.lost_commits == 1
    assert (await tasks(pool, run_id))["w1"].state == TaskState.COMPLETED


async def test_a_group_commit_whose_outcome_stays_unknown_answers_unavailable(
    engine: Engine, proxy: PgProxy, pool: repo.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch of reports whose COMMIT answer was lost, when the database cannot say
    whether it committed: the worker hears UNAVAILABLE (docs/architecture.md §4.8) and
    sends the report again, never "stale" for a report that counted."""
    run_id = (await engine.start("two-tasks")).run_id
    t1 = (await tasks(pool, run_id))["t1"]
    grant = await engine.acquire_lease(
        run_id, t1.task_id, t1.attempt, owner="w", ttl=30.0, claim="c", queues=None
    )
    asked: list[int] = []

    async def cannot_say(pool: repo.Pool, xid: int, backend_pid: int | None) -> str:
        asked.append(xid)
        raise repo.Transient("the database does not answer")

    monkeypatch.setattr(repo, "commit_status", cannot_say)
    monkeypatch.setattr(engine._shell, "attempts", 2)
    proxy.lose_next_commit()
    report = Report(run_id, t1.task_id, "t1", t1.attempt, Reporter(grant.token, "w"), True, {})
    with pytest.raises(Unavailable, match="outcome of a commit is unknown"):
        await engine.report(report)
    assert proxy.lost_commits == 1 and len(asked) == 2
    assert (await tasks(pool, run_id))["t1"].state == TaskState.COMPLETED  # it did commit
    # the transaction asked about is the one that wrote it (its id read by the lock
    # statement, not by a round trip of its own before COMMIT)
    async with repo.connection(pool) as conn:
        wrote = await conn.fetchval(
            "SELECT xmin::text::bigint FROM task_instances WHERE run_id = $1 AND id = $2",
            run_id,
            t1.task_id,
        )
    assert int(asked[0]) % 2**32 == wrote
    monkeypatch.undo()
    assert not await engine.report(report)  # sent again: acknowledged, counted once
    assert [t.node_id for t in (await tasks(pool, run_id)).values()] == ["t1", "t2"]
