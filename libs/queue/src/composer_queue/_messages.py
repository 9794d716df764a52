"""The stream contract between the outbox-enqueuer and the workers (docs/architecture.md).

One stream per queue and shard, ``<prefix>:q:<queue>:<shard>``; a task goes
to shard crc32(task_id) mod N; one consumer group per stream. A message
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
#: Stream field: how many times this attempt was delivered (absent: once). The
#: lease-sweeper counts redeliveries with it to give up on a poison task.
DELIVERIES = "deliveries"


def stream_name(prefix: str, queue: str, shard: int) -> str:
    return f"{prefix}:q:{queue}:{shard}"


def queue_streams(prefix: str, queue: str, shards: int) -> list[str]:
    return [stream_name(prefix, queue, s) for s in range(shards)]


def shard_of(task_id: str, shards: int) -> int:
    return zlib.crc32(task_id.encode()) % shards


def task_stream(prefix: str, queue: str, task_id: str, shards: int) -> str:
    """The stream a task's messages go to."""
    return stream_name(prefix, queue, shard_of(task_id, shards))


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

    def fields(self) -> dict[str, str]:
        out = {"task_id": self.task_id, "run_id": self.run_id, "attempt": str(self.attempt)}
        if self.traceparent:
            out["traceparent"] = self.traceparent
        return out

    @classmethod
    def from_fields(cls, fields: Mapping[str, str]) -> TaskMessage:
        """Decode a stream entry; raise MalformedMessage naming what is missing or malformed."""
        try:
            attempt = int(fields["attempt"])
            if attempt < 0:
                raise ValueError(f"attempt {attempt} is negative")
            return cls(
                task_id=fields["task_id"],
                run_id=fields["run_id"],
                attempt=attempt,
                traceparent=fields.get("traceparent"),
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
