"""The committer's publish: the XADD right after the commit, the outbox rows' deletion
batched across commits and off the caller's path (engine/_publish.py).

Real PostgreSQL for the outbox, the queue fake for Redis. Each test has a database
of its own, so counting the outbox counts only its rows.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

import composer_queue as cq
import composer_repo as repo
from composer_core.model import TaskState
from composer_engine import Engine
from composer_engine._publish import Dispatched, Publisher
from composer_outbox_enqueuer.loop import Enqueuer
from composer_queue.testing import FakeQueue
from tests.integration.databases import scratch_database
from tests.integration.outbox.test_enqueuer import deploy_one_task, outbox_rows, task_of
from tests.integration.waits import until

PREFIX = "pub-test"
#: A flush that never comes by itself within a test.
NEVER = 3600.0


@pytest.fixture
def database_url(pg_admin_url: str, pg_template: str) -> Iterator[str]:
    with scratch_database(pg_admin_url, template=pg_template) as url:
        yield url


async def committed(pool: repo.Pool, runs: int) -> tuple[list[str], list[Dispatched]]:
    """``runs`` runs of a one-task workflow committed and not published (an engine
    without Redis), and the dispatches their committer would publish."""
    await deploy_one_task(pool, "one", "q")
    engine = Engine(pool)
    run_ids = [(await engine.start("one")).run_id for _ in range(runs)]
    async with repo.transaction(pool) as conn:
        claimed = await repo.claim_outbox(conn, "dispatch")
    dispatched = [
        Dispatched(
            m.id,
            "q",
            repo.TaskRef(m.run_id, str(m.task_id), "", int(m.payload["attempt"])),
            dict(m.payload),
        )
        for m in claimed
    ]
    assert len(dispatched) == runs
    return run_ids, dispatched


def counting_flushes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of rows in each ``mark_published`` call, as they happen."""
    sizes: list[int] = []
    mark_published = repo.mark_published

    async def counted(conn: repo.Connection, ids: Sequence[int], *args: Any, **kw: Any) -> Any:
        sizes.append(len(ids))
        return await mark_published(conn, ids, *args, **kw)

    monkeypatch.setattr(repo, "mark_published", counted)
    return sizes


async def rows_are(pool: repo.Pool, n: int) -> bool:
    return await outbox_rows(pool) == n


async def states(pool: repo.Pool, run_ids: list[str]) -> set[TaskState]:
    return {(await task_of(pool, r)).state for r in run_ids}


async def entries(queue: FakeQueue, dispatched: Sequence[Dispatched]) -> list[int]:
    """How many stream entries each dispatch has (a shard's stream holds other tasks too)."""
    counts = []
    for d in dispatched:
        stream = cq.task_stream(PREFIX, "q", d.ref.task_id, cq.DEFAULT_SHARDS)
        found = await queue.entries(stream)
        counts.append(sum(e.message().task_id == d.ref.task_id for e in found))
    return counts


async def test_the_rows_of_several_commits_are_deleted_in_one_statement(
    pool: repo.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_ids, dispatched = await committed(pool, 3)
    queue = FakeQueue()
    publisher = Publisher(pool, queue, PREFIX, cq.DEFAULT_SHARDS, flush_delay=NEVER)
    flushes = counting_flushes(monkeypatch)

    for d in dispatched:  # three commits, each publishing its dispatch
        await publisher([d])
    # published at once; the rows wait for the flush, and cost nothing meanwhile
    assert await entries(queue, dispatched) == [1, 1, 1]
    assert await outbox_rows(pool) == 3 and flushes == []
    assert (
        await Enqueuer(
            Engine(pool, redis=queue, redis_prefix=PREFIX), queue, prefix=PREFIX, grace=60
        ).publish_dispatches()
    )[0] == 0

    await publisher.aclose()
    assert flushes == [3]
    assert await outbox_rows(pool) == 0
    assert await states(pool, run_ids) == {TaskState.QUEUED}


async def test_the_flush_goes_by_itself_after_its_delay_or_once_enough_rows_wait(
    pool: repo.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_ids, dispatched = await committed(pool, 3)
    queue = FakeQueue()
    flushes = counting_flushes(monkeypatch)

    by_count = Publisher(pool, queue, PREFIX, cq.DEFAULT_SHARDS, flush_delay=NEVER, flush_rows=2)
    await by_count(dispatched[:2])
    await until(lambda: rows_are(pool, 1), what="two rows deleted without a wait")

    by_time = Publisher(pool, queue, PREFIX, cq.DEFAULT_SHARDS, flush_delay=0.01)
    await by_time(dispatched[2:])
    await until(lambda: rows_are(pool, 0), what="the last row deleted after 10 ms")
    assert flushes == [2, 1]
    assert await states(pool, run_ids) == {TaskState.QUEUED}


async def test_a_failed_flush_leaves_the_rows_to_the_enqueuer(
    pool: repo.Pool, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A deletion lost costs a duplicate message (the lease refuses it), never a task."""
    run_ids, dispatched = await committed(pool, 2)
    queue = FakeQueue()
    doomed = await repo.create_pool(database_url, min_size=1, max_size=2)
    publisher = Publisher(doomed, queue, PREFIX, cq.DEFAULT_SHARDS, flush_delay=NEVER)
    await publisher(dispatched)
    await doomed.close()  # the flush cannot reach the database

    caplog.set_level(logging.WARNING, logger="composer.engine")
    await publisher.aclose()  # logs, never raises
    assert "deleting the outbox rows of 2 published dispatch(es) failed" in caplog.text
    assert await outbox_rows(pool) == 2
    assert await states(pool, run_ids) == {TaskState.PENDING}

    published, _ = await Enqueuer(
        Engine(pool, redis=queue, redis_prefix=PREFIX), queue, prefix=PREFIX, grace=0
    ).publish_dispatches()
    assert published == 2
    assert await entries(queue, dispatched) == [2, 2]  # the duplicates
    assert await outbox_rows(pool) == 0
    assert await states(pool, run_ids) == {TaskState.QUEUED}


async def test_an_engine_deletes_the_rows_it_published_on_its_own(pool: repo.Pool) -> None:
    await deploy_one_task(pool, "one", "q")
    engine = Engine(pool, redis=FakeQueue(), redis_prefix=PREFIX)
    started = await engine.start("one")
    await until(lambda: rows_are(pool, 0), what="the row deleted")
    assert (await task_of(pool, started.run_id)).state is TaskState.QUEUED
    await engine.aclose()  # nothing left: returns at once
