"""One contract for both ``Queue`` implementations: the Redis adapter and the fake.

Every test here runs twice, on ``RedisQueue`` against the real server (a key
prefix of its own, deleted after) and on ``testing.FakeQueue``. Code
unit-tested on the fake relies on exactly these behaviours, so the fake
cannot drift from Redis without one of these failing.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import pytest

import composer_queue as cq
from composer_queue.testing import FakeQueue
from tests.integration.waits import until


@pytest.fixture(params=["redis", "cluster", "fake"])
def backend(request: pytest.FixtureRequest) -> tuple[str, bool] | None:
    """The Redis URL to test against and whether it is a cluster's, or None for the fake."""
    if request.param == "redis":
        return str(request.getfixturevalue("redis_url")), False
    if request.param == "cluster":
        return str(request.getfixturevalue("redis_cluster_url")), True
    return None


class Ahead:
    """How far ahead of the real time a test has moved the queue's clock (seconds): how
    entries are aged without waiting."""

    seconds = 0.0


@pytest.fixture
def ahead() -> Ahead:
    return Ahead()


@pytest.fixture
async def queue(
    backend: tuple[str, bool] | None, prefix: str, ahead: Ahead
) -> AsyncIterator[cq.Queue]:
    if backend is None:
        yield FakeQueue(clock=lambda: time.monotonic() + ahead.seconds)
        return
    url, cluster = backend
    client = cq.connect(url, cluster=cluster)
    # entry ids carry the Redis server's clock, which is this machine's in the tests
    client.clock_ms = lambda: int((time.time() + ahead.seconds) * 1000)
    try:
        yield client
        await client.drop(prefix)
    finally:  # a drop that fails (a cluster master just restarted) must not leave it open
        await client.close()


@pytest.fixture
def prefix() -> str:
    return f"contract-{uuid.uuid4().hex[:10]}"


def message(task_id: str, attempt: int = 1, priority: int = cq.DEFAULT_BAND) -> dict[str, str]:
    return cq.TaskMessage(task_id, "run", attempt, priority=priority).fields()


async def test_a_late_high_priority_entry_is_read_before_a_low_backlog(
    queue: cq.Queue, prefix: str
) -> None:
    [shard] = cq.queue_streams(prefix, "q", 1)
    await queue.ensure_groups([shard])
    backlog = [(cq.band_stream(shard, 5), message(f"low{i}", priority=5)) for i in range(5)]
    default = [(shard, message(f"mid{i}")) for i in range(2)]
    await queue.publish([*backlog, *default])
    await queue.publish([(cq.band_stream(shard, 1), message("high", priority=1))])

    order: list[str] = []
    while got := await queue.read([shard], "w", count=3, block_ms=0):
        order.extend(e.message().task_id for e in got)
        await queue.ack(e.ref for e in got)

    assert order == ["high", "mid0", "mid1", "low0", "low1", "low2", "low3", "low4"]
    assert cq.task_stream(prefix, "q", "high", 1, priority=1) == cq.band_stream(shard, 1)
    assert cq.task_stream(prefix, "q", "mid0", 1) == shard  # the default band: as before


async def test_an_entry_gains_a_band_per_minute_waited(
    queue: cq.Queue, prefix: str, ahead: Ahead
) -> None:
    [shard] = cq.queue_streams(prefix, "q", 1)
    await queue.ensure_groups([shard])
    [old] = await queue.publish([(cq.band_stream(shard, 5), message("old", priority=5))])
    await queue.publish([(cq.band_stream(shard, 1), message("new", priority=1))])
    [first] = await queue.read([shard], "w1", count=1, block_ms=0)
    assert first.message().task_id == "new"  # both fresh: band 1 first
    # entries of one millisecond in two bands have no order between them: give it back
    # in a later one than "old"'s, as new, at the end of band 1
    old_ms = int(old.partition("-")[0])  # Redis's clock, which is this machine's

    async def later() -> bool:
        return time.time() * 1000 >= old_ms + 1

    await until(later, what="a millisecond later than the first entry's")
    await queue.give_back([first])

    ahead.seconds = 4 * cq.AGING_SECONDS + 1  # band 5 less 4: band 1, and older

    [first] = await queue.read([shard], "w2", count=1, block_ms=0)
    assert first.message().task_id == "old"


