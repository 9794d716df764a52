"""In-memory fakes of ``Queue``, for unit tests without a Redis server.

``FakeQueue`` keeps streams with one consumer group each (pending entries,
delivery counts, idle times, XAUTOCLAIM) and pub/sub channels. It passes the
same contract test as the real adapter (tests/integration/queue/test_contract.py), so
code tested on it behaves the same on Redis. Faults: set ``down`` to make
every call raise ``QueueUnavailable`` (and drop every subscription), as a
Redis outage would.

Idle times and heartbeats come from ``clock`` (seconds, default
``time.monotonic``), so a test can age pending entries and let a consumer's
heartbeat run out without sleeping. ``poison`` holds entry ids to hand out as
Redis hands out an entry that is not UTF-8: with ``problem`` set.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from composer_queue._errors import QueueUnavailable
from composer_queue._messages import (
    AGING_SECONDS,
    DEFAULT_BAND,
    DELIVERIES,
    Backlog,
    Entry,
    Pending,
    Reclaimed,
    band_streams,
    consumer_key,
)

__all__ = ["FakeQueue"]

_Id = tuple[int, int]


def _parse(entry_id: str) -> _Id:
    ms, _, seq = entry_id.partition("-")
    return (int(ms), int(seq or 0))


def _text(entry_id: _Id) -> str:
    return f"{entry_id[0]}-{entry_id[1]}"


@dataclass
class _Delivery:
    consumer: str
    delivered_at: float
    times: int


@dataclass
class _Group:
    last_delivered: _Id = (0, 0)
    pel: dict[_Id, _Delivery] = field(default_factory=dict)
    consumers: set[str] = field(default_factory=set)


@dataclass
class _Stream:
    entries: dict[_Id, dict[str, str]] = field(default_factory=dict)
    group: _Group | None = None
    #: When (by the fake's clock) each entry was added: what Redis's ids say.
    born: dict[_Id, float] = field(default_factory=dict)


class FakeQueue:
    """A ``Queue`` held in memory. One instance is one Redis server."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._streams: dict[str, _Stream] = {}
        self._seq = 0
        self._changed = asyncio.Condition()
        self._subscriptions: dict[str, set[asyncio.Queue[tuple[str, str] | None]]] = {}
        self._down = False
        #: Every (channel, message) published, in order (tests assert on hints sent).
        self.notified: list[tuple[str, str]] = []
        #: Calls refused because the fake was down (tests wait on retries with it).
        self.refused = 0
        self.closed = False
        #: Heartbeat keys and when they run out (by ``clock``).
        self._beats: dict[str, float] = {}
        #: Entry ids read and claimed as entries that are not UTF-8 text.
        self.poison: set[str] = set()

    # -- faults ------------------------------------------------------------------

    @property
    def down(self) -> bool:
        return self._down

    @down.setter
    def down(self, value: bool) -> None:
        self._down = value
        if value:
            for queues in self._subscriptions.values():
                for q in queues:
                    q.put_nowait(None)

    def _check(self, what: str) -> None:
        if self._down:
            self.refused += 1
            raise QueueUnavailable(f"{what} failed: the fake Redis is down (is Redis up?)")

    # -- connection --------------------------------------------------------------

    async def __aenter__(self) -> FakeQueue:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def ping(self) -> None:
        self._check("PING")

    async def close(self) -> None:
        self.closed = True

    # -- streams -----------------------------------------------------------------

    def _new_id(self) -> _Id:
        self._seq += 1
        return (self._seq, 0)

    def _add(self, name: str, fields: Mapping[str, str]) -> _Id:
        new = self._new_id()
        stream = self._streams.setdefault(name, _Stream())
        stream.entries[new] = dict(fields)
        stream.born[new] = self._clock()
        return new

    async def _notify_change(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def publish(self, entries: Sequence[tuple[str, Mapping[str, str]]]) -> list[str]:
        self._check(f"publishing {len(entries)} message(s)")
        ids = []
        for stream, fields in entries:
            ids.append(_text(self._add(stream, fields)))
        await self._notify_change()
        return ids

    async def ensure_groups(self, streams: Iterable[str]) -> None:
        self._check("creating consumer groups")
        for name in streams:
            stream = self._streams.setdefault(name, _Stream())
            if stream.group is None:
                stream.group = _Group()

    def _new_entries(self, name: str, consumer: str, count: int) -> list[Entry] | None:
        stream = self._streams.get(name)
        if stream is None or stream.group is None:
            return None
        group = stream.group
        group.consumers.add(consumer)
        out = []
        for entry_id in sorted(i for i in stream.entries if i > group.last_delivered)[:count]:
            group.last_delivered = entry_id
            group.pel[entry_id] = _Delivery(consumer, self._clock(), 1)
            out.append(self._entry(name, entry_id, stream.entries[entry_id]))
        return out

    def _new_banded(
        self, names: Sequence[str], consumer: str, count: int
    ) -> tuple[list[Entry], bool]:
        """As Redis's read script: the new entries of the shards whose band-3 streams are
        ``names``, and whether one of those had no group. With entries in no other band,
        band 3 shard after shard; else every band of every shard by effective band (band
        less one per whole AGING_SECONDS waited, at best 1), then oldest first. A band
        stream without the group gets it, from its first entry."""
        missing = False
        heads: list[tuple[int, float, str, _Id]] = []
        others = False
        for name in names:
            main = self._streams.get(name)
            if main is None or main.group is None:
                missing = True
                continue
            for band, key in band_streams(name):
                stream = self._streams.get(key)
                if stream is None:
                    continue
                if stream.group is None:
                    stream.group = _Group()
                last = stream.group.last_delivered
                for entry_id in sorted(i for i in stream.entries if i > last)[:count]:
                    born = stream.born.get(entry_id, self._clock())
                    waited = max(0.0, self._clock() - born)
                    rank = max(1, band - int(waited // AGING_SECONDS))
                    heads.append((rank, born, key, entry_id))
                    others = others or band != DEFAULT_BAND
        found: list[Entry] = []
        if not others:
            for name in names:
                if count - len(found) <= 0:
                    break
                found.extend(self._new_entries(name, consumer, count - len(found)) or [])
            return found, missing
        taking: dict[str, int] = {}
        for _, _, key, _ in sorted(heads)[:count]:
            taking[key] = taking.get(key, 0) + 1
        for key, n in taking.items():
            found.extend(self._new_entries(key, consumer, n) or [])
        return found, missing

    def _entry(self, name: str, entry_id: _Id, fields: dict[str, str]) -> Entry:
        if _text(entry_id) in self.poison:
            return Entry(name, _text(entry_id), {}, problem="a field is not UTF-8 text")
        return Entry(name, _text(entry_id), dict(fields))

    async def read(
        self, streams: Sequence[str], consumer: str, *, count: int, block_ms: int
    ) -> list[Entry]:
        self._check(f"reading {', '.join(streams)}")
        if count < 1 or not streams:
            return []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + block_ms / 1000
        while True:
            found, missing = self._new_banded(streams, consumer, count)
            if missing:  # NOGROUP: recreated; what the others gave still counts
                await self.ensure_groups(streams)
                return found
            remaining = deadline - loop.time()
            if found or remaining <= 0:
                return found
            async with self._changed:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), remaining)
            self._check(f"reading {', '.join(streams)}")

    def _remove(self, name: str, entry_id: _Id) -> None:
        stream = self._streams.get(name)
        if stream is None:
            return
        if stream.group is not None:
            stream.group.pel.pop(entry_id, None)
        stream.entries.pop(entry_id, None)
        stream.born.pop(entry_id, None)

    async def ack(self, refs: Iterable[tuple[str, str]]) -> None:
        refs = list(refs)
        self._check(f"acknowledging {len(refs)} entries")
        for name, entry_id in refs:
            self._remove(name, _parse(entry_id))

    async def redeliver(self, entry: Entry) -> str:
        self._check(f"delivering {entry.entry_id} on {entry.stream} again")
        fields = dict(entry.fields) | {DELIVERIES: str(entry.deliveries + 1)}
        new = self._add(entry.stream, fields)
        self._remove(entry.stream, _parse(entry.entry_id))
        await self._notify_change()
        return _text(new)

    async def give_back(self, entries: Sequence[Entry]) -> None:
        self._check(f"giving back {len(entries)} entries")
        for entry in entries:
            if entry.problem is not None:
                continue  # as Redis: it cannot be written again, it stays pending
            self._add(entry.stream, entry.fields)
            self._remove(entry.stream, _parse(entry.entry_id))
        await self._notify_change()

    async def reclaim(
        self, stream: str, consumer: str, *, min_idle_ms: int, start: str = "0-0", count: int = 100
    ) -> Reclaimed:
        self._check(f"claiming idle entries of {stream}")
        s = self._streams.get(stream)
        if s is None or s.group is None:
            return Reclaimed([], "0-0")
        group = s.group
        now = self._clock()
        ids = sorted(i for i in group.pel if i >= _parse(start))
        claimed: list[Entry] = []
        for n, entry_id in enumerate(ids):
            if len(claimed) >= count:
                return Reclaimed(claimed, _text(ids[n]))
            delivery = group.pel[entry_id]
            if (now - delivery.delivered_at) * 1000 < min_idle_ms:
                continue
            if entry_id not in s.entries:  # deleted while pending: dropped, as Redis 7 does
                del group.pel[entry_id]
                continue
            group.consumers.add(consumer)  # as Redis 7: only once it claims something
            group.pel[entry_id] = _Delivery(consumer, now, delivery.times + 1)
            claimed.append(self._entry(stream, entry_id, s.entries[entry_id]))
        return Reclaimed(claimed, "0-0")

    async def pending(
        self, stream: str, *, count: int = 1000, min_idle_ms: int = 0, start: str = "-"
    ) -> list[Pending]:
        self._check(f"XPENDING {stream}")
        s = self._streams.get(stream)
        if s is None or s.group is None:
            return []
        now = self._clock()
        if start == "-":
            low, exclusive = (0, 0), False
        elif start.startswith("("):
            low, exclusive = _parse(start[1:]), True
        else:
            low, exclusive = _parse(start), False
        rows = [
            Pending(_text(i), d.consumer, int((now - d.delivered_at) * 1000), d.times)
            for i, d in sorted(s.group.pel.items())
            if (i > low or (i == low and not exclusive))
        ]
        return [r for r in rows if r.idle_ms >= min_idle_ms][:count]

    async def claim(
        self, stream: str, consumer: str, entry_ids: Sequence[str], *, min_idle_ms: int
    ) -> list[Entry]:
        self._check(f"claiming {len(entry_ids)} entries of {stream}")
        s = self._streams.get(stream)
        if s is None or s.group is None:
            return []
        group, now = s.group, self._clock()
        claimed = []
        for text in entry_ids:
            entry_id = _parse(text)
            delivery = group.pel.get(entry_id)
            if delivery is None or (now - delivery.delivered_at) * 1000 < min_idle_ms:
                continue
            if entry_id not in s.entries:  # deleted while pending: dropped, as Redis 7 does
                del group.pel[entry_id]
                continue
            group.consumers.add(consumer)
            group.pel[entry_id] = _Delivery(consumer, now, delivery.times + 1)
            claimed.append(self._entry(stream, entry_id, s.entries[entry_id]))
        return claimed

    async def backlog(self, stream: str, *, ignore_consumer: str | None = None) -> Backlog | None:
        self._check(f"XINFO GROUPS {stream}")
        s = self._streams.get(stream)
        if s is None or s.group is None:
            return None
        g = s.group
        lag = sum(1 for i in s.entries if i > g.last_delivered)
        return Backlog(lag, len(g.pel), len(g.consumers - {ignore_consumer}))

    async def delete_consumer(self, stream: str, consumer: str) -> int:
        self._check(f"deleting consumer {consumer} of {stream}")
        s = self._streams.get(stream)
        if s is None or s.group is None:
            return 0
        g = s.group
        g.consumers.discard(consumer)
        held = [i for i, d in g.pel.items() if d.consumer == consumer]
        for entry_id in held:
            del g.pel[entry_id]
        return len(held)

    async def length(self, stream: str) -> int:
        self._check(f"XLEN {stream}")
        s = self._streams.get(stream)
        return 0 if s is None else len(s.entries)

    async def entries(
        self, stream: str, *, start: str = "-", end: str = "+", count: int = 1000
    ) -> list[Entry]:
        self._check(f"XRANGE {stream}")
        s = self._streams.get(stream)
        if s is None:
            return []
        if start == "-":
            low, exclusive = (0, 0), False
        elif start.startswith("("):
            low, exclusive = _parse(start[1:]), True
        else:
            low, exclusive = _parse(start), False
        high = None if end == "+" else _parse(end)
        out = []
        for entry_id in sorted(s.entries):
            if entry_id < low or (exclusive and entry_id == low):
                continue
            if high is not None and entry_id > high:
                break
            out.append(Entry(stream, _text(entry_id), dict(s.entries[entry_id])))
            if len(out) >= count:
                break
        return out

    async def streams(self, prefix: str) -> list[str]:
        self._check(f"listing the streams of {prefix}")
        return sorted(n for n in self._streams if fnmatch.fnmatchcase(n, f"{prefix}:q:*"))

    async def delete(self, streams: Iterable[str]) -> int:
        names = list(streams)
        self._check(f"deleting {', '.join(names)}")
        deleted = sum(self._streams.pop(n, None) is not None for n in names)
        await self._notify_change()  # a blocked read on a deleted stream answers now
        return deleted

    async def drop(self, prefix: str) -> int:
        self._check(f"deleting the keys of {prefix}")
        names = [n for n in self._streams if n.startswith(f"{prefix}:")]
        for name in names:
            del self._streams[name]
        beats = [k for k in self._beats if k.startswith(f"{prefix}:")]
        for key in beats:
            del self._beats[key]
        await self._notify_change()
        return len(names) + len(beats)

    async def flush_all(self) -> None:
        self._check("FLUSHALL")
        self._streams.clear()
        self._beats.clear()
        await self._notify_change()

    # -- consumers ---------------------------------------------------------------

    async def heartbeat(self, prefix: str, consumer: str, ttl_ms: int) -> None:
        self._check(f"the heartbeat of {consumer}")
        self._beats[consumer_key(prefix, consumer)] = self._clock() + max(1, ttl_ms) / 1000

    async def alive(self, prefix: str, consumers: Iterable[str]) -> set[str]:
        self._check("checking heartbeats")
        now = self._clock()
        return {c for c in consumers if self._beats.get(consumer_key(prefix, c), now) > now}

    # -- hints -------------------------------------------------------------------

    async def notify(self, channel: str, message: str) -> None:
        self._check(f"publishing on {channel}")
        self.notified.append((channel, message))
        for q in self._subscriptions.get(channel, ()):
            q.put_nowait((channel, message))

    async def notify_many(self, messages: Sequence[tuple[str, str]]) -> None:
        for channel, message in messages:
            await self.notify(channel, message)

    @contextlib.asynccontextmanager
    async def subscribe(self, channels: Sequence[str]) -> AsyncIterator[_FakeSubscription]:
        self._check(f"subscribing to {', '.join(channels)}")
        inbox: asyncio.Queue[tuple[str, str] | None] = asyncio.Queue()
        for name in channels:
            self._subscriptions.setdefault(name, set()).add(inbox)
        try:
            yield _FakeSubscription(inbox)
        finally:
            for name in channels:
                self._subscriptions.get(name, set()).discard(inbox)

    async def subscribers(self, channel: str) -> int:
        self._check(f"PUBSUB NUMSUB {channel}")
        return len(self._subscriptions.get(channel, ()))

    def drop_subscriptions(self) -> None:
        """End every live subscription, as a Redis restart does (without going down)."""
        for queues in self._subscriptions.values():
            for q in queues:
                q.put_nowait(None)


class _FakeSubscription:
    def __init__(self, inbox: asyncio.Queue[tuple[str, str] | None]) -> None:
        self._inbox = inbox

    async def messages(self) -> AsyncIterator[tuple[str, str]]:
        while True:
            item = await self._inbox.get()
            if item is None:
                raise QueueUnavailable("the hint subscription was dropped (fake Redis restart)")
            yield item
