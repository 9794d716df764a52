"""Recovery end to end: nothing is ever stuck. A worker killed mid-task, Redis losing
its streams, entries stuck on a dead consumer, a task no worker survives."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import itertools
import logging
import os
import random
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Iterator
from pathlib import Path
from typing import Any

import pytest

import composer_queue as cq
import composer_repo as repo
from composer_common.logs import ALERT
from composer_core.model import RunStatus, TaskState
from composer_engine import Reporter
from composer_lease_sweeper.loop import Sweeper
from composer_sdk import TaskContext
from tests.integration.databases import scratch_database
from tests.integration.e2e.conftest import TOKEN, Stack, eventually, open_stack
from tests.integration.waits import expire_lease, until

HANGING_WORKER = Path(__file__).with_name("hanging_worker.py")


@pytest.fixture
async def recovering(database_url: str, redis_url: str) -> AsyncIterator[Stack]:
    """The stack with the lease-sweeper running (tests' short TTLs and intervals)."""
    async with open_stack(database_url, redis_url, sweeper=True) as s:
        yield s


@pytest.fixture
def own_database(pg_admin_url: str, pg_template: str) -> Iterator[str]:
    """A database of the test's own, for a sweeper whose clock runs ahead: in the
    module's database, what other tests left queued would look lost to it as well."""
    with scratch_database(pg_admin_url, template=pg_template) as url:
        yield url


@pytest.fixture
async def alone(own_database: str, redis_url: str) -> AsyncIterator[Stack]:
    async with open_stack(own_database, redis_url) as s:
        yield s


def one_task(workflow_id: str, queue: str, **node: Any) -> dict[str, Any]:
    return {
        "id": workflow_id,
        "nodes": [{"id": "work", "type": "TASK", "queue": queue, "spec": {}, **node}],
    }


async def _empty(length: Awaitable[int]) -> bool:
    return await length == 0


async def test_a_worker_killed_mid_task_has_its_task_run_again_elsewhere(
    recovering: Stack,
) -> None:
    s = recovering
    await s.deploy(one_task("killed", "fragile", retry={"max_attempts": 3, "initial_seconds": 0.1}))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(HANGING_WORKER),
        s.redis_url,
        s.prefix,
        s.grpc_target,
        TOKEN,
        "fragile",
        "1.0",
        stdout=asyncio.subprocess.PIPE,
        env={k: v for k, v in os.environ.items() if not k.startswith("COMPOSER_")},
    )
    try:
        started = await s.engine.start("killed")
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert line.decode().split()[2] == "0", line  # attempt 0 runs in the process
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGKILL)
        await proc.wait()
    killed_owner = (await s.tasks_of(started.run_id))["work"].lease_owner

    async def survive(ctx: TaskContext, input: Any) -> dict[str, Any]:
        return {"attempt": ctx.attempt}

    survivor = s.worker({"fragile": survive}, lease_ttl=1.0)
    run = await s.wait_run(started.run_id, timeout=20)

    task = (await s.tasks_of(started.run_id))["work"]
    assert run.status is RunStatus.SUCCEEDED
    assert task.attempt == 1 and task.output == {"attempt": 1}
    assert task.error is None  # completed: an earlier attempt's error is not its own
    assert killed_owner is not None and killed_owner != survivor.owner
    # what ended attempt 0 stays in the run's history, with who held it
    async with repo.transaction(s.pool) as conn:
        history = await repo.run_history(conn, started.run_id)
    [expired] = [h for h in history if h.kind == "task.retry_scheduled"]
    assert expired.attempt == 0 and isinstance(expired.detail, dict)
    assert expired.detail["error"] == f"lease expired (held by {killed_owner})"
    leased = [h.actor for h in history if h.kind == "task.leased"]
    assert leased == [killed_owner, survivor.owner]
    sweeper = s.sweeper
    assert sweeper is not None

    async def counted() -> bool:  # a sweep adds to its totals once all its steps are done
        return sweeper.totals.expired == 1

    await until(counted, timeout=10, what="the sweep that expired the lease counting it")