async def test_a_blocked_read_is_woken_by_an_entry_of_another_band(
    queue: cq.Queue, prefix: str
) -> None:
    [shard] = cq.queue_streams(prefix, "q", 1)
    await queue.ensure_groups([shard])
    assert await queue.read([shard], "w", count=1, block_ms=1) == []  # the bands' groups too
    reader = asyncio.create_task(queue.read([shard], "w", count=1, block_ms=5000))
    await asyncio.sleep(0.05)  # let the read block (it must then be woken, not time out)
    await queue.publish([(cq.band_stream(shard, 2), message("urgent", priority=2))])
    [entry] = await asyncio.wait_for(reader, 5)
    assert entry.message().task_id == "urgent"
    assert entry.message().priority == 2


async def test_a_published_entry_is_read_once_by_the_group(queue: cq.Queue, prefix: str) -> None:
    names = cq.queue_streams(prefix, "q", 2)
    await queue.ensure_groups(names)
    await queue.ensure_groups(names)  # BUSYGROUP is handled inside
    ids = await queue.publish([(names[0], message("a")), (names[1], message("b"))])
    assert len(ids) == 2
    got = await queue.read(names, "w1", count=10, block_ms=0)
    assert sorted(e.message().task_id for e in got) == ["a", "b"]
    assert {e.entry_id for e in got} == set(ids)
    assert await queue.read(names, "w2", count=10, block_ms=0) == []


async def test_read_recreates_a_vanished_group(queue: cq.Queue, prefix: str) -> None:
    names = [cq.stream_name(prefix, "q", 0)]
    assert await queue.read(names, "w", count=1, block_ms=0) == []  # NOGROUP: recreated
    await queue.publish([(names[0], message("a"))])
    [entry] = await queue.read(names, "w", count=1, block_ms=0)
    assert entry.message().task_id == "a"
    assert entry.deliveries == 1


async def test_read_waits_for_an_entry_published_meanwhile(queue: cq.Queue, prefix: str) -> None:
    names = [cq.stream_name(prefix, "q", 0)]
    await queue.ensure_groups(names)
    reader = asyncio.create_task(queue.read(names, "w", count=1, block_ms=5000))
    await asyncio.sleep(0.05)  # let the read block (it must then be woken, not time out)
    await queue.publish([(names[0], message("late"))])
    [entry] = await asyncio.wait_for(reader, 5)
    assert entry.message().task_id == "late"


async def test_a_read_blocked_on_a_stream_that_is_deleted_recreates_it(
    queue: cq.Queue, prefix: str
) -> None:
    names = [cq.stream_name(prefix, "q", 0)]
    await queue.ensure_groups(names)
    reader = asyncio.create_task(queue.read(names, "w", count=1, block_ms=5000))
    await asyncio.sleep(0.05)  # let the read block (when it has not yet, the test still holds)
    await queue.delete(names)  # Redis restarted empty, or was flushed
    assert await asyncio.wait_for(reader, 5) == []
    await queue.publish([(names[0], message("after"))])
    [entry] = await queue.read(names, "w", count=1, block_ms=0)
    assert entry.message().task_id == "after"


async def test_ack_removes_the_entry_and_its_pending_record(queue: cq.Queue, prefix: str) -> None:
    stream = cq.stream_name(prefix, "q", 0)
    await queue.ensure_groups([stream])
    await queue.publish([(stream, message("a")), (stream, message("b"))])
    a, b = await queue.read([stream], "w", count=10, block_ms=0)
    [pa, _] = await queue.pending(stream)
    assert (pa.entry_id, pa.consumer, pa.times_delivered) == (a.entry_id, "w", 1)
    await queue.ack([a.ref, b.ref])
    assert await queue.pending(stream) == []
    assert await queue.length(stream) == 0
    await queue.ack([a.ref])  # acknowledging twice is harmless
    assert await queue.pending(cq.stream_name(prefix, "none", 0)) == []


