"""The contract of what the workers and the lease-sweeper need to count deliveries
honestly: reads bounded in all (not per stream), pending entries with their holder,
claims by id, heartbeats, and entries that are not UTF-8. Runs on Redis and the fake.
"""

from __future__ import annotations

import asyncio
from urllib.parse import SplitResult, urlsplit

import pytest

import composer_queue as cq
from composer_queue.testing import FakeQueue
from tests.integration.queue.test_contract import ahead, backend, message, prefix, queue

__all__ = ["ahead", "backend", "prefix", "queue"]  # the fixtures, shared with test_contract


async def test_read_takes_at_most_count_entries_in_all_streams(
    queue: cq.Queue, prefix: str
) -> None:
    names = cq.queue_streams(prefix, "q", 4)
    await queue.ensure_groups(names)
    await queue.publish([(name, message(f"{name[-1]}{i}")) for name in names for i in range(3)])

    first = await queue.read(names, "w", count=2, block_ms=0)
    rotated = await queue.read([*names[2:], *names[:2]], "w", count=5, block_ms=0)

    assert [e.message().task_id for e in first] == ["00", "01"]  # in the order of the streams
    assert [e.message().task_id for e in rotated] == ["20", "21", "22", "30", "31"]
    assert sum([len(await queue.pending(n)) for n in names]) == 7  # nothing more was taken


async def test_a_blocked_read_takes_at_most_count_and_gives_the_rest_back(
    queue: cq.Queue, prefix: str
) -> None:
    names = cq.queue_streams(prefix, "q", 2)
    await queue.ensure_groups(names)
    reader = asyncio.create_task(queue.read(names, "w", count=1, block_ms=5000))
    await asyncio.sleep(0.05)  # let the read block (when it has not yet, the test still holds)
    await queue.publish([(names[0], message("a")), (names[1], message("b"))])

    [got] = await asyncio.wait_for(reader, 5)
    rest = await queue.read(names, "other", count=10, block_ms=0)

    assert [p.entry_id for n in names for p in await queue.pending(n) if p.consumer == "w"] == [
        got.entry_id
    ]
    assert sorted(e.message().task_id for e in [got, *rest]) == ["a", "b"]
    assert all(e.deliveries == 1 for e in rest)  # given back uncounted


async def test_pending_filters_by_idle_time_and_pages_by_id(queue: cq.Queue, prefix: str) -> None:
    stream = cq.stream_name(prefix, "q", 0)
    await queue.ensure_groups([stream])
    await queue.publish([(stream, message(f"t{i}")) for i in range(3)])
    read = await queue.read([stream], "w", count=3, block_ms=0)

    assert await queue.pending(stream, min_idle_ms=60_000) == []
    first = await queue.pending(stream, count=2)
    after = await queue.pending(stream, start=f"({first[-1].entry_id}")

    assert [p.entry_id for p in [*first, *after]] == [e.entry_id for e in read]
    assert {p.consumer for p in first} == {"w"}


async def test_claim_takes_the_named_entries_still_idle(queue: cq.Queue, prefix: str) -> None:
    stream = cq.stream_name(prefix, "q", 0)
    await queue.ensure_groups([stream])
    await queue.publish([(stream, message(f"t{i}")) for i in range(3)])
    a, b, c = await queue.read([stream], "dead", count=3, block_ms=0)
    await queue.ack([b.ref])  # its worker finished it meanwhile

    assert await queue.claim(stream, "sweeper", [a.entry_id], min_idle_ms=60_000) == []
    claimed = await queue.claim(
        stream, "sweeper", [a.entry_id, b.entry_id, c.entry_id], min_idle_ms=0
    )

    assert [e.message().task_id for e in claimed] == ["t0", "t2"]
    assert {(p.consumer, p.times_delivered) for p in await queue.pending(stream)} == {
        ("sweeper", 2)
    }


async def test_a_heartbeat_says_a_consumer_is_alive_until_it_runs_out(
    queue: cq.Queue, prefix: str
) -> None:
    await queue.heartbeat(prefix, "w1", 60_000)
    await queue.heartbeat(prefix, "w2", 1)
    if isinstance(queue, FakeQueue):
        await queue.heartbeat(prefix, "w2", 0)  # the fake's clock is real time: run out now

    async def w2_gone() -> bool:
        return "w2" not in await queue.alive(prefix, ["w2"])

    deadline = asyncio.get_running_loop().time() + 5
    while not await w2_gone():
        assert asyncio.get_running_loop().time() < deadline, "w2's heartbeat did not run out"
        await asyncio.sleep(0.005)
    assert await queue.alive(prefix, ["w1", "w2", "never"]) == {"w1"}
    assert await queue.alive(f"{prefix}-other", ["w1"]) == set()


async def test_an_entry_that_is_not_utf8_is_handed_out_as_malformed(
    queue: cq.Queue, prefix: str, backend: tuple[str, bool] | None
) -> None:
    """Anyone who can write to Redis can add one; it must not fail a read or a claim."""
    stream = cq.stream_name(prefix, "q", 0)
    await queue.ensure_groups([stream])
    if backend is None:
        assert isinstance(queue, FakeQueue)
        [bad] = await queue.publish([(stream, {"task_id": "x"})])
        queue.poison.add(bad)
    else:
        bad = await raw_xadd(backend[0], stream, b"task_id", b"\xff\xfe")
    await queue.publish([(stream, message("good"))])

    poison, good = await queue.read([stream], "w", count=2, block_ms=0)
    [claimed] = await queue.claim(stream, "sweeper", [bad], min_idle_ms=0)

    assert good.message().task_id == "good"
    assert (poison.entry_id, claimed.entry_id) == (bad, bad)
    assert poison.problem is not None and claimed.problem is not None
    for entry in (poison, claimed):
        with pytest.raises(cq.MalformedMessage, match="not UTF-8"):
            entry.message()


async def raw_xadd(url: str, stream: str, field: bytes, value: bytes) -> str:
    """XADD bytes that are not UTF-8, over a bare RESP connection: composer_queue writes
    text only, and nothing outside it may import redis (tests/unit/test_imports.py).
    A cluster node that does not hold the stream's slot answers MOVED: followed."""
    parts = urlsplit(url)
    try:
        return await _raw_xadd(
            parts, parts.hostname or "127.0.0.1", parts.port or 6379, stream, field, value
        )
    except _Moved as moved:
        return await _raw_xadd(parts, moved.host, moved.port, stream, field, value)


class _Moved(Exception):
    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port


async def _raw_xadd(
    parts: SplitResult, host: str, port: int, stream: str, field: bytes, value: bytes
) -> str:
    reader, writer = await asyncio.open_connection(host, port)

    async def call(*args: bytes) -> bytes:
        writer.write(
            b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%b\r\n" % (len(a), a) for a in args)
        )
        line = await reader.readline()
        if line.startswith(b"$"):
            line = await reader.readline()
        if line.startswith(b"-MOVED"):
            address = line.split()[-1].decode()
            raise _Moved(address.rpartition(":")[0], int(address.rpartition(":")[2]))
        assert not line.startswith(b"-"), line
        return line.rstrip(b"\r\n").lstrip(b"+")

    try:
        if parts.password:
            await call(
                b"AUTH",
                *([parts.username.encode()] if parts.username else []),
                parts.password.encode(),
            )
        if parts.path.strip("/"):
            await call(b"SELECT", parts.path.strip("/").encode())
        return (await call(b"XADD", stream.encode(), b"*", field, value)).decode()
    finally:
        writer.close()
        await writer.wait_closed()