async def test_every_run_finishes_when_redis_loses_its_streams_midway(
    database_url: str, redis_url: str
) -> None:
    async with open_stack(database_url, redis_url, sweeper=True) as s:
        steps = ["a", "b", "c"]
        await s.deploy(
            {
                "id": "flushed",
                "nodes": [{"id": i, "type": "TASK", "queue": "busy", "spec": {}} for i in steps],
                "edges": [{"from": x, "to": y} for x, y in itertools.pairwise(steps)],
            }
        )

        async def step(ctx: TaskContext, input: Any) -> dict[str, Any]:
            await asyncio.sleep(random.uniform(0.01, 0.05))
            return {"node": ctx.node_id}

        run_ids = [(await s.engine.start("flushed")).run_id for _ in range(50)]
        # (each start published its dispatch before it returned)
        # Every first step sits in a stream, QUEUED, when Redis loses everything...
        await flush_redis(s)
        worker = s.worker({"busy": step}, lease_ttl=1.0)
        await eventually(lambda: worker.completed >= 60, timeout=30, what="60 steps done")
        # ...and again with steps in flight, in the workers' hands and in streams.
        await flush_redis(s)

        for run_id in run_ids:
            assert (await s.wait_run(run_id, timeout=30)).status is RunStatus.SUCCEEDED
        assert s.sweeper is not None
        assert s.sweeper.totals.redispatched >= 50  # each lost dispatch was sent again


async def flush_redis(stack: Stack) -> None:
    """FLUSHALL on a Redis of the tests' own (COMPOSER_TEST_REDIS_FLUSHALL=1); otherwise
    the same for this stack's keys only, since test runs share the server."""
    if os.environ.get("COMPOSER_TEST_REDIS_FLUSHALL") == "1":
        await stack.redis.flush_all()
        return
    await stack.redis.drop(stack.prefix)


async def test_a_queued_task_whose_stream_was_lost_is_dispatched_again(
    recovering: Stack,
) -> None:
    s = recovering
    await s.deploy(one_task("lost", "nobody"))
    started = await s.engine.start("lost")  # published before it returns
    task = (await s.tasks_of(started.run_id))["work"]
    stream = cq.task_stream(s.prefix, "nobody", task.task_id, 4)
    [first_entry] = await s.redis.entries(stream)
    first = first_entry.fields
    await s.redis.delete([stream])  # Redis restarted without it

    await until(lambda: s.redis.length(stream), what="the dispatch is in its stream again")
    [entry] = await s.redis.entries(stream)
    fields = entry.fields
    again = (await s.tasks_of(started.run_id))["work"]
    assert (fields["task_id"], fields["attempt"]) == (task.task_id, "0")  # the same attempt
    # written by the same persist path as the first dispatch: the same message
    # (but for the trace it belongs to: the sweep's, not the start's)
    assert {k: v for k, v in fields.items() if k != "traceparent"} == {
        k: v for k, v in first.items() if k != "traceparent"
    }
    assert again.attempt == 0 and again.state in (TaskState.PENDING, TaskState.QUEUED)
    sweeper = s.sweeper
    assert sweeper is not None
    # the redispatch publishes before the sweeper counts it (the stack is shared with
    # other tests of this module: their lost dispatches count too)
    await eventually(lambda: sweeper.totals.redispatched >= 1, what="the sweeper counted it")
    # the run's history says it was dispatched twice, the second time because it was lost
    async with repo.transaction(s.pool) as conn:
        history = await repo.run_history(conn, started.run_id)
    # (the first dispatch is said by the task's task.scheduled row, which names the queue)
    sent = [(h.kind, h.detail) for h in history if h.kind in ("task.scheduled", "task.dispatched")]
    assert [(kind, detail["queue"]) for kind, detail in sent] == [
        ("task.scheduled", "nobody"),
        ("task.dispatched", "nobody"),
    ]
    assert sent[1][1] == {"queue": "nobody", "again": "its message was lost"}


async def test_a_task_delivered_too_often_fails_for_good(database_url: str, redis_url: str) -> None:
    options = {"lease_ttl": 0.3, "max_deliveries": 3}
    async with open_stack(database_url, redis_url, sweeper=options) as s:
        await s.deploy(one_task("poison", "poison"))
        await s.redis.ensure_groups(cq.queue_streams(s.prefix, "poison", 4))
        started = await s.engine.start("poison")
        deliveries: list[str] = []

        async def crashing_consumer() -> None:
            """Takes every entry and dies before leasing it (never acknowledges)."""
            names = cq.queue_streams(s.prefix, "poison", 4)
            while True:
                read = await s.redis.read(names, "crashes", count=10, block_ms=100)
                deliveries.extend(e.fields.get(cq.DELIVERIES, "1") for e in read)

        consumer = asyncio.create_task(crashing_consumer())
        try:
            run = await s.wait_run(started.run_id, timeout=20)
        finally:
            consumer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await consumer

        task = (await s.tasks_of(started.run_id))["work"]
        assert run.status is RunStatus.FAILED
        assert task.state is TaskState.FAILED and task.error_code == "DELIVERY_LIMIT"
        assert "delivered 3 times" in (task.error or "")
        assert deliveries == ["1", "2", "3"]
        stream = cq.task_stream(s.prefix, "poison", task.task_id, 4)
        assert await s.redis.length(stream) == 0  # the last entry was acknowledged away