async def test_reclaim_claims_idle_entries_and_counts_deliveries(
    queue: cq.Queue, prefix: str
) -> None:
    stream = cq.stream_name(prefix, "q", 0)
    assert (await queue.reclaim(stream, "sweeper", min_idle_ms=0)).done  # no group yet
    await queue.ensure_groups([stream])
    await queue.publish([(stream, message(f"t{i}")) for i in range(5)])
    await queue.read([stream], "dead", count=10, block_ms=0)
    assert (await queue.reclaim(stream, "sweeper", min_idle_ms=60_000)).entries == []
    claimed: list[cq.Entry] = []
    start = "0-0"
    while True:
        page = await queue.reclaim(stream, "sweeper", min_idle_ms=0, start=start, count=2)
        claimed.extend(page.entries)
        if page.done:
            break
        start = page.next_start
    assert [e.message().task_id for e in claimed] == [f"t{i}" for i in range(5)]
    pending = await queue.pending(stream)
    assert {(p.consumer, p.times_delivered) for p in pending} == {("sweeper", 2)}


async def test_a_stream_no_worker_ever_read_has_nothing_to_reclaim(
    queue: cq.Queue, prefix: str
) -> None:
    stream = cq.stream_name(prefix, "q", 0)
    await queue.publish([(stream, message("a"))])  # a stream, but no group (NOGROUP inside)
    page = await queue.reclaim(stream, "sweeper", min_idle_ms=0)
    assert (page.entries, page.done) == ([], True)
    assert await queue.backlog(stream) is None
    assert await queue.streams(prefix) == [stream]


async def test_reclaim_goes_on_past_entries_acknowledged_between_pages(
    queue: cq.Queue, prefix: str
) -> None:
    """The sweeper settles each page (ack, redeliver) before it asks for the next."""
    stream = cq.stream_name(prefix, "q", 0)
    await queue.ensure_groups([stream])
    await queue.publish([(stream, message(f"t{i}")) for i in range(5)])
    await queue.read([stream], "dead", count=10, block_ms=0)
    seen: list[str] = []
    start = "0-0"
    while True:
        page = await queue.reclaim(stream, "sweeper", min_idle_ms=0, start=start, count=2)
        seen += [e.message().task_id for e in page.entries]
        await queue.ack(e.ref for e in page.entries)
        if page.done:
            break
        start = page.next_start
    assert seen == [f"t{i}" for i in range(5)]
    assert await queue.pending(stream) == []
    assert await queue.length(stream) == 0


async def test_only_a_claim_makes_a_consumer_and_backlog_can_leave_one_out(
    queue: cq.Queue, prefix: str
) -> None:
    """The lease-sweeper's consumer is no worker: ``ignore_consumer`` leaves it out."""
    stream = cq.stream_name(prefix, "q", 0)
    await queue.ensure_groups([stream])
    await queue.publish([(stream, message("a")), (stream, message("b"))])
    assert (await queue.reclaim(stream, "sweeper", min_idle_ms=0)).entries == []
    assert await queue.backlog(stream) == cq.Backlog(lag=2, pending=0, consumers=0)

    await queue.read([stream], "dead", count=1, block_ms=0)
    [claimed] = (await queue.reclaim(stream, "sweeper", min_idle_ms=0)).entries
    assert await queue.backlog(stream) == cq.Backlog(lag=1, pending=1, consumers=2)
    assert await queue.backlog(stream, ignore_consumer="sweeper") == cq.Backlog(1, 1, 1)

    assert await queue.delete_consumer(stream, "dead") == 0  # it holds nothing now
    assert await queue.backlog(stream, ignore_consumer="sweeper") == cq.Backlog(1, 1, 0)
    assert await queue.backlog(stream, ignore_consumer="nobody") == cq.Backlog(1, 1, 1)
    assert await queue.delete_consumer(stream, "sweeper") == 1  # what it held goes with it
    assert await queue.pending(stream) == []
    assert await queue.backlog(stream) == cq.Backlog(lag=1, pending=0, consumers=0)
    assert await queue.length(stream) == 2  # the entries themselves stay
    assert claimed.message().task_id == "a"
    assert await queue.delete_consumer(stream, "never-seen") == 0
    assert await queue.delete_consumer(cq.stream_name(prefix, "none", 0), "dead") == 0


