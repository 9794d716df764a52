"""The real adapter: ``Queue`` over redis-py's asyncio client.

RESP2 is fixed on purpose: redis-py 8 defaults to RESP3, where XREADGROUP
replies nest differently; one protocol means one reply parser. Responses are
decoded: every field we write is UTF-8 text.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
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
    DEFAULT_BAND,
    DELIVERIES,
    GROUP,
    Backlog,
    Entry,
    Pending,
    Reclaimed,
    band_streams,
    consumer_key,
)
from composer_queue._port import Subscription

#: XREADGROUP over the priority bands of several shards, at most ARGV[3] entries in all
#: (a plain XREADGROUP's COUNT applies to each stream). KEYS: each shard's band streams,
#: its band-3 stream first, shard after shard in the order to read them; ARGV: group,
#: consumer, count, now in ms (0: Redis's TIME), then per shard the number of its keys
#: and each key's band (negative: a band not known to hold entries, looked at with XLEN
#: first). When no other band holds entries, each shard is one XREADGROUP on band 3, in
#: the order given, as before bands existed. Otherwise the entries of every shard given go by effective band: band less one per
#: whole minute the entry waited (its id's ms), never better than 1, then oldest first
#: (docs §4.16), whichever shard holds them.
#: Answers {1, {{stream, id, fields}, ...}, {band streams holding undelivered entries}};
#: the first element is 0 instead when a band-3 stream had no group (what was read from
#: the others still counts). A band stream without the group gets it here, from its
#: first entry.
_READ = """
local group, consumer, left, now = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local found, groups, active, failure = {}, 1, {}, nil
local function read(key, n)
  local reply = redis.pcall('XREADGROUP', 'GROUP', group, consumer, 'COUNT', n,
                            'STREAMS', key, '>')
  if type(reply) == 'table' and reply['err'] then
    if not string.find(reply['err'], 'NOGROUP', 1, true) then failure = reply['err'] end
    groups = 0
  elseif reply then
    for _, item in ipairs(reply[1][2]) do
      found[#found + 1] = {key, item[1], item[2]}
      left = left - 1
    end
  end
end
local function undelivered(key, n)
  local info = redis.pcall('XINFO', 'GROUPS', key)
  if type(info) == 'table' and info['err'] then return {} end
  local last = nil
  for _, g in ipairs(info) do
    local name, id
    for j = 1, #g, 2 do
      if g[j] == 'name' then name = g[j + 1] elseif g[j] == 'last-delivered-id' then id = g[j + 1] end
    end
    if name == group then last = id end
  end
  if last == nil then
    redis.call('XGROUP', 'CREATE', key, group, '0')
    last = '0-0'
  end
  local ms = {}
  for i, item in ipairs(redis.call('XRANGE', key, '(' .. last, '+', 'COUNT', n)) do
    ms[i] = tonumber(string.match(item[1], '^(%d+)'))
  end
  return ms
end
local shards, k, a = {}, 1, 5
while a <= #ARGV do
  local n = tonumber(ARGV[a])
  a = a + 1
  local keys, bands = {}, {}
  for i = 1, n do
    keys[i], bands[i] = KEYS[k], tonumber(ARGV[a])
    k, a = k + 1, a + 1
  end
  shards[#shards + 1] = {keys, bands}
end
local heads, others = {}, false
for _, shard in ipairs(shards) do
  local keys, bands = shard[1], shard[2]
  for i = 2, #keys do
    if bands[i] > 0 or redis.call('XLEN', keys[i]) > 0 then
      local ms = undelivered(keys[i], left)
      if #ms > 0 then
        heads[keys[i]], others = ms, true
        active[#active + 1] = keys[i]
      end
    end
    bands[i] = math.abs(bands[i])
  end
end
if not others then
  for _, shard in ipairs(shards) do
    if left <= 0 or failure ~= nil then break end
    read(shard[1][1], left)
  end
else
  local cand = {}
  for _, shard in ipairs(shards) do
    local keys, bands = shard[1], shard[2]
    cand[#cand + 1] = {keys[1], 3, undelivered(keys[1], left)}
    for i = 2, #keys do
      if heads[keys[i]] then cand[#cand + 1] = {keys[i], bands[i], heads[keys[i]]} end
    end
  end
  if now == 0 then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  local take, pos, order = {}, {}, {}
  for c = 1, #cand do take[c], pos[c] = 0, 1 end
  for _ = 1, left do
    local best, rank, born = nil, nil, nil
    for c = 1, #cand do
      local t = cand[c][3][pos[c]]
      if t ~= nil then
        local r = math.max(1, cand[c][2] - math.floor(math.max(0, now - t) / 60000))
        if best == nil or r < rank or (r == rank and t < born) then
          best, rank, born = c, r, t
        end
      end
    end
    if best == nil then break end
    if take[best] == 0 then order[#order + 1] = best end
    take[best], pos[best] = take[best] + 1, pos[best] + 1
  end
  for _, c in ipairs(order) do
    if failure == nil then read(cand[c][1], take[c]) end
  end
end
if failure ~= nil then return redis.error_reply(failure) end
return {groups, found, active}
"""

#: A reader that has not seen every band of a shard for this long looks at them again
#: (XLEN on each) on its next read: how late, at worst, a busy worker that never
#: blocks notices work of another band. A blocked read waits on every band at once.
PROBE_SECONDS = 1.0


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


class _Bands:
    """Which priority bands a reader looks at (docs/architecture.md §4.16).

    Band 3 (the shard's own stream) always; another band when the last look found
    entries in it, or when its shard has not been looked at whole for
    ``PROBE_SECONDS`` (a blocked read, which waits on every band, counts as a look).
    So work of the default priority alone costs no command more than before bands,
    but the XLENs of one look a second while a reader never blocks."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        #: Band streams that held undelivered entries when last looked at.
        self._active: set[str] = set()
        #: Shard stream -> when (monotonic) its bands were last all looked at.
        self._looked: dict[str, float] = {}
        #: Shard streams whose other bands this reader made sure have the group.
        self._grouped: set[str] = set()

    def plan(self, streams: Sequence[str]) -> tuple[list[str], list[int]]:
        """The read script's keys and layout (per shard: its number of keys, then each
        key's band, negative for one looked at only if XLEN finds entries)."""
        keys: list[str] = []
        layout: list[int] = []
        for stream in streams:
            group = self.plan_one(stream)
            layout.append(len(group))
            for key, band in group:
                keys.append(key)
                layout.append(band)
        return keys, layout

    def plan_one(self, stream: str) -> list[tuple[str, int]]:
        """One shard's (key, band) to read: band 3 first, then the bands to look at."""
        now = self._clock()
        look = stream not in self._looked or now - self._looked[stream] >= PROBE_SECONDS
        if look:
            self._looked[stream] = now
        group = [(stream, DEFAULT_BAND)]
        for band, key in band_streams(stream):
            if band == DEFAULT_BAND:
                continue
            if key in self._active:
                group.append((key, band))
            elif look:
                group.append((key, -band))
        return group

    def seen(self, keys: Sequence[str], active: Sequence[str]) -> None:
        """What a read found: of the band streams it looked at, those in ``active``
        held undelivered entries."""
        self._active.difference_update(keys)
        self._active.update(active)

    def waited(self, streams: Sequence[str], entries: Sequence[Entry]) -> None:
        """A blocked read on every band of ``streams`` answered with ``entries``: as it
        answered, it looked at every band (a band with entries answers at once), so an
        idle reader's next read looks at none but 3 and those that answered."""
        now = self._clock()
        for stream in streams:
            self._looked[stream] = now
        self._active.update(e.stream for e in entries if e.stream not in streams)

    def ungrouped(self, streams: Sequence[str]) -> list[str]:
        """The other bands' streams of ``streams`` not yet made sure to have the group
        (a blocked read over a stream without it fails at once), marked as done."""
        fresh = [s for s in streams if s not in self._grouped]
        self._grouped.update(fresh)
        return [k for s in fresh for b, k in band_streams(s) if b != DEFAULT_BAND]

    def by_band(self, streams: Sequence[str]) -> list[str]:
        """``streams`` with those whose best band last seen holding entries is better
        than 3 first (a cluster's shards are read one by one: no script sees them all),
        in the order given otherwise: a shard is never put behind for holding a worse
        band too (its band 3 may hold entries, and its script ages its bands)."""

        def best(stream: str) -> int:
            bands = [b for b, k in band_streams(stream) if k in self._active]
            return min([*bands, DEFAULT_BAND])

        return sorted(streams, key=best)

    def lost(self, streams: Sequence[str]) -> None:
        """``streams`` lost their group (Redis restarted empty): their bands' too."""
        self._grouped.difference_update(streams)

    @staticmethod
    def every(streams: Sequence[str]) -> list[str]:
        """Every band stream of ``streams``, band 3 (the shard's stream) first."""
        return [*streams, *(k for s in streams for b, k in band_streams(s) if b != DEFAULT_BAND)]


class RedisQueue:
    """``Queue`` on a Redis server. Use ``connect(url)``; ``async with`` closes it."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._redis = client
        #: Lua source -> SHA1, once loaded.
        self._scripts: dict[str, str] = {}
        self._bands = _Bands()
        #: The time (ms since the epoch) reads age entries by; None: Redis's own clock,
        #: which wrote the entry ids. Tests set it to age entries without waiting.
        self.clock_ms: Callable[[], int] | None = None

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
        keys, layout = self._bands.plan(streams)
        now = 0 if self.clock_ms is None else self.clock_ms()
        # What is there already, at most ``count`` in all, by band, in one round trip...
        with translated(what):
            reply = await self._script(_READ, keys, [GROUP, consumer, count, now, *layout])
        entries = [_entry(_text(stream), i, fields) for stream, i, fields in reply[1]]
        self._bands.seen(keys, [_text(k) for k in reply[2]])
        every = self._bands.every(streams)
        if reply[0] == 0:  # a group vanished (Redis restarted or was flushed)
            await self.ensure_groups(streams)
            self._bands.lost(streams)
            return entries
        if entries or not block_ms:
            return entries
        # ...else wait for one, on every band: one command whatever their number. A
        # blocked XREADGROUP is served by the stream that got an entry, but one issued
        # just as entries reach several streams answers from each at once: what is
        # over ``count`` is given back, uncounted.
        if fresh := self._bands.ungrouped(streams):  # once: a blocked read needs their groups
            await self.ensure_groups(fresh)
        shards, streams = streams, every
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
        self._bands.waited(shards, entries)
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

    async def notify_many(self, messages: Sequence[tuple[str, str]]) -> None:
        if len(messages) == 1:
            await self.notify(*messages[0])
            return
        with translated(f"publishing {len(messages)} hints"):
            async with self._redis.pipeline(transaction=False) as pipe:
                for channel, message in messages:
                    pipe.publish(channel, message)
                await pipe.execute()

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