async def test_a_dead_consumers_entry_for_a_task_that_moved_on_is_acknowledged_away(
    database_url: str, redis_url: str
) -> None:
    async with open_stack(database_url, redis_url, sweeper={"lease_ttl": 0.3}) as s:
        await s.deploy(one_task("moved-on", "elsewhere"))
        names = cq.queue_streams(s.prefix, "elsewhere", 4)
        await s.redis.ensure_groups(names)
        started = await s.engine.start("moved-on")
        entries: list[cq.Entry] = []
        while not entries:  # a consumer takes the entry, then goes away
            entries = await s.redis.read(names, "gone", count=1, block_ms=100)
        [entry] = entries
        stream, msg = entry.stream, entry.message()
        # Meanwhile the task finished another way (a duplicate delivery ran it).
        lease = await s.engine.acquire_lease(
            msg.run_id, msg.task_id, msg.attempt, owner="other", ttl=30
        )
        assert lease.granted
        await s.engine.report_completed(
            msg.run_id,
            msg.task_id,
            lease.node_id,
            msg.attempt,
            {"ok": True},
            reporter=Reporter(lease.token, "other"),
        )

        await until(lambda: _empty(s.redis.length(stream)), what="the entry was acknowledged away")
        assert await s.redis.pending(stream) == []
        assert (await s.wait_run(started.run_id, timeout=5)).status is RunStatus.SUCCEEDED
        assert s.sweeper is not None
        sweeper = s.sweeper
        # the sweep adds to its totals when it ends, a moment after its XACK
        await eventually(lambda: sweeper.totals.acked == 1, what="the sweep counted the ack")


async def test_a_renewed_lease_is_not_failed_and_an_expired_one_is(stack: Stack) -> None:
    await stack.deploy(one_task("renewing", "slow", retry={"max_attempts": 2}))
    started = await stack.engine.start("renewing")
    task = (await stack.tasks_of(started.run_id))["work"]
    run_id, task_id = started.run_id, task.task_id
    lease = await stack.engine.acquire_lease(run_id, task_id, 0, owner="w1", ttl=30)
    assert lease.granted
    await expire_lease(stack.pool, run_id, task_id)

    def renew() -> Awaitable[dt.datetime | None]:
        return stack.engine.renew_lease(run_id, task_id, 0, owner="w1", ttl=30, token=lease.token)

    assert await renew()  # just in time

    renewed = await stack.engine.expire_lease(run_id, task_id, "work", 0, owner="w1")
    await expire_lease(stack.pool, run_id, task_id)
    someone_else = await stack.engine.expire_lease(run_id, task_id, "work", 0, owner="w2")
    expired = await stack.engine.expire_lease(run_id, task_id, "work", 0, owner="w1")
    twice = await stack.engine.expire_lease(run_id, task_id, "work", 0, owner="w1")

    after = (await stack.tasks_of(run_id))["work"]
    assert (renewed, someone_else, expired, twice) == (False, False, True, False)
    assert after.attempt == 1 and after.state in (TaskState.PENDING, TaskState.QUEUED)
    assert after.error_code == "LEASE_EXPIRED"
    assert await renew() is None


async def test_one_replica_sweeps_at_a_time(stack: Stack) -> None:
    sweeper = Sweeper(stack.engine, stack.redis, prefix=stack.prefix)
    async with repo.singleton(stack.pool, f"composer-lease-sweeper:{stack.prefix}") as held:
        assert held
        assert await sweeper.sweep() is None  # another replica is sweeping
    assert await sweeper.sweep() is not None


async def test_expired_leases_are_judged_by_the_database_clock(stack: Stack) -> None:
    """A lease that has not expired yet is never failed, however the sweeper's clock reads."""
    await stack.deploy(one_task("clocked", "clocked"))
    started = await stack.engine.start("clocked")
    task_id = (await stack.tasks_of(started.run_id))["work"].task_id
    assert (await stack.engine.acquire_lease(started.run_id, task_id, 0, owner="w", ttl=60)).granted
    async with repo.transaction(stack.pool) as conn:
        later = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=5)
        found = await repo.expired_leases(conn, now=later)
    assert any(e.task_id == task_id for e in found)  # by that clock it would be expired

    assert not await stack.engine.expire_lease(started.run_id, task_id, "work", 0, owner="w")
    assert (await stack.tasks_of(started.run_id))["work"].state is TaskState.RUNNING