async def test_redeliver_adds_it_anew_with_one_more_delivery(queue: cq.Queue, prefix: str) -> None:
    stream = cq.stream_name(prefix, "q", 0)
    await queue.ensure_groups([stream])
    await queue.publish([(stream, message("a"))])
    [first] = await queue.read([stream], "dead", count=1, block_ms=0)
    new_id = await queue.redeliver(first)
    assert new_id != first.entry_id
    assert await queue.pending(stream) == []
    [again] = await queue.read([stream], "alive", count=1, block_ms=0)
    assert (again.entry_id, again.deliveries) == (new_id, 2)
    assert again.message() == first.message()
    assert await queue.length(stream) == 1


async def test_backlog_counts_waiting_and_pending_entries(queue: cq.Queue, prefix: str) -> None:
    stream = cq.stream_name(prefix, "q", 0)
    assert await queue.backlog(stream) is None
    await queue.publish([(stream, message("a")), (stream, message("b"))])
    assert await queue.backlog(stream) is None  # a stream, but no group yet
    await queue.ensure_groups([stream])
    assert await queue.backlog(stream) == cq.Backlog(lag=2, pending=0, consumers=0)
    await queue.read([stream], "w", count=1, block_ms=0)
    backlog = await queue.backlog(stream)
    assert backlog == cq.Backlog(lag=1, pending=1, consumers=1)
    assert backlog is not None and backlog.waiting == 2


async def test_entries_page_and_find_attempts(queue: cq.Queue, prefix: str) -> None:
    stream = cq.stream_name(prefix, "q", 0)
    ids = await queue.publish([(stream, message(f"t{i}", attempt=i)) for i in range(5)])
    assert [e.entry_id for e in await queue.entries(stream, count=2)] == ids[:2]
    after = await queue.entries(stream, start="(" + ids[1], count=2)
    assert [e.entry_id for e in after] == ids[2:4]
    assert [e.entry_id for e in await queue.entries(stream, start=ids[4], end=ids[4])] == ids[4:]
    found = await cq.find_attempts(queue, stream, {"t1", "t3", "other"})
    assert found == {("t1", 1), ("t3", 3)}
    assert await cq.find_attempts(queue, stream, {"t1"}, max_scan=4) is None
    assert await queue.entries(cq.stream_name(prefix, "none", 0)) == []
    # the sweeper need not know a task's band: every band of the shard is searched
    await queue.publish([(cq.band_stream(stream, 1), message("urgent", 2, priority=1))])
    assert await cq.find_attempts(queue, stream, {"urgent", "t1"}) == {("urgent", 2), ("t1", 1)}


async def test_find_attempts_searches_past_one_page(queue: cq.Queue, prefix: str) -> None:
    stream = cq.stream_name(prefix, "long", 0)
    await queue.publish([(stream, message(f"t{i}", attempt=i % 3)) for i in range(2500)])
    found = await cq.find_attempts(queue, stream, {"t5", "t2499", "absent"})
    assert found == {("t5", 2), ("t2499", 0)}


async def test_streams_lists_queue_streams_and_drop_deletes_them(
    queue: cq.Queue, prefix: str
) -> None:
    names = cq.queue_streams(prefix, "q", 3)
    await queue.ensure_groups(reversed(names))
    await queue.notify(cq.channel(prefix, cq.TIMER), "")  # not a key
    assert await queue.streams(prefix) == sorted(names)
    assert await queue.streams(prefix + "x") == []
    assert await queue.delete([names[0], cq.stream_name(prefix, "none", 0)]) == 1
    assert await queue.read([names[0]], "w", count=1, block_ms=0) == []  # recreated
    assert await queue.drop(prefix) == 3
    assert await queue.streams(prefix) == []


