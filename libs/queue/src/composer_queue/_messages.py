"""The stream contract between the outbox-enqueuer and the workers (docs/architecture.md).

One stream per queue and shard, ``<prefix>:q:<queue>:<shard>``; a task goes
to shard crc32(task_id) mod N; one consumer group per stream. A shard has a
stream per priority band (1 first … 5, docs/architecture.md §4.16): band 3, the
default, is the shard's stream itself, so work of the default priority costs what
it always did; band b is ``<shard's stream>:p<b>{<shard's stream>}``, whose hash
tag puts it in the shard's Redis Cluster slot (one script sees every band of a
shard). A message
names the task attempt and nothing else: the worker gets the input with its
lease. Every field is UTF-8 text: a non-UTF-8 field would make XREADGROUP with
decoded responses fail and leave a poison entry.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass

from composer_queue._errors import MalformedMessage

GROUP = "composer-workers"
DEFAULT_SHARDS = 4
#: The band of a task whose run has no priority of its own: the shard's stream.
DEFAULT_BAND = 3
#: Every band, first served first (before aging).
BANDS = (1, 2, 3, 4, 5)
#: Stream field: the priority band of the run that dispatched it (absent: 3).
PRIORITY = "priority"
#: A waiting entry gains one band per this many seconds waited (docs §4.16).
AGING_SECONDS = 60
#: Stream field: how many times this attempt was delivered (absent: once). The
#: lease-sweeper counts redeliveries with it to give up on a poison task.
DELIVERIES = "deliveries"


def stream_name(prefix: str, queue: str, shard: int) -> str:
    return f"{prefix}:q:{queue}:{shard}"


def queue_streams(prefix: str, queue: str, shards: int) -> list[str]:
    return [stream_name(prefix, queue, s) for s in range(shards)]


def shard_of(task_id: str, shards: int) -> int:
    return zlib.crc32(task_id.encode()) % shards


def task_stream(
    prefix: str, queue: str, task_id: str, shards: int, priority: int = DEFAULT_BAND
) -> str:
    """The stream a task's messages go to: its shard's, in its run's priority band."""
    return band_stream(stream_name(prefix, queue, shard_of(task_id, shards)), priority)


def band_stream(stream: str, band: int) -> str:
    """The stream of priority ``band`` of the shard whose (band 3) stream is ``stream``.
    A band out of 1..5 (a message written by something else) goes to band 3."""
    if band == DEFAULT_BAND or band not in BANDS:
        return stream
    return f"{stream}:p{band}{{{stream}}}"


def band_streams(stream: str) -> list[tuple[int, str]]:
    """(band, stream) of every band of the shard whose (band 3) stream is ``stream``."""
    return [(band, band_stream(stream, band)) for band in BANDS]


def entry_ms(entry_id: str) -> int:
    """When an entry was added, in ms since the epoch (its id's first part)."""
    return int(entry_id.partition("-")[0])


def effective_band(band: int, waited_ms: int) -> int:
    """The band an entry waiting ``waited_ms`` is served in: one better per whole
    ``AGING_SECONDS`` waited, never better than 1, so nothing starves."""
    return max(1, band - max(0, waited_ms) // (AGING_SECONDS * 1000))


def streams_pattern(prefix: str) -> str:
    """A SCAN pattern matching every queue stream under ``prefix``."""
    return f"{prefix}:q:*"


def consumer_key(prefix: str, consumer: str) -> str:
    """The key a live worker keeps under ``prefix`` to say its consumer is alive
    (``Queue.heartbeat``): the lease-sweeper counts a delivery lost only when the
    consumer that held the entry has no such key any more."""
    return f"{prefix}:consumer:{consumer}"


@dataclass(frozen=True, slots=True)
class TaskMessage:
    """A task attempt's stream message: ids only.

    Anyone who can write to Redis can add an entry, so a message names an attempt
    and nothing the worker acts on: the input, the node, its timeout and its
    attempt budget come with the lease, from the database (docs/architecture.md
    §6.1). Fields of older messages (input, node_id, ...) are ignored.
    """

    task_id: str
    run_id: str
    attempt: int
    #: W3C trace context of the decision that dispatched it, so the handler's span joins the trace.
    traceparent: str | None = None
    #: Its run's priority, the band it is published in (3, the default, is not written).
    priority: int = DEFAULT_BAND

    def fields(self) -> dict[str, str]:
        out = {"task_id": self.task_id, "run_id": self.run_id, "attempt": str(self.attempt)}
        if self.traceparent:
            out["traceparent"] = self.traceparent
        if self.priority != DEFAULT_BAND:
            out[PRIORITY] = str(self.priority)
        return out

    @classmethod
    def from_fields(cls, fields: Mapping[str, str]) -> TaskMessage:
        """Decode a stream entry; raise MalformedMessage naming what is missing or malformed."""
        try:
            attempt = int(fields["attempt"])
            if attempt < 0:
                raise ValueError(f"attempt {attempt} is negative")
            priority = int(fields.get(PRIORITY, DEFAULT_BAND))
            if priority not in BANDS:
                raise ValueError(f"priority {priority} is not one of 1 to 5")
            return cls(
                task_id=fields["task_id"],
                run_id=fields["run_id"],
                attempt=attempt,
                traceparent=fields.get("traceparent"),
                priority=priority,
            )
        except (KeyError, ValueError) as exc:
            raise MalformedMessage(f"malformed task message {dict(fields)!r}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class Entry:
    """One stream entry as read or claimed: where it is, its id, its fields."""

    stream: str
    entry_id: str
    fields: Mapping[str, str]
    #: Why the entry could not be read as text (a field that is not UTF-8: something
    #: other than Composer wrote it); its ``fields`` are then empty.
    problem: str | None = None

    def message(self) -> TaskMessage:
        """The task message it carries; MalformedMessage if it carries none."""
        if self.problem is not None:
            raise MalformedMessage(f"entry {self.entry_id} on {self.stream}: {self.problem}")
        return TaskMessage.from_fields(self.fields)

    @property
    def deliveries(self) -> int:
        """How many times this attempt was delivered (the ``deliveries`` field; at least 1)."""
        try:
            return max(1, int(self.fields.get(DELIVERIES, "1")))
        except ValueError:
            return 1

    @property
    def ref(self) -> tuple[str, str]:
        """(stream, entry id), what ``ack`` takes."""
        return (self.stream, self.entry_id)


@dataclass(frozen=True, slots=True)
class Reclaimed:
    """One page of XAUTOCLAIM: the entries claimed, and where the next page starts."""

    entries: list[Entry]
    #: The start of the next page; "0-0" when the scan is complete.
    next_start: str

    @property
    def done(self) -> bool:
        return self.next_start == "0-0"


@dataclass(frozen=True, slots=True)
class Pending:
    """An entry delivered and not yet acknowledged (one row of XPENDING)."""

    entry_id: str
    consumer: str
    idle_ms: int
    #: Times the group delivered it (reads and claims).
    times_delivered: int


@dataclass(frozen=True, slots=True)
class Backlog:
    """How much waits on one stream's consumer group (XINFO GROUPS)."""

    #: Entries added and not yet read by any consumer (0 when Redis cannot tell).
    lag: int
    #: Entries read and not yet acknowledged.
    pending: int
    #: Consumers the group knows: each one that read or claimed an entry stays until
    #: deleted (0: no worker ever read this stream), less the one ``backlog`` ignored.
    consumers: int

    @property
    def waiting(self) -> int:
        return self.lag + self.pending
