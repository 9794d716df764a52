"""The outbox-enqueuer: real PostgreSQL for the outbox, the queue fake for Redis.

The loop's database side (claim, delete, mark QUEUED, in one transaction) is
what makes publishing at-least-once; its Redis side only needs a queue that
accepts a batch or fails. FakeQueue passes the same contract test as Redis
(tests/integration/queue), so these tests need no Redis server.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import pytest

import composer_queue as cq
import composer_repo as repo
from composer_core.model import TaskState
from composer_engine import Engine, Unavailable
from composer_outbox_enqueuer.loop import Enqueuer
from composer_queue.testing import FakeQueue


@pytest.fixture
def prefix() -> str:
    return f"enq-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def queue() -> FakeQueue:
    return FakeQueue()


@pytest.fixture
def engine(pool: repo.Pool, queue: FakeQueue, prefix: str) -> Engine:
    return Engine(pool, redis=queue, redis_prefix=prefix)


async def deploy_one_task(pool: repo.Pool, workflow_id: str, queue_name: str) -> None:
    spec: dict[str, Any] = {
        "id": workflow_id,
        "nodes": [{"id": "a", "type": "TASK", "queue": queue_name, "spec": {}}],
    }
    async with repo.transaction(pool) as conn:
        await repo.create_definition(conn, workflow_id, name=workflow_id, spec=spec, deploy=True)


async def task_of(pool: repo.Pool, run_id: str) -> repo.TaskRecord:
    async with repo.transaction(pool) as conn:
        [task] = await repo.get_run_tasks(conn, run_id)
    return task


async def until(check: Callable[[], bool], what: str) -> None:
    deadline = asyncio.get_running_loop().time() + 10
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        await asyncio.sleep(0.01)


async def outbox_rows(pool: repo.Pool) -> int:
    async with repo.connection(pool) as conn:
        return sum((await repo.outbox_size(conn)).values())


async def test_the_committer_publishes_its_dispatch_and_deletes_its_row(
    pool: repo.Pool, engine: Engine, queue: FakeQueue, prefix: str
) -> None:
    await deploy_one_task(pool, "pub", "pub")
    started = await engine.start("pub")
    await engine.aclose()  # the row's deletion is batched, off the caller's path: now

    task = await task_of(pool, started.run_id)
    stream = cq.task_stream(prefix, "pub", task.task_id, cq.DEFAULT_SHARDS)
    [entry] = await queue.entries(stream)
    message = entry.message()
    assert (message.run_id, message.task_id, message.attempt) == (started.run_id, task.task_id, 0)
    assert task.state is TaskState.QUEUED
    assert await outbox_rows(pool) == 0
    # nothing left for the enqueuer, and no hint on the hot path
    assert (
        await Enqueuer(
            Engine(pool, redis=queue, redis_prefix=prefix), queue, prefix=prefix, grace=0
        ).publish_dispatches()
    )[0] == 0
    assert queue.notified == []


async def test_a_publish_lost_after_the_commit_is_published_by_the_enqueuer_after_its_grace(
    pool: repo.Pool, engine: Engine, queue: FakeQueue, prefix: str
) -> None:
    """A crash (or Redis away) between the commit and the publish costs delay, never a task."""
    await deploy_one_task(pool, "lost", "lost")
    queue.down = True
    started = await engine.start("lost")  # committed; its publish fails
    queue.down = False
    task = await task_of(pool, started.run_id)
    stream = cq.task_stream(prefix, "lost", task.task_id, cq.DEFAULT_SHARDS)
    assert task.state is TaskState.PENDING and await queue.length(stream) == 0

    # within the grace period the row is still its committer's
    assert (
        await Enqueuer(
            Engine(pool, redis=queue, redis_prefix=prefix), queue, prefix=prefix, grace=60
        ).publish_dispatches()
    )[0] == 0
    assert await outbox_rows(pool) == 1

    published, _ = await Enqueuer(
        Engine(pool, redis=queue, redis_prefix=prefix), queue, prefix=prefix, grace=0
    ).publish_dispatches()
    assert published == 1
    [entry] = await queue.entries(stream)
    assert (entry.message().task_id, entry.message().attempt) == (task.task_id, 0)
    assert (await task_of(pool, started.run_id)).state is TaskState.QUEUED
    assert await outbox_rows(pool) == 0


async def test_a_queue_outage_rolls_the_claim_back_and_keeps_the_rows(
    pool: repo.Pool, engine: Engine, queue: FakeQueue, prefix: str
) -> None:
    await deploy_one_task(pool, "held", "held")
    queue.down = True
    started = await engine.start("held")
    enqueuer = Enqueuer(
        Engine(pool, redis=queue, redis_prefix=prefix), queue, prefix=prefix, grace=0
    )

    with pytest.raises(Unavailable, match="publishing the outbox failed"):
        await enqueuer.publish_dispatches()
    task = await task_of(pool, started.run_id)
    assert task.state is TaskState.PENDING and enqueuer.published == 0

    queue.down = False
    assert (await enqueuer.publish_dispatches())[0] >= 1
    stream = cq.task_stream(prefix, "held", task.task_id, cq.DEFAULT_SHARDS)
    assert await queue.length(stream) == 1
    assert (await task_of(pool, started.run_id)).state is TaskState.QUEUED


async def test_the_loop_backs_off_through_an_outage_then_publishes_what_a_committer_lost(
    pool: repo.Pool, engine: Engine, queue: FakeQueue, prefix: str
) -> None:
    await deploy_one_task(pool, "woken", "woken")
    enqueuer = Enqueuer(
        Engine(pool, redis=queue, redis_prefix=prefix),
        queue,
        prefix=prefix,
        grace=0.3,
        poll_seconds=0.1,
    )
    stop = asyncio.Event()
    loop = asyncio.create_task(enqueuer.run(stop))
    try:
        queue.down = True
        await until(lambda: queue.refused >= 3, "the loop retried while the queue was down")
        assert not loop.done()
        started = await engine.start("woken")  # its own publish fails: Redis is down
        queue.down = False
        await until(lambda: enqueuer.published >= 1, "the lost dispatch was published")
    finally:
        stop.set()
        await asyncio.wait_for(loop, 10)
    task = await task_of(pool, started.run_id)
    stream = cq.task_stream(prefix, "woken", task.task_id, cq.DEFAULT_SHARDS)
    assert await queue.length(stream) == 1
