"""The lease-sweeper's loop on a real database and in-memory streams (no Redis).

``FakeStreams`` is an in-memory model of ``StreamOps``: each stream an
ordered set of entries, some of them pending on a consumer that went away
(what ``reclaim`` hands back). The tests check that the loop gathers the
facts, asks the engine's recovery policy and applies its decisions — the
policy's own rules are unit-tested in tests/unit/engine/test_recovery.py, and
tests/integration/e2e/test_recovery.py runs the same loop on real Redis.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import pytest

import composer_repo as repo
from composer_common import streams
from composer_core.model import RunStatus, TaskState
from composer_engine import Engine, RecoveryLimits, Workflows, utcnow, validate_definition
from composer_lease_sweeper.loop import DELIVERIES, Sweeper
from composer_lease_sweeper.stream_ops import (
    Backlog,
    Reclaimed,
    StreamEntry,
    StreamOps,
    StreamsUnavailable,
)
from tests.integration.databases import scratch_database

PREFIX = "sweeper-test"


@dataclass
class FakeStreams:
    """Queue streams in memory: entries per stream, and which of them sit pending on a
    dead consumer (idle for longer than any threshold)."""

    entries: dict[str, dict[str, Mapping[str, str]]] = field(default_factory=dict)
    stuck: dict[str, list[str]] = field(default_factory=dict)
    backlogs: dict[str, Backlog] = field(default_factory=dict)
    failures: list[Exception] = field(default_factory=list)
    acked: list[str] = field(default_factory=list)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def add(self, stream: str, fields: Mapping[str, str], *, stuck: bool = False) -> str:
        entry_id = f"{next(self._ids)}-0"
        self.entries.setdefault(stream, {})[entry_id] = dict(fields)
        if stuck:
            self.stuck.setdefault(stream, []).append(entry_id)
        return entry_id

    async def queue_streams(self) -> list[str]:
        if self.failures:
            raise self.failures.pop(0)
        return sorted(self.entries)

    async def reclaim(
        self, stream: str, *, min_idle_seconds: float, count: int, cursor: str | None = None
    ) -> Reclaimed:
        # Like XAUTOCLAIM: the cursor is the id to go on from, so entries acknowledged
        # meanwhile do not shift the scan.
        ids = [i for i in self.stuck.get(stream, []) if _seq(i) >= _seq(cursor or "0-0")]
        page, rest = ids[:count], ids[count:]
        entries = [StreamEntry(i, self.entries[stream][i]) for i in page]
        return Reclaimed(entries, rest[0] if rest else None)

    async def ack(self, stream: str, entry_ids: Sequence[str]) -> None:
        for entry_id in entry_ids:
            self.entries.get(stream, {}).pop(entry_id, None)
            self.acked.append(entry_id)
        self.stuck[stream] = [i for i in self.stuck.get(stream, []) if i not in entry_ids]

    async def redeliver(self, stream: str, entry_id: str, fields: Mapping[str, str]) -> None:
        self.add(stream, fields)
        await self.ack(stream, [entry_id])

    async def length(self, stream: str) -> int:
        return len(self.entries.get(stream, {}))

    async def attempts_in(self, stream: str, task_ids: Collection[str]) -> set[tuple[str, int]]:
        return {
            (f["task_id"], int(f["attempt"]))
            for f in self.entries.get(stream, {}).values()
            if f["task_id"] in task_ids
        }

    async def backlog(self, stream: str) -> Backlog | None:
        return self.backlogs.get(stream)


def _seq(entry_id: str) -> int:
    return int(entry_id.split("-")[0])


def _fake_is_stream_ops(fake: FakeStreams) -> StreamOps:
    return fake  # mypy checks that the fake implements the Protocol


@dataclass
class Setup:
    engine: Engine
    fake: FakeStreams
    sweeper: Sweeper


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
    fake = FakeStreams()
    sweeper = Sweeper(engine, fake, prefix=PREFIX, max_deliveries=3, batch_size=2)
    return Setup(engine, fake, sweeper)


async def publish(pool: repo.Pool) -> list[repo.OutboxMessage]:
    """What the outbox-enqueuer does: claim the dispatches, mark them published."""
    async with repo.transaction(pool) as conn:
        claimed = await repo.claim_outbox(conn, "dispatch")
        refs = [
            repo.TaskRef(m.run_id, str(m.task_id), m.payload["node_id"], int(m.payload["attempt"]))
            for m in claimed
        ]
        await repo.mark_published(conn, [m.id for m in claimed], refs)
    return claimed


async def started(s: Setup) -> tuple[str, dict[str, str], str]:
    """A run whose one task was published: its run id, its message, its stream."""
    run = await s.engine.start("one")
    [message] = await publish(s.engine.pool)
    fields = dict(message.payload)
    stream = streams.stream_name(PREFIX, "q", streams.shard_of(fields["task_id"], 4))
    return run.run_id, fields, stream


async def task_of(s: Setup, run_id: str) -> repo.TaskRecord:
    async with repo.transaction(s.engine.pool) as conn:
        [task] = await repo.get_run_tasks(conn, run_id)
    return task


async def test_a_stuck_entry_of_a_waiting_attempt_is_delivered_again(setup: Setup) -> None:
    _, fields, stream = await started(setup)
    old = setup.fake.add(stream, fields, stuck=True)

    report = await setup.sweeper.sweep()

    assert report is not None and report.redelivered == 1
    [(new, again)] = setup.fake.entries[stream].items()
    assert new != old and again == fields | {DELIVERIES: "2"}
    assert setup.fake.stuck[stream] == []  # the old one acknowledged away


async def test_an_entry_delivered_too_often_fails_its_task_for_good(setup: Setup) -> None:
    run_id, fields, stream = await started(setup)
    setup.fake.add(stream, fields | {DELIVERIES: "3"}, stuck=True)

    report = await setup.sweeper.sweep()

    task = await task_of(setup, run_id)
    assert report is not None and report.given_up == 1
    assert task.state is TaskState.FAILED and task.error_code == "DELIVERY_LIMIT"
    assert "delivered 3 times" in (task.error or "")
    assert setup.fake.entries[stream] == {}  # acknowledged after the failure
    async with repo.transaction(setup.engine.pool) as conn:
        assert (await repo.get_run(conn, run_id)).status is RunStatus.FAILED


async def test_entries_that_mean_nothing_any_more_are_acknowledged_in_pages(
    setup: Setup,
) -> None:
    run_id, fields, stream = await started(setup)
    lease = await setup.engine.acquire_lease(run_id, fields["task_id"], 0, owner="w", ttl=30)
    assert lease.granted  # RUNNING now: its lease covers it
    for _ in range(4):  # more than one page (batch_size=2)
        setup.fake.add(stream, fields, stuck=True)
    setup.fake.add(stream, {"task_id": "broken"}, stuck=True)  # malformed

    report = await setup.sweeper.sweep()

    assert report is not None and (report.acked, report.redelivered) == (5, 0)
    assert setup.fake.entries[stream] == {}


async def test_a_lost_dispatch_is_dispatched_again_unless_its_entry_is_live(
    setup: Setup,
) -> None:
    _, fields, stream = await started(setup)
    later = utcnow() + dt.timedelta(minutes=2)
    setup.sweeper.clock = lambda: later  # the dispatch is older than lost_after
    live = setup.fake.add(stream, fields)  # still in its stream: a backlog

    report = await setup.sweeper.sweep()
    assert report is not None and report.redispatched == 0

    await setup.fake.ack(stream, [live])  # Redis lost it
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
    setup.sweeper.limits = RecoveryLimits(max_scan=1)
    for _ in range(2):
        setup.fake.add(stream, {**fields, "task_id": "someone-else"})

    report = await setup.sweeper.sweep()
    assert report is not None and report.redispatched == 0


async def test_a_streams_outage_skips_a_sweep_and_the_loop_goes_on(setup: Setup) -> None:
    setup.fake.failures.append(StreamsUnavailable("cannot list the streams: injected"))
    setup.sweeper.interval_seconds = 0.01
    stop = asyncio.Event()
    task = asyncio.create_task(setup.sweeper.run(stop))
    try:
        deadline = asyncio.get_running_loop().time() + 10
        while setup.sweeper.sweeps < 2:
            assert not task.done(), "the loop stopped on a streams outage"
            assert asyncio.get_running_loop().time() < deadline, "no sweep after the outage"
            await asyncio.sleep(0.01)
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)
    assert not setup.fake.failures


async def test_a_queue_nobody_serves_is_paged_for_once(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    _, fields, stream = await started(setup)
    setup.fake.add(stream, fields)
    setup.fake.backlogs[stream] = Backlog(waiting=1, consumers=0)
    now = [utcnow()]
    setup.sweeper.clock = lambda: now[0]

    await setup.sweeper.sweep()
    now[0] += dt.timedelta(minutes=2)
    await setup.sweeper.sweep()
    await setup.sweeper.sweep()

    pages = [r for r in caplog.records if "no worker has ever read it" in r.getMessage()]
    assert len(pages) == 1
