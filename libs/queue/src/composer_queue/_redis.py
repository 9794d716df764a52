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
from redis import exceptions as rex
from redis.asyncio.client import PubSub
from redis.client import NEVER_DECODE

from composer_queue._errors import (
    QueueUnavailable,
    is_existing_group,
    is_missing_group,
    is_missing_stream,
    translated,
)
from composer_queue._messages import (
    DELIVERIES,
    GROUP,
    Backlog,
    Entry,
    Pending,
    Reclaimed,
    consumer_key,
)
from composer_queue._port import Subscription

#: XREADGROUP over several streams, at most ARGV[3] entries in all (a plain XREADGROUP's
#: COUNT applies to each stream). KEYS: the streams, in the order to read them; ARGV:
#: group, consumer, count. Answers {1, {{stream, id, fields}, ...}}; the first element
#: is 0 instead when a stream had no group (what was read from the others still counts).
_READ = """
local group, consumer, left = ARGV[1], ARGV[2], tonumber(ARGV[3])
local found, groups = {}, 1
for _, key in ipairs(KEYS) do
  if left <= 0 then break end
  local reply = redis.pcall('XREADGROUP', 'GROUP', group, consumer, 'COUNT', left,
                            'STREAMS', key, '>')
  if type(reply) == 'table' and reply['err'] then
    if not string.find(reply['err'], 'NOGROUP', 1, true) then
      return redis.error_reply(reply['err'])
    end
    groups = 0
  elseif reply then
    for _, item in ipairs(reply[1][2]) do
      found[#found + 1] = {key, item[1], item[2]}
      left = left - 1
    end
  end
end
return {groups, found}
"""


