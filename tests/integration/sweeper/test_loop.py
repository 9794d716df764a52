"""The lease-sweeper's loop on a real database and composer_queue's ``FakeQueue`` (no Redis).

The fake keeps consumer groups, pending entries, delivery counts and idle times
as Redis does (tests/integration/queue/test_contract.py holds it to that), and
its clock is the test's: an entry is left on a dead consumer by reading it as
"dead" and moving the clock past the lease TTL. The tests check that the loop
gathers the facts, asks the engine's recovery policy and applies its decisions;
the policy's own rules are unit-tested in tests/unit/engine/test_recovery.py,
and tests/integration/e2e/test_recovery.py runs the same loop on real Redis.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pytest

import composer_queue as cq
import composer_repo as repo
from composer_common.logs import ALERT
from composer_core.model import RunStatus, TaskState
from composer_engine import Engine, Workflows, utcnow, validate_definition
from composer_lease_sweeper.loop import Sweeper
from composer_queue.testing import FakeQueue
from tests.integration.databases import scratch_database
from tests.integration.waits import expire_lease, until

PREFIX = "sweeper-test"
#: The sweeper's default lease TTL is 30s: a pending entry this much older is on a dead consumer.
PAST_THE_TTL = 31.0


@dataclass
class Setup:
    engine: Engine
    queue: FakeQueue
    sweeper: Sweeper
    #: The fake queue's clock (seconds): what idle times are measured by.
    now: list[float]

    async def stuck(self, stream: str, fields: Mapping[str, str]) -> cq.Entry:
        """An entry taken by a consumer that then died: pending, idle past the lease TTL."""
        await self.queue.ensure_groups([stream])
        await self.queue.publish([(stream, fields)])
        [entry] = await self.queue.read([stream], "dead", count=1, block_ms=0)
        self.now[0] += PAST_THE_TTL
        return entry

    async def redeliver_to_a_dead_worker(self, stream: str) -> cq.Entry:
        """The dead consumer takes the entry that was delivered again, and dies too."""
        [entry] = await self.queue.read([stream], "dead", count=1, block_ms=0)
        self.now[0] += PAST_THE_TTL
        return entry


@pytest.fixture
def database_url(pg_admin_url: str, pg_template: str) -> Iterator[str]:
    """A database per test: a sweep looks at every run in its database."""
    with scratch_database(pg_admin_url, template=pg_template) as url:
        yield url


@pytest.fixture
async def setup(pool: repo.Pool) -> Setup:
    engine = Engine(pool, redis_prefix=PREFIX)
    definition = {"id": "one", "nodes": [{"id": "work", "type": "TASK", "queue": "q", "spec": {}}]}
    await Workflows(pool).create(validate_definition(definition), deploy=True)
    now = [1000.0]
    queue = FakeQueue(clock=lambda: now[0])
    sweeper = Sweeper(engine, queue, prefix=PREFIX, max_deliveries=3, batch_size=2)
    return Setup(engine, queue, sweeper, now)


async def publish(pool: repo.Pool) -> list[repo.OutboxMessage]:
    """What the outbox-enqueuer does: claim the dispatches, mark them published."""
    async with repo.transaction(pool) as conn:
        claimed = await repo.claim_outbox(conn, "dispatch")
        refs = [
            repo.TaskRef(m.run_id, str(m.task_id), "", int(m.payload["attempt"])) for m in claimed
        ]
        await repo.mark_published(conn, [m.id for m in claimed], refs)
    return claimed


async def started(s: Setup) -> tuple[str, dict[str, str], str]:
    """A run whose one task was published: its run id, its message, its stream."""
    run = await s.engine.start("one")
    [message] = await publish(s.engine.pool)
    fields = dict(message.payload)
    stream = cq.task_stream(PREFIX, "q", fields["task_id"], cq.DEFAULT_SHARDS)
    return run.run_id, fields, stream


async def task_of(s: Setup, run_id: str) -> repo.TaskRecord:
    async with repo.transaction(s.engine.pool) as conn:
        [task] = await repo.get_run_tasks(conn, run_id)
    return task


async def test_a_stuck_entry_of_a_waiting_attempt_is_delivered_again(setup: Setup) -> None:
    _, fields, stream = await started(setup)
    old = await setup.stuck(stream, fields)

    report = await setup.sweeper.sweep()

    assert report is not None and report.redelivered == 1
    [again] = await setup.queue.entries(stream)
    assert again.entry_id != old.entry_id
    assert again.fields == fields | {cq.DELIVERIES: "2"}
    assert await setup.queue.pending(stream) == []  # the old one acknowledged away
    [read] = await setup.queue.read([stream], "alive", count=1, block_ms=0)
    assert read.entry_id == again.entry_id  # new to the group: the next worker reads it


async def test_each_redelivery_counts_until_the_limit_fails_the_task(setup: Setup) -> None:
    """The policy's Redeliver(n) and the DELIVERIES field the queue writes agree, sweep
    after sweep, and the entry delivered ``max_deliveries`` (3) times is the last."""
    run_id, fields, stream = await started(setup)
    await setup.stuck(stream, fields)
    seen = []
    for _ in range(2):
        assert (await setup.sweeper.sweep()) is not None
        entry = await setup.redeliver_to_a_dead_worker(stream)
        seen.append(entry.deliveries)

    report = await setup.sweeper.sweep()

    assert seen == [2, 3]
    assert report is not None and (report.given_up, report.redelivered) == (1, 0)
    assert (await task_of(setup, run_id)).state is TaskState.FAILED
    assert setup.sweeper.totals.redelivered == 2
    assert await setup.queue.length(stream) == 0


async def test_an_entry_delivered_too_often_fails_its_task_for_good(setup: Setup) -> None:
    run_id, fields, stream = await started(setup)
    await setup.stuck(stream, fields | {cq.DELIVERIES: "3"})

    report = await setup.sweeper.sweep()

    task = await task_of(setup, run_id)
    assert report is not None and report.given_up == 1
    assert task.state is TaskState.FAILED and task.error_code == "DELIVERY_LIMIT"
    assert "delivered 3 times" in (task.error or "")
    assert await setup.queue.length(stream) == 0  # acknowledged after the failure
    assert await setup.queue.pending(stream) == []
    async with repo.transaction(setup.engine.pool) as conn:
        assert (await repo.get_run(conn, run_id)).status is RunStatus.FAILED


async def test_entries_that_mean_nothing_any_more_are_acknowledged_in_pages(
    setup: Setup,
) -> None:
    run_id, fields, stream = await started(setup)
    lease = await setup.engine.acquire_lease(run_id, fields["task_id"], 0, owner="w", ttl=30)
    assert lease.granted  # RUNNING now: its lease covers it
    await setup.queue.ensure_groups([stream])
    # more than one page (batch_size=2), and one entry that is no task message
    await setup.queue.publish([(stream, fields)] * 4 + [(stream, {"task_id": "broken"})])
    assert len(await setup.queue.read([stream], "dead", count=10, block_ms=0)) == 5
    setup.now[0] += PAST_THE_TTL

    report = await setup.sweeper.sweep()

    assert report is not None and (report.acked, report.redelivered) == (5, 0)
    assert await setup.queue.length(stream) == 0
    assert await setup.queue.pending(stream) == []


async def test_an_entry_idle_for_less_than_the_lease_ttl_is_left_to_its_worker(
    setup: Setup,
) -> None:
    _, fields, stream = await started(setup)
    await setup.queue.ensure_groups([stream])
    await setup.queue.publish([(stream, fields)])
    await setup.queue.read([stream], "busy", count=1, block_ms=0)
    setup.now[0] += 29  # within the 30s TTL

    report = await setup.sweeper.sweep()

    assert report is not None and not report
    [pending] = await setup.queue.pending(stream)
    assert (pending.consumer, pending.times_delivered) == ("busy", 1)


async def test_a_lost_dispatch_is_dispatched_again_unless_its_entry_is_live(
    setup: Setup,
) -> None:
    _, fields, stream = await started(setup)
    later = utcnow() + dt.timedelta(minutes=2)
    setup.sweeper.clock = lambda: later  # the dispatch is older than lost_after
    [live] = await setup.queue.publish([(stream, fields)])  # still in its stream: a backlog

    report = await setup.sweeper.sweep()
    assert report is not None and report.redispatched == 0

    await setup.queue.ack([(stream, live)])  # Redis lost it
    report = await setup.sweeper.sweep()
    assert report is not None and report.redispatched == 1
    [again] = await publish(setup.engine.pool)
    assert {k: v for k, v in again.payload.items() if k != "traceparent"} == {
        k: v for k, v in fields.items() if k != "traceparent"
    }


async def test_a_stream_too_long_to_search_is_taken_as_holding_its_dispatches(
    setup: Setup,
) -> None:
    _, fields, stream = await started(setup)
    later = utcnow() + dt.timedelta(minutes=2)
    setup.sweeper.clock = lambda: later
    await setup.queue.publish([(stream, {**fields, "task_id": "someone-else"})] * 2)
    limits = setup.sweeper.limits

    setup.sweeper.limits = dataclasses.replace(limits, max_scan=1)
    report = await setup.sweeper.sweep()
    assert report is not None and report.redispatched == 0

    setup.sweeper.limits = dataclasses.replace(limits, max_scan=2)  # searched: not there
    report = await setup.sweeper.sweep()
    assert report is not None and report.redispatched == 1


async def test_a_redis_outage_skips_a_sweep_and_the_loop_goes_on(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    setup.queue.down = True
    setup.sweeper.interval_seconds = 0.01
    stop = asyncio.Event()
    task = asyncio.create_task(setup.sweeper.run(stop))

    async def refused() -> bool:
        assert not task.done(), "the loop stopped on a Redis outage"
        return setup.queue.refused > 0

    async def swept_twice() -> bool:
        assert not task.done(), "the loop stopped after a Redis outage"
        return setup.sweeper.sweeps >= 2

    try:
        await until(refused, what="a sweep reached the queue while Redis was down")
        assert setup.sweeper.sweeps == 0  # that sweep did not count
        setup.queue.down = False
        await until(swept_twice, what="two sweeps after the outage")
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)
    failed = [r for r in caplog.records if "sweep failed" in r.getMessage()]
    assert failed and "is Redis up?" in failed[0].getMessage()
    assert all(r.levelno == logging.WARNING for r in failed)


async def test_a_queue_nobody_serves_is_paged_for_once(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    _, fields, stream = await started(setup)
    await setup.queue.publish([(stream, fields)])
    await setup.queue.ensure_groups([stream])  # a worker of this queue once started
    now = [utcnow()]
    setup.sweeper.clock = lambda: now[0]

    await setup.sweeper.sweep()
    now[0] += dt.timedelta(minutes=2)
    await setup.sweeper.sweep()
    await setup.sweeper.sweep()

    pages = [r for r in caplog.records if r.levelno == ALERT]
    assert len(pages) == 1
    assert f"queue stream {stream} has 1 task(s) waiting" in pages[0].getMessage()


async def test_a_served_queue_is_not_paged_for(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    _, fields, stream = await started(setup)
    await setup.queue.ensure_groups([stream])
    await setup.queue.publish([(stream, fields), (stream, fields)])
    await setup.queue.read([stream], "worker", count=1, block_ms=0)  # busy with the first
    now = [utcnow()]
    setup.sweeper.clock = lambda: now[0]

    await setup.sweeper.sweep()
    now[0] += dt.timedelta(minutes=2)
    await setup.sweeper.sweep()

    assert not [r for r in caplog.records if r.levelno == ALERT]


async def test_the_sweepers_own_consumer_does_not_hide_a_queue_nobody_serves(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    """Claiming an entry back makes the sweeper a consumer of its stream (XCLAIM);
    it is no worker. Here the queue's one worker died, its entry was delivered again,
    and its consumer was deleted (as an operator cleans up a worker gone for good):
    nobody serves the queue, and the sweeper's consumer must not say otherwise."""
    _, fields, stream = await started(setup)
    await setup.stuck(stream, fields)
    now = [utcnow()]
    setup.sweeper.clock = lambda: now[0]
    report = await setup.sweeper.sweep()
    assert report is not None and report.redelivered == 1
    assert await setup.queue.delete_consumer(stream, "dead") == 0

    await setup.sweeper.sweep()
    now[0] += dt.timedelta(minutes=2)
    await setup.sweeper.sweep()

    pages = [r for r in caplog.records if r.levelno == ALERT]
    assert len(pages) == 1
    assert f"queue stream {stream} has 1 task(s) waiting" in pages[0].getMessage()


