"""The Redis Streams contract between the outbox-enqueuer and the workers (DESIGN.md §5).

One stream per queue and shard, ``<prefix>:q:<queue>:<shard>``; a task goes
to shard crc32(task_id) mod N; one consumer group per stream. A message
carries the task attempt and, when it is small, the resolved input (else the
worker gets it with its lease). Every field is UTF-8 text: a non-UTF-8 field
would make XREADGROUP with decoded responses fail and leave a poison entry.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from typing import Any

GROUP = "composer-workers"
DEFAULT_SHARDS = 4
#: Inputs larger than this are not copied into the stream; the lease carries them.
MAX_INLINE_INPUT_BYTES = 32 * 1024


def stream_name(prefix: str, queue: str, shard: int) -> str:
    return f"{prefix}:q:{queue}:{shard}"


def queue_streams(prefix: str, queue: str, shards: int) -> list[str]:
    return [stream_name(prefix, queue, s) for s in range(shards)]


def shard_of(task_id: str, shards: int) -> int:
    return zlib.crc32(task_id.encode()) % shards


@dataclass(frozen=True, slots=True)
class TaskMessage:
    task_id: str
    run_id: str
    node_id: str
    node_type: str
    attempt: int
    workflow_id: str
    workflow_version: int
    #: The input as JSON text, or None when the worker must take it from the lease.
    input_json: str | None = None
    timeout_seconds: float | None = None
    #: The node's retry bound, so a handler knows when it runs its last attempt.
    max_attempts: int = 1
    #: W3C trace context of the decision that dispatched it, so the handler's span joins the trace.
    traceparent: str | None = None

    def fields(self) -> dict[str, str]:
        out = {
            "task_id": self.task_id,
            "run_id": self.run_id,
            "node_id": self.node_id,
            "node_type": self.node_type,
            "attempt": str(self.attempt),
            "workflow_id": self.workflow_id,
            "workflow_version": str(self.workflow_version),
            "max_attempts": str(self.max_attempts),
        }
        if self.input_json is not None:
            out["input"] = self.input_json
        if self.timeout_seconds is not None:
            out["timeout_seconds"] = repr(float(self.timeout_seconds))
        if self.traceparent:
            out["traceparent"] = self.traceparent
        return out

    @classmethod
    def from_fields(cls, fields: dict[str, str]) -> TaskMessage:
        """Decode a stream entry; raise ValueError naming what is missing or malformed."""
        try:
            timeout = fields.get("timeout_seconds")
            return cls(
                task_id=fields["task_id"],
                run_id=fields["run_id"],
                node_id=fields["node_id"],
                node_type=fields["node_type"],
                attempt=int(fields["attempt"]),
                workflow_id=fields["workflow_id"],
                workflow_version=int(fields["workflow_version"]),
                input_json=fields.get("input"),
                timeout_seconds=float(timeout) if timeout else None,
                max_attempts=int(fields.get("max_attempts", "1")),
                traceparent=fields.get("traceparent"),
            )
        except (KeyError, ValueError) as exc:
            raise ValueError(f"malformed task message {fields!r}: {exc}") from exc

    @staticmethod
    def encode_input(value: Any) -> str | None:
        """The input as JSON text, or None when it is too large to inline."""
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        return text if len(text.encode()) <= MAX_INLINE_INPUT_BYTES else None


def connect(url: str) -> Any:
    """A Redis client as every Composer process uses it.

    RESP2 is fixed on purpose: redis-py 8 defaults to RESP3, where XREADGROUP
    replies nest differently; one protocol means one reply parser (below).
    Responses are decoded: every field we write is UTF-8 text.
    """
    import redis.asyncio as aioredis

    return aioredis.from_url(url, decode_responses=True, protocol=2, health_check_interval=30)


async def ping(client: Any) -> None:
    """A readiness check: Redis answers."""
    await client.ping()


Entry = tuple[str, str, dict[str, str]]  # (stream, entry id, fields)


def read_entries(reply: Any) -> list[Entry]:
    """Flatten an XREADGROUP/XREAD reply (RESP2) into (stream, id, fields) triples."""
    entries: list[Entry] = []
    for stream, items in reply or []:
        for entry_id, fields in items:
            if fields is not None:  # a deleted entry still in the PEL comes back empty
                entries.append((stream, entry_id, fields))
    return entries
