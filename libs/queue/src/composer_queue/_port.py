"""The operations Composer needs from Redis, as one protocol.

``RedisQueue`` (the real adapter) and ``composer_queue.testing.FakeQueue``
both implement it, and one contract test runs against both, so code written
against ``Queue`` can be unit-tested on the fake. Every operation raises only
``QueueError`` subclasses; consumer-group bookkeeping (NOGROUP, BUSYGROUP) is
handled inside.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from composer_queue._messages import Backlog, Entry, Pending, Reclaimed


class Subscription(Protocol):
    def messages(self) -> AsyncIterator[tuple[str, str]]:
        """(channel, message) pairs until the connection drops (QueueUnavailable)."""
        ...


class Queue(Protocol):
    # -- connection --------------------------------------------------------------
    async def ping(self) -> None:
        """Redis answers (a readiness check); QueueUnavailable if not."""

    async def close(self) -> None: ...

    # -- streams -----------------------------------------------------------------
    async def publish(self, entries: Sequence[tuple[str, Mapping[str, str]]]) -> list[str]:
        """XADD each (stream, fields) in one round trip; the new entry ids, in order."""
        ...

    async def ensure_groups(self, streams: Iterable[str]) -> None:
        """Create the consumer group (and the stream) where missing, reading from the start."""

    async def read(
        self, streams: Sequence[str], consumer: str, *, count: int, block_ms: int
    ) -> list[Entry]:
        """New entries for ``consumer``, at most ``count`` in all, taken from the streams
        in the order given; waiting up to ``block_ms`` for one (0: answer at once).

        At most ``count`` in all, not per stream: a worker asks for as many entries as
        it has free slots, and an entry it holds without a slot would wait unleased.
        An entry that is not UTF-8 comes back with ``problem`` set (its ``message()``
        raises MalformedMessage) instead of failing the read. A group that vanished
        (Redis restarted or was flushed) is recreated and the call answers [] so the
        caller simply reads again.
        """
        ...

    async def ack(self, refs: Iterable[tuple[str, str]]) -> None:
        """Acknowledge and delete (stream, entry id) pairs, atomically, in one round trip."""

    async def redeliver(self, entry: Entry) -> str:
        """Add ``entry`` anew with its ``deliveries`` counted up, and ack+delete the old one,
        atomically; the new entry id."""
        ...

    async def give_back(self, entries: Sequence[Entry]) -> None:
        """Put entries read and not taken at the end of their streams again, unchanged (the
        delivery count too), and ack+delete the originals, atomically."""

    async def reclaim(
        self, stream: str, consumer: str, *, min_idle_ms: int, start: str = "0-0", count: int = 100
    ) -> Reclaimed:
        """XAUTOCLAIM one page of entries idle for ``min_idle_ms`` or more to ``consumer``.

        Entries deleted while pending are dropped from the pending list, not returned.
        A stream with no group yet (no worker ever read it) has nothing to reclaim.
        """
        ...

    async def pending(
        self, stream: str, *, count: int = 1000, min_idle_ms: int = 0, start: str = "-"
    ) -> list[Pending]:
        """Up to ``count`` entries delivered and not acknowledged, oldest first, each with
        the consumer that holds it: those idle for ``min_idle_ms`` or more, from ``start``
        (an id, "(id" for after it, or "-")."""
        ...

    async def claim(
        self, stream: str, consumer: str, entry_ids: Sequence[str], *, min_idle_ms: int
    ) -> list[Entry]:
        """XCLAIM these pending entries to ``consumer`` where still idle for ``min_idle_ms``
        or more; the entries claimed (one acknowledged or deleted meanwhile is not).
        An entry that is not UTF-8 comes back with ``problem`` set."""
        ...

    # -- consumers ---------------------------------------------------------------
    async def heartbeat(self, prefix: str, consumer: str, ttl_ms: int) -> None:
        """Say that ``consumer`` is alive for the next ``ttl_ms`` (its ``consumer_key``)."""

    async def alive(self, prefix: str, consumers: Iterable[str]) -> set[str]:
        """Which of ``consumers`` said they are alive (a heartbeat not yet run out)."""
        ...

    async def backlog(self, stream: str, *, ignore_consumer: str | None = None) -> Backlog | None:
        """What waits on the stream's group; None when the stream or the group does not exist.

        ``ignore_consumer`` is left out of ``consumers``: the lease-sweeper's own, which
        XCLAIM registered when it claimed entries back, is no worker.
        """
        ...

    async def delete_consumer(self, stream: str, consumer: str) -> int:
        """Remove ``consumer`` from the stream's group (XGROUP DELCONSUMER), as an operator
        does for a worker gone for good; how many entries it still held (0 without a group).

        Those entries leave the pending list with it and no one can claim them any
        more, so delete only a consumer that holds none.
        """
        ...

    async def length(self, stream: str) -> int:
        """Entries in the stream (0 if there is no such stream)."""
        ...

    async def entries(
        self, stream: str, *, start: str = "-", end: str = "+", count: int = 1000
    ) -> list[Entry]:
        """Entries in id order from ``start`` (an id, "(id" for after it, or "-")."""
        ...

    async def streams(self, prefix: str) -> list[str]:
        """Every queue stream under ``prefix``, sorted."""
        ...

    async def delete(self, streams: Iterable[str]) -> int:
        """Delete streams with their group and pending entries (tests: a lost stream); how many."""
        ...

    async def drop(self, prefix: str) -> int:
        """Delete every key under ``prefix:`` (tests, tools); how many."""
        ...

    # -- hints -------------------------------------------------------------------
    async def notify(self, channel: str, message: str) -> None:
        """PUBLISH ``message`` on ``channel``."""

    async def notify_many(self, messages: Sequence[tuple[str, str]]) -> None:
        """PUBLISH each (channel, message), in order, in one round trip where it can."""

    def subscribe(self, channels: Sequence[str]) -> AbstractAsyncContextManager[Subscription]:
        """Subscribed once entered; ``messages()`` then yields until the connection drops."""
        ...

    async def subscribers(self, channel: str) -> int:
        """How many subscriptions ``channel`` has (PUBSUB NUMSUB)."""
        ...