async def test_hints_reach_every_subscriber(queue: cq.Queue, prefix: str) -> None:
    chan = cq.channel(prefix, cq.RUN_FINISHED)
    got: list[tuple[str, str]] = []
    done = asyncio.Event()

    def on_message(channel: str, message: str) -> None:
        got.append((channel, message))
        done.set()

    async with cq.Subscriber(queue, [chan], on_message) as subscriber:
        await asyncio.wait_for(subscriber.subscribed.wait(), 5)
        assert await queue.subscribers(chan) == 1
        await cq.send_hint(queue, prefix, cq.RUN_FINISHED, "run-1")
        await asyncio.wait_for(done.wait(), 5)
    assert got == [(chan, "run-1")]
    assert await queue.subscribers(chan) == 0


async def test_hints_sent_together_arrive_and_finished_runs_share_one(
    queue: cq.Queue, prefix: str
) -> None:
    finished, enqueuer = cq.channel(prefix, cq.RUN_FINISHED), cq.channel(prefix, cq.ENQUEUER)
    got: list[tuple[str, str]] = []

    async def all_three() -> bool:  # one message names both finished runs
        return len(got) == 2

    async def both_subscribed() -> bool:  # on a cluster, each channel's shard has it
        return await queue.subscribers(finished) == await queue.subscribers(enqueuer) == 1

    async with cq.Subscriber(queue, [finished, enqueuer], lambda c, m: got.append((c, m))) as s:
        await asyncio.wait_for(s.subscribed.wait(), 5)
        await until(both_subscribed, what="both channels subscribed")
        hints = [(cq.RUN_FINISHED, "run-1"), (cq.ENQUEUER, ""), (cq.RUN_FINISHED, "run-2")]
        await cq.send_hints(queue, prefix, hints)
        await until(all_three, what="the hints")
    assert [cq.finished_runs(m) for c, m in got if c == finished] == [["run-1", "run-2"]]
    assert [m for c, m in got if c == enqueuer] == [""]


async def test_a_waker_wakes_on_a_hint_and_keeps_its_message(queue: cq.Queue, prefix: str) -> None:
    async with cq.Waker(queue, prefix, cq.ENQUEUER) as waker:
        await asyncio.wait_for(waker.subscribed.wait(), 5)
        assert await waker.wait(0.01) is False
        await cq.send_hint(queue, prefix, cq.ENQUEUER, cq.WEBHOOK)
        assert await waker.wait(5) is True
        assert waker.take_messages() == {cq.WEBHOOK}


@pytest.fixture
async def unreachable(backend: tuple[str, bool] | None) -> AsyncIterator[cq.Queue]:
    """A server that cannot be reached: nothing listens on port 1; the fake is down."""
    if backend is None:
        fake = FakeQueue()
        fake.down = True
        yield fake
        return
    client = cq.connect("redis://127.0.0.1:1/0", cluster=backend[1])
    yield client
    await client.close()


async def test_an_unreachable_server_is_queue_unavailable(unreachable: cq.Queue) -> None:
    stream = "nowhere:q:q:0"
    entry = cq.Entry(stream, "1-0", message("a"))
    calls = {
        "listing the streams": unreachable.streams("nowhere"),
        "claiming idle entries": unreachable.reclaim(stream, "sweeper", min_idle_ms=0),
        "acknowledging": unreachable.ack([entry.ref]),
        "again": unreachable.redeliver(entry),
        "XLEN": unreachable.length(stream),
        "XRANGE": unreachable.entries(stream),
        "XINFO GROUPS": unreachable.backlog(stream, ignore_consumer="sweeper"),
        "deleting consumer": unreachable.delete_consumer(stream, "dead"),
    }
    for what, call in calls.items():
        with pytest.raises(cq.QueueUnavailable, match=what):
            await call