# -- deliveries count only when the worker that held the entry is gone ----------------


async def held_by_a_live_worker(s: Setup, stream: str, fields: Mapping[str, str]) -> cq.Entry:
    """An entry a live worker took and left pending past the lease TTL (it could not
    reach the coordinator to lease it): its heartbeat has not run out."""
    await s.queue.ensure_groups([stream])
    await s.queue.publish([(stream, fields)])
    [entry] = await s.queue.read([stream], "alive", count=1, block_ms=0)
    s.now[0] += PAST_THE_TTL
    await s.queue.heartbeat(PREFIX, "alive", 30_000)
    return entry


async def test_a_live_workers_entry_is_delivered_again_without_counting(setup: Setup) -> None:
    _, fields, stream = await started(setup)
    old = await held_by_a_live_worker(setup, stream, fields)

    report = await setup.sweeper.sweep()

    assert report is not None and (report.redelivered, report.returned) == (0, 1)
    [again] = await setup.queue.entries(stream)
    assert again.entry_id != old.entry_id and again.deliveries == 1
    assert await setup.queue.pending(stream) == []


async def test_a_live_workers_entry_never_reaches_the_delivery_limit(setup: Setup) -> None:
    run_id, fields, stream = await started(setup)
    await held_by_a_live_worker(setup, stream, fields | {cq.DELIVERIES: "3"})  # the limit

    report = await setup.sweeper.sweep()

    assert report is not None and (report.given_up, report.returned) == (0, 1)
    assert (await task_of(setup, run_id)).state is not TaskState.FAILED
    [again] = await setup.queue.entries(stream)
    assert again.deliveries == 3


