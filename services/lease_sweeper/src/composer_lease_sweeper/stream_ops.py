"""The stream operations the sweeper needs, as a typed interface.

The sweeper's loop talks to the queue streams only through ``StreamOps``, so
it is unit-tested with an in-memory fake (tests/integration/sweeper) and its
Redis client can be swapped for libs/queue's typed operations without
touching the loop. Today ``RedisStreamOps`` (redis_stream_ops.py) implements
it over redis-py, and is the only module of the sweeper that imports redis.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol


class StreamsUnavailable(Exception):
    """The queue streams could not be reached (Redis down, a timeout): the sweep stops
    and the next one tries again."""


@dataclass(frozen=True, slots=True)
class StreamEntry:
    """One stream entry: its id and its fields (a task message)."""

    id: str
    fields: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Reclaimed:
    """One page of entries claimed back; ``cursor`` continues the scan (None: done)."""

    entries: list[StreamEntry]
    cursor: str | None


@dataclass(frozen=True, slots=True)
class Backlog:
    """A stream's workers' group: entries waiting (unread or unacknowledged), consumers."""

    waiting: int
    consumers: int


class StreamOps(Protocol):
    """The queue streams under one prefix, as the sweeper uses them."""

    async def queue_streams(self) -> list[str]:
        """Every queue stream under the prefix, sorted."""
        ...

    async def reclaim(
        self, stream: str, *, min_idle_seconds: float, count: int, cursor: str | None = None
    ) -> Reclaimed:
        """Claim for the sweeper up to ``count`` entries that sat unacknowledged on a
        consumer for ``min_idle_seconds`` or more (XAUTOCLAIM). A stream no worker ever
        read has nothing pending: an empty, finished page."""
        ...

    async def ack(self, stream: str, entry_ids: Sequence[str]) -> None:
        """Acknowledge and delete entries, in one atomic step."""
        ...

    async def redeliver(self, stream: str, entry_id: str, fields: Mapping[str, str]) -> None:
        """Add ``fields`` as a new entry and acknowledge and delete ``entry_id``, atomically
        (workers read only new entries, so a redelivery is an entry added anew)."""
        ...

    async def length(self, stream: str) -> int:
        """How many entries the stream holds (0 for a stream that does not exist)."""
        ...

    async def attempts_in(self, stream: str, task_ids: Collection[str]) -> set[tuple[str, int]]:
        """The (task id, attempt) pairs of ``task_ids`` that have an entry in the stream."""
        ...

    async def backlog(self, stream: str) -> Backlog | None:
        """The workers' group on the stream; None when there is none yet."""
        ...
