"""The real adapter: ``Queue`` over redis-py's asyncio client.

RESP2 is fixed on purpose: redis-py 8 defaults to RESP3, where XREADGROUP
replies nest differently; one protocol means one reply parser. Responses are
decoded: every field we write is UTF-8 text.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any, cast

import redis.asyncio as aioredis
from redis.asyncio.client import PubSub

from composer_queue._errors import (
    QueueUnavailable,
    is_existing_group,
    is_missing_group,
    is_missing_stream,
    translated,
)
from composer_queue._messages import DELIVERIES, GROUP, Backlog, Entry, Pending, Reclaimed


def connect(url: str, *, connect_timeout: float | None = None) -> RedisQueue:
    """A client for the Redis at ``url`` (connects lazily, on the first command).

    ``connect_timeout`` bounds opening a connection (None: the OS's own timeout).
    """
    client = aioredis.from_url(
        url,
        decode_responses=True,
        # bytes that are not UTF-8 (anyone who can write to Redis can send them) become
        # U+FFFD instead of an error that ends a subscription or a worker's read
        encoding_errors="replace",
        protocol=2,
        health_check_interval=30,
        socket_connect_timeout=connect_timeout,
    )
    return RedisQueue(client)


class RedisQueue:
    """``Queue`` on a Redis server. Use ``connect(url)``; ``async with`` closes it."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._redis = client

    async def __aenter__(self) -> RedisQueue:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- connection --------------------------------------------------------------

    async def ping(self) -> None:
        with translated("PING"):
            await self._redis.ping()

    async def close(self) -> None:
        with contextlib.suppress(Exception):  # closing is best effort: nothing to retry
            await self._redis.aclose()

    async def server_pid(self) -> int:
        """The Redis server's process id (the benchmark measures its CPU)."""
        with translated("INFO server"):
            info = await self._redis.info("server")
        return int(info["process_id"])

    async def command_calls(self) -> dict[str, int]:
        """Calls per command since the server started (INFO commandstats; the benchmarks)."""
        with translated("INFO commandstats"):
            stats = await self._redis.info("commandstats")
        return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}

    # -- streams -----------------------------------------------------------------

    async def publish(self, entries: Sequence[tuple[str, Mapping[str, str]]]) -> list[str]:
        if not entries:
            return []
        with translated(f"publishing {len(entries)} message(s)"):
            async with self._redis.pipeline(transaction=False) as pipe:
                for stream, fields in entries:
                    pipe.xadd(stream, dict(fields))  # type: ignore[arg-type]
                ids = await pipe.execute()
        return [str(i) for i in ids]

    async def ensure_groups(self, streams: Iterable[str]) -> None:
        for stream in streams:
            try:
                with translated(f"creating the group of {stream}"):
                    await self._redis.xgroup_create(stream, GROUP, id="0", mkstream=True)
            except Exception as exc:
                if not is_existing_group(exc.__cause__ or exc):
                    raise

    async def read(
        self, streams: Sequence[str], consumer: str, *, count: int, block_ms: int
    ) -> list[Entry]:
        try:
            with translated(f"reading {', '.join(streams)}"):
                reply = await self._redis.xreadgroup(
                    GROUP,
                    consumer,
                    dict.fromkeys(streams, ">"),
                    count=count,
                    block=block_ms or None,
                )
        except Exception as exc:
            if is_missing_group(exc.__cause__):
                await self.ensure_groups(streams)
                return []
            raise
        return _entries(reply)

    async def ack(self, refs: Iterable[tuple[str, str]]) -> None:
        by_stream: dict[str, list[str]] = {}
        for stream, entry_id in refs:
            by_stream.setdefault(stream, []).append(entry_id)
        if not by_stream:
            return
        with translated(f"acknowledging entries of {', '.join(by_stream)}"):
            # Acknowledge, then delete: a handled entry is never read again, deleting
            # keeps the stream from growing, and MULTI keeps the two together.
            async with self._redis.pipeline(transaction=True) as pipe:
                for stream, ids in by_stream.items():
                    pipe.xack(stream, GROUP, *ids)
                    pipe.xdel(stream, *ids)
                await pipe.execute()

    async def redeliver(self, entry: Entry) -> str:
        fields = dict(entry.fields) | {DELIVERIES: str(entry.deliveries + 1)}
        with translated(f"delivering {entry.entry_id} on {entry.stream} again"):
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.xadd(entry.stream, fields)  # type: ignore[arg-type]
                pipe.xack(entry.stream, GROUP, entry.entry_id)
                pipe.xdel(entry.stream, entry.entry_id)
                new_id, _, _ = await pipe.execute()
        return str(new_id)

    async def reclaim(
        self, stream: str, consumer: str, *, min_idle_ms: int, start: str = "0-0", count: int = 100
    ) -> Reclaimed:
        try:
            with translated(f"claiming idle entries of {stream}"):
                reply = await self._redis.xautoclaim(
                    stream, GROUP, consumer, min_idle_ms, start_id=start, count=count
                )
        except Exception as exc:
            if is_missing_group(exc.__cause__):
                return Reclaimed([], "0-0")
            raise
        next_start, claimed = reply[0], reply[1]
        entries = [Entry(stream, i, f) for i, f in claimed if f is not None]
        return Reclaimed(entries, str(next_start))

    async def pending(self, stream: str, *, count: int = 1000) -> list[Pending]:
        try:
            with translated(f"XPENDING {stream}"):
                rows = await self._redis.xpending_range(stream, GROUP, "-", "+", count)
        except Exception as exc:
            if is_missing_group(exc.__cause__):
                return []
            raise
        return [
            Pending(
                str(r["message_id"]),
                str(r["consumer"]),
                int(r["time_since_delivered"]),
                int(r["times_delivered"]),
            )
            for r in rows
        ]

    async def backlog(self, stream: str, *, ignore_consumer: str | None = None) -> Backlog | None:
        try:
            with translated(f"XINFO GROUPS {stream}"):
                groups = await self._redis.xinfo_groups(stream)
        except Exception as exc:
            if is_missing_stream(exc.__cause__):
                return None
            raise
        found = [g for g in groups if g.get("name") == GROUP]
        if not found:
            return None
        [group] = found
        consumers = int(group.get("consumers") or 0)
        if ignore_consumer is not None and consumers:
            try:
                with translated(f"XINFO CONSUMERS {stream}"):
                    rows = await self._redis.xinfo_consumers(stream, GROUP)
            except Exception as exc:
                if is_missing_group(exc.__cause__) or is_missing_stream(exc.__cause__):
                    return None  # deleted between the two calls
                raise
            consumers = sum(1 for row in rows if row.get("name") != ignore_consumer)
        return Backlog(int(group.get("lag") or 0), int(group.get("pending") or 0), consumers)

    async def delete_consumer(self, stream: str, consumer: str) -> int:
        try:
            with translated(f"deleting consumer {consumer} of {stream}"):
                return int(await self._redis.xgroup_delconsumer(stream, GROUP, consumer))
        except Exception as exc:
            if is_missing_group(exc.__cause__) or is_missing_stream(exc.__cause__):
                return 0
            raise

    async def length(self, stream: str) -> int:
        with translated(f"XLEN {stream}"):
            return int(await self._redis.xlen(stream))

    async def entries(
        self, stream: str, *, start: str = "-", end: str = "+", count: int = 1000
    ) -> list[Entry]:
        with translated(f"XRANGE {stream}"):
            page = await self._redis.xrange(stream, min=start, max=end, count=count)
        return [Entry(stream, str(i), cast(dict[str, str], f)) for i, f in cast(list[Any], page)]

    async def streams(self, prefix: str) -> list[str]:
        with translated(f"listing the streams of {prefix}"):
            found = [
                str(s)
                async for s in self._redis.scan_iter(
                    match=f"{prefix}:q:*", count=1000, _type="stream"
                )
            ]
        return sorted(found)

    async def delete(self, streams: Iterable[str]) -> int:
        names = list(streams)
        if not names:
            return 0
        with translated(f"deleting {', '.join(names)}"):
            return int(await self._redis.delete(*names))

    async def drop(self, prefix: str) -> int:
        with translated(f"deleting the keys of {prefix}"):
            keys = [k async for k in self._redis.scan_iter(match=f"{prefix}:*", count=1000)]
            if keys:
                await self._redis.delete(*keys)
        return len(keys)

    async def flush_all(self) -> None:
        """FLUSHALL: every key of the server (chaos and recovery tests simulate an empty restart)."""
        with translated("FLUSHALL"):
            await self._redis.flushall()

    # -- hints -------------------------------------------------------------------

    async def notify(self, channel: str, message: str) -> None:
        with translated(f"publishing on {channel}"):
            await self._redis.publish(channel, message)

    @contextlib.asynccontextmanager
    async def subscribe(self, channels: Sequence[str]) -> AsyncIterator[_RedisSubscription]:
        with translated(f"subscribing to {', '.join(channels)}"):
            pubsub = self._redis.pubsub()
        try:
            with translated(f"subscribing to {', '.join(channels)}"):
                await pubsub.subscribe(*channels)
            yield _RedisSubscription(pubsub)
        finally:
            with contextlib.suppress(Exception):
                await pubsub.aclose()  # type: ignore[no-untyped-call]

    async def subscribers(self, channel: str) -> int:
        with translated(f"PUBSUB NUMSUB {channel}"):
            [(_, count)] = await self._redis.pubsub_numsub(channel)
        return int(count)


class _RedisSubscription:
    def __init__(self, pubsub: PubSub) -> None:
        self._pubsub = pubsub

    async def messages(self) -> AsyncIterator[tuple[str, str]]:
        with translated("listening for hints"):
            async for item in self._pubsub.listen():
                if item.get("type") == "message":
                    data = item.get("data")
                    text = data.decode() if isinstance(data, bytes) else str(data or "")
                    yield str(item.get("channel")), text
        raise QueueUnavailable("the hint subscription ended (the connection was closed)")


def _entries(reply: Any) -> list[Entry]:
    """Flatten an XREADGROUP reply (RESP2) into entries."""
    out: list[Entry] = []
    for stream, items in reply or []:
        for entry_id, fields in items:
            if fields is not None:  # a deleted entry still in the PEL comes back empty
                out.append(Entry(str(stream), str(entry_id), cast(dict[str, str], fields)))
    return out
