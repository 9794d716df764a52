"""RedisStreamOps on a real Redis: the contract the sweeper's loop relies on."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

import composer_queue as cq
from composer_common import streams
from composer_lease_sweeper.redis_stream_ops import CONSUMER, RedisStreamOps
from composer_lease_sweeper.stream_ops import Backlog, StreamsUnavailable


@pytest.fixture
async def ops(redis_url: str) -> AsyncIterator[RedisStreamOps]:
    prefix = f"test-{uuid.uuid4().hex[:10]}"
    client = cq.connect(redis_url).raw
    try:
        yield RedisStreamOps(client, prefix)
    finally:
        keys = [k async for k in client.scan_iter(match=f"{prefix}:*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()


def message(task_id: str, attempt: int = 0) -> dict[str, str]:
    return {"task_id": task_id, "attempt": str(attempt)}


async def take(redis: Any, stream: str, count: int) -> None:
    """A consumer reads ``count`` entries and goes away without acknowledging them."""
    await redis.xreadgroup(streams.GROUP, "gone", {stream: ">"}, count=count)


async def test_a_stream_no_worker_ever_read_has_nothing_to_reclaim(ops: RedisStreamOps) -> None:
    stream = streams.stream_name(ops.prefix, "q", 0)
    await ops.redis.xadd(stream, message("t1"))
    page = await ops.reclaim(stream, min_idle_seconds=0, count=10)
    assert (page.entries, page.cursor) == ([], None)
    assert await ops.backlog(stream) is None
    assert await ops.queue_streams() == [stream]


async def test_reclaim_pages_through_idle_entries_and_ack_removes_them(
    ops: RedisStreamOps,
) -> None:
    stream = streams.stream_name(ops.prefix, "q", 1)
    await ops.redis.xgroup_create(stream, streams.GROUP, id="0", mkstream=True)
    for i in range(5):
        await ops.redis.xadd(stream, message(f"t{i}"))
    await take(ops.redis, stream, 5)

    seen: list[str] = []
    cursor: str | None = None
    while True:
        page = await ops.reclaim(stream, min_idle_seconds=0, count=2, cursor=cursor)
        seen += [e.fields["task_id"] for e in page.entries]
        await ops.ack(stream, [e.id for e in page.entries])
        if page.cursor is None:
            break
        cursor = page.cursor

    assert seen == [f"t{i}" for i in range(5)]
    assert await ops.length(stream) == 0
    assert (await ops.redis.xpending(stream, streams.GROUP))["pending"] == 0


async def test_an_entry_idle_for_less_than_the_threshold_is_not_reclaimed(
    ops: RedisStreamOps,
) -> None:
    stream = streams.stream_name(ops.prefix, "q", 2)
    await ops.redis.xgroup_create(stream, streams.GROUP, id="0", mkstream=True)
    await ops.redis.xadd(stream, message("t1"))
    await take(ops.redis, stream, 1)
    assert (await ops.reclaim(stream, min_idle_seconds=60, count=10)).entries == []


async def test_redeliver_adds_anew_and_removes_the_old_entry(ops: RedisStreamOps) -> None:
    stream = streams.stream_name(ops.prefix, "q", 3)
    await ops.redis.xgroup_create(stream, streams.GROUP, id="0", mkstream=True)
    await ops.redis.xadd(stream, message("t1"))
    await take(ops.redis, stream, 1)
    [old] = (await ops.reclaim(stream, min_idle_seconds=0, count=10)).entries

    await ops.redeliver(stream, old.id, {**old.fields, "deliveries": "2"})

    [(new_id, fields)] = await ops.redis.xrange(stream)
    assert new_id != old.id and fields == {**message("t1"), "deliveries": "2"}
    pending = await ops.redis.xpending_range(stream, streams.GROUP, "-", "+", 10, CONSUMER)
    assert pending == []
    # the new entry waits unread; the consumers are the one that went away and the sweeper's
    assert await ops.backlog(stream) == Backlog(waiting=1, consumers=2)


async def test_attempts_in_finds_the_wanted_attempts_past_one_page(ops: RedisStreamOps) -> None:
    stream = streams.stream_name(ops.prefix, "long", 0)
    async with ops.redis.pipeline(transaction=False) as pipe:
        for i in range(2500):
            pipe.xadd(stream, message(f"t{i}", attempt=i % 3))
        await pipe.execute()
    found = await ops.attempts_in(stream, {"t5", "t2499", "absent"})
    assert found == {("t5", 2), ("t2499", 0)}
    assert await ops.length(stream) == 2500


async def test_an_unreachable_redis_is_streams_unavailable() -> None:
    client = cq.connect("redis://127.0.0.1:1/0").raw
    try:
        with pytest.raises(StreamsUnavailable, match="cannot list the streams"):
            await RedisStreamOps(client, "nowhere").queue_streams()
    finally:
        await client.aclose()