def connect(url: str, *, connect_timeout: float | None = None, cluster: bool = False) -> RedisQueue:
    """A client for the Redis at ``url`` (connects lazily, on the first command).

    ``connect_timeout`` bounds opening a connection (None: the OS's own timeout).
    ``cluster``: ``url`` is any node of a Redis Cluster (COMPOSER_REDIS_CLUSTER), and
    the client is a ``ClusterQueue`` (composer_queue._cluster).
    """
    if cluster:
        from composer_queue._cluster import connect_cluster  # here: it imports this module

        return connect_cluster(url, connect_timeout=connect_timeout)
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
        #: Lua source -> SHA1, once loaded.
        self._scripts: dict[str, str] = {}

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
        if count < 1 or not streams:
            return []
        what = f"reading {', '.join(streams)}"
        # What is there already, at most ``count`` in all, in one round trip (a script)...
        with translated(what):
            reply = await self._script(_READ, list(streams), [GROUP, consumer, count])
        entries = [_entry(_text(stream), i, fields) for stream, i, fields in reply[1]]
        if reply[0] == 0:  # a group vanished (Redis restarted or was flushed)
            await self.ensure_groups(streams)
            return entries
        if entries or not block_ms:
            return entries
        # ...else wait for one. A blocked XREADGROUP is served by the stream that got
        # an entry, but one issued just as entries reach several streams answers from
        # each at once: what is over ``count`` is given back, uncounted.
        try:
            with translated(what):
                answer = await self._undecoded(
                    "XREADGROUP",
                    "GROUP",
                    GROUP,
                    consumer,
                    "COUNT",
                    count,
                    "BLOCK",
                    block_ms,
                    "STREAMS",
                    *streams,
                    *[">"] * len(streams),
                )
        except Exception as exc:
            if is_missing_group(exc.__cause__):
                await self.ensure_groups(streams)
                return []
            raise
        entries = [
            _entry(_text(stream), i, fields)
            for stream, items in answer or []
            for i, fields in items
            if fields is not None
        ]
        if len(entries) > count:
            await self.give_back(entries[count:])
        return entries[:count]

    async def _script(self, source: str, keys: list[str], args: list[object]) -> Any:
        """EVALSHA ``source`` (loaded on first use), with its reply left undecoded: stream
        fields are decoded entry by entry (``_entry``), so one that is not UTF-8 cannot
        fail the rest."""
        sha = self._scripts.get(source)
        if sha is None:
            sha = self._scripts[source] = str(await self._redis.script_load(source))
        try:
            return await self._undecoded("EVALSHA", sha, len(keys), *keys, *args)
        except rex.NoScriptError:  # Redis restarted, or SCRIPT FLUSH
            self._scripts[source] = sha = str(await self._redis.script_load(source))
            return await self._undecoded("EVALSHA", sha, len(keys), *keys, *args)

    async def _undecoded(self, *command: object) -> Any:
        """A command whose reply is left as bytes (redis-py's NEVER_DECODE option)."""
        return await self._redis.execute_command(*command, **{NEVER_DECODE: True})  # type: ignore[no-untyped-call]

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

    async def give_back(self, entries: Sequence[Entry]) -> None:
        # one that is not UTF-8 cannot be written again: it stays pending, for the sweeper
        entries = [e for e in entries if e.problem is None]
        if not entries:
            return
        with translated(f"giving back {len(entries)} entries"):
            async with self._redis.pipeline(transaction=True) as pipe:
                for entry in entries:
                    pipe.xadd(entry.stream, dict(entry.fields))  # type: ignore[arg-type]
                    pipe.xack(entry.stream, GROUP, entry.entry_id)
                    pipe.xdel(entry.stream, entry.entry_id)
                await pipe.execute()

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

    async def pending(
        self, stream: str, *, count: int = 1000, min_idle_ms: int = 0, start: str = "-"
    ) -> list[Pending]:
        try:
            with translated(f"XPENDING {stream}"):
                rows = await self._redis.xpending_range(
                    stream, GROUP, start, "+", count, idle=min_idle_ms or None
                )
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

    async def claim(
        self, stream: str, consumer: str, entry_ids: Sequence[str], *, min_idle_ms: int
    ) -> list[Entry]:
        if not entry_ids:
            return []
        try:
            with translated(f"claiming {len(entry_ids)} entries of {stream}"):
                reply = await self._undecoded(
                    "XCLAIM", stream, GROUP, consumer, min_idle_ms, *entry_ids
                )
        except Exception as exc:
            if is_missing_group(exc.__cause__):
                return []
            raise
        # parsed by redis-py into (id, {field: value}) pairs of bytes; None for an entry
        # deleted while pending
        return [_entry(stream, i, f) for i, f in reply or [] if i is not None and f is not None]

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
            page = await self._undecoded("XRANGE", stream, start, end, "COUNT", count)
        return [_entry(stream, i, f) for i, f in page or [] if f is not None]

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

    # -- consumers ---------------------------------------------------------------

    async def heartbeat(self, prefix: str, consumer: str, ttl_ms: int) -> None:
        with translated(f"the heartbeat of {consumer}"):
            await self._redis.set(consumer_key(prefix, consumer), "1", px=max(1, ttl_ms))

    async def alive(self, prefix: str, consumers: Iterable[str]) -> set[str]:
        names = sorted(set(consumers))
        if not names:
            return set()
        with translated(f"checking the heartbeats of {len(names)} consumer(s)"):
            beats = await self._redis.mget([consumer_key(prefix, c) for c in names])
        return {name for name, beat in zip(names, beats, strict=True) if beat is not None}

    # -- hints -------------------------------------------------------------------

    async def notify(self, channel: str, message: str) -> None:
        with translated(f"publishing on {channel}"):
            await self._redis.publish(channel, message)

    @contextlib.asynccontextmanager
    async def subscribe(self, channels: Sequence[str]) -> AsyncIterator[Subscription]:
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


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _entry(stream: str, entry_id: object, fields: object) -> Entry:
    """An entry from an undecoded reply (``fields`` a flat list or a dict of bytes);
    one that is not UTF-8 comes back with its ``problem`` instead of failing the call."""
    pairs = (
        list(fields.items())
        if isinstance(fields, dict)
        else list(zip(*[iter(cast(list[Any], fields))] * 2, strict=True))
    )
    try:
        decoded = {_strict(k): _strict(v) for k, v in pairs}
    except UnicodeDecodeError as exc:
        return Entry(stream, _text(entry_id), {}, problem=f"a field is not UTF-8 text ({exc})")
    return Entry(stream, _text(entry_id), decoded)


def _strict(value: object) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)