async def test_queue_that_no_worker_serves_raises_an_alert(
    alone: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    stack = alone
    await stack.deploy(
        {"id": "orphan", "nodes": [{"id": "a", "type": "TASK", "queue": "nobody", "spec": {}}]}
    )
    await stack.engine.start("orphan")  # published before it returns
    # the group exists (a worker of this queue once started) but no consumer ever read
    await stack.redis.ensure_groups(cq.queue_streams(stack.prefix, "nobody", cq.DEFAULT_SHARDS))
    now = [dt.datetime.now(dt.UTC)]
    sweeper = Sweeper(
        stack.engine,
        stack.redis,
        prefix=stack.prefix,
        lost_after=60,
        clock=lambda: now[0],
    )
    with caplog.at_level(logging.WARNING, logger="composer.sweeper"):
        await sweeper.sweep()
        assert not [r for r in caplog.records if r.levelno == ALERT]  # not for long yet
        now[0] += dt.timedelta(seconds=61)
        await sweeper.sweep()
        await sweeper.sweep()  # once per stream, not once per sweep
    alerts = [r for r in caplog.records if r.levelno == ALERT]
    assert len(alerts) == 1
    assert "has 1 task(s) waiting and no worker" in alerts[0].getMessage()


async def test_the_sweepers_own_claims_do_not_hide_a_queue_nobody_serves(
    alone: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    """XCLAIM makes the sweeper a consumer of each stream it claims entries from.
    The queue's one worker took the entry and died; once the sweeper delivered it again
    and the dead worker's consumer was deleted, only the sweeper's is left: no worker."""
    stack = alone
    await stack.deploy(one_task("abandoned", "abandoned"))
    names = cq.queue_streams(stack.prefix, "abandoned", cq.DEFAULT_SHARDS)
    await stack.redis.ensure_groups(names)
    await stack.engine.start("abandoned")
    entries: list[cq.Entry] = []
    while not entries:  # the worker takes the entry, then dies
        entries = await stack.redis.read(names, "gone", count=1, block_ms=100)
    [entry] = entries
    now = [dt.datetime.now(dt.UTC)]
    sweeper = Sweeper(
        stack.engine,
        stack.redis,
        prefix=stack.prefix,
        lease_ttl=0.05,
        lost_after=60,
        clock=lambda: now[0],
    )

    async def idle_past_the_ttl() -> bool:
        return all(p.idle_ms >= 50 for p in await stack.redis.pending(entry.stream))

    await until(idle_past_the_ttl, what="the dead worker's entry idle past the lease TTL")
    report = await sweeper.sweep()
    assert report is not None and report.redelivered == 1
    assert await stack.redis.delete_consumer(entry.stream, "gone") == 0
    with caplog.at_level(logging.WARNING, logger="composer.sweeper"):
        await sweeper.sweep()
        now[0] += dt.timedelta(seconds=61)
        await sweeper.sweep()
    alerts = [r for r in caplog.records if r.levelno == ALERT]
    assert len(alerts) == 1
    assert f"{entry.stream} has 1 task(s) waiting and no worker" in alerts[0].getMessage()


async def test_leases_and_renewals_are_single_statements_without_a_transaction(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    await stack.deploy(one_task("leased", "lease-only"))
    started = await stack.engine.start("leased")
    task_id = (await stack.tasks_of(started.run_id))["work"].task_id

    def no_transaction(pool: repo.Pool) -> Any:
        raise AssertionError("a lease must not open a transaction (BEGIN/COMMIT round trips)")

    monkeypatch.setattr(repo, "transaction", no_transaction)
    grant = await stack.engine.acquire_lease(started.run_id, task_id, 0, owner="w", ttl=30)
    renewed = await stack.engine.renew_lease(
        started.run_id, task_id, 0, owner="w", ttl=30, token=grant.token
    )
    stale = await stack.engine.acquire_lease(started.run_id, task_id, 0, owner="other", ttl=30)

    assert grant.granted and renewed is not None
    assert not stale.granted  # still fenced: one UPDATE is atomic on its own