async def test_a_worker_whose_heartbeat_ran_out_is_gone_and_its_entry_counts(
    setup: Setup,
) -> None:
    _, fields, stream = await started(setup)
    await held_by_a_live_worker(setup, stream, fields)
    setup.now[0] += PAST_THE_TTL  # no heartbeat since: the worker died

    report = await setup.sweeper.sweep()

    assert report is not None and (report.redelivered, report.returned) == (1, 0)
    [again] = await setup.queue.entries(stream)
    assert again.deliveries == 2


# -- one bad item never stops the sweep ----------------------------------------------


async def test_an_entry_whose_run_cannot_be_loaded_does_not_stop_the_sweep(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    """Anyone who can write to Redis can add an entry; PostgreSQL refuses a NUL in text,
    so this one's task cannot even be looked up. It comes first in the same page as a
    good entry, which must still be delivered again."""
    _, fields, stream = await started(setup)
    await setup.queue.ensure_groups([stream])
    await setup.queue.publish([(stream, fields | {"run_id": "bad\x00run"}), (stream, fields)])
    assert len(await setup.queue.read([stream], "dead", count=2, block_ms=0)) == 2
    setup.now[0] += PAST_THE_TTL

    report = await setup.sweeper.sweep()

    assert report is not None and (report.redelivered, report.acked) == (1, 1)
    [again] = await setup.queue.entries(stream)
    assert again.fields["run_id"] == fields["run_id"] and again.deliveries == 2
    [alert] = [r for r in caplog.records if r.levelno == ALERT]
    assert "run " + repr("bad\x00run") in alert.getMessage()  # a repr: the NUL shows
    assert "acknowledged away" in alert.getMessage()


async def test_an_entry_whose_settling_fails_unexpectedly_does_not_stop_the_others(
    setup: Setup, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    first_run, first, stream = await started(setup)
    second_run, second, _ = await started(setup)
    await setup.queue.ensure_groups([stream])
    other = cq.task_stream(PREFIX, "q", second["task_id"], cq.DEFAULT_SHARDS)
    await setup.queue.ensure_groups([other])
    await setup.queue.publish([(stream, first), (other, second)])
    await setup.queue.read(sorted({stream, other}), "dead", count=2, block_ms=0)
    setup.now[0] += PAST_THE_TTL
    redeliver = setup.queue.redeliver

    async def broken_for_the_first(entry: cq.Entry) -> str:
        if entry.fields["run_id"] == first_run:
            raise RuntimeError("a bug")
        return await redeliver(entry)

    monkeypatch.setattr(setup.queue, "redeliver", broken_for_the_first)

    report = await setup.sweeper.sweep()

    assert report is not None and report.redelivered == 1
    redelivered = [e for s in {stream, other} for e in await setup.queue.entries(s)]
    assert [e.fields["run_id"] for e in redelivered if e.deliveries == 2] == [second_run]
    [alert] = [r for r in caplog.records if r.levelno == ALERT]
    assert f"run {first_run}" in alert.getMessage() and "RuntimeError" in alert.getMessage()


async def test_an_expired_lease_that_fails_unexpectedly_does_not_stop_the_others(
    setup: Setup, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = []
    for _ in range(2):
        run_id, fields, _ = await started(setup)
        lease = await setup.engine.acquire_lease(run_id, fields["task_id"], 0, owner="w", ttl=30)
        assert lease.granted
        await expire_lease(setup.engine.pool, run_id, fields["task_id"])
        runs.append(run_id)
    expire = setup.engine.expire_lease

    async def broken_for_the_first(run_id: str, *args: object, **kwargs: object) -> bool:
        if run_id == runs[0]:
            raise RuntimeError("a bug")
        return await expire(run_id, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(setup.engine, "expire_lease", broken_for_the_first)

    report = await setup.sweeper.sweep()

    assert report is not None and report.expired == 1
    assert (await task_of(setup, runs[1])).error_code == "LEASE_EXPIRED"
    [alert] = [r for r in caplog.records if r.levelno == ALERT]
    assert f"run {runs[0]}" in alert.getMessage() and "RuntimeError" in alert.getMessage()


async def test_a_sweep_that_fails_unexpectedly_does_not_stop_the_loop(
    setup: Setup, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    setup.sweeper.interval_seconds = 0.01
    streams = setup.queue.streams
    calls = [0]

    async def broken_once(prefix: str) -> list[str]:
        calls[0] += 1
        if calls[0] == 1:
            raise RuntimeError("a bug")
        return await streams(prefix)

    monkeypatch.setattr(setup.queue, "streams", broken_once)
    stop = asyncio.Event()
    task = asyncio.create_task(setup.sweeper.run(stop))

    async def swept() -> bool:
        assert not task.done(), "the loop stopped on an unexpected error"
        return setup.sweeper.sweeps >= 1

    try:
        await until(swept, what="a sweep after the one that failed")
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)
    assert any(r.levelno == ALERT and "RuntimeError" in r.getMessage() for r in caplog.records)
