"""Node concurrency (V019): the attempts of a concurrency key in flight and held
(docs/architecture.md §4.12). Decisions on a key take its advisory lock until
their transaction ends, so two never see the same free place.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg

from composer_repo._admission import QueueLoad
from composer_repo._db import Connection, translated
from composer_repo._pauses import PAUSED_HOLD
from composer_repo._records import TaskRef
from composer_repo._sql import q


@dataclass(frozen=True, slots=True)
class TaskLimits:
    """What a just-inserted task of a limited node carries on its row."""

    ref: TaskRef
    #: Its concurrency key and max (None: none).
    limit_key: str | None
    limit_max: int | None
    #: Its rate key and units (None: none).
    rate_key: str | None
    rate_units: int | None


@translated
async def set_task_limits(conn: Connection, limited: Sequence[TaskLimits]) -> None:
    """Mark just-inserted tasks with their node's concurrency key and rate key."""
    if not limited:
        return
    await conn.execute(
        q("set_task_limits"),
        [t.ref.run_id for t in limited],
        [t.ref.task_id for t in limited],
        [t.limit_key for t in limited],
        [t.limit_max for t in limited],
        [t.rate_key for t in limited],
        [t.rate_units for t in limited],
    )


@translated
async def task_limit_keys(
    conn: Connection, refs: Sequence[TaskRef]
) -> dict[str, tuple[str | None, str | None]]:
    """Task id → the concurrency key and rate key its row carries."""
    if not refs:
        return {}
    rows = await conn.fetch(
        q("task_limit_keys"), [r.run_id for r in refs], [r.task_id for r in refs]
    )
    return {r["id"]: (r["limit_key"], r["rate_key"]) for r in rows}


@translated
async def lock_limit_key(conn: Connection, key: str) -> None:
    """Take the key's admission lock until the transaction ends."""
    await conn.execute(q("lock_limit_key"), key)


@translated
async def limit_load(conn: Connection, key: str, *, leaving_out: Sequence[str] = ()) -> QueueLoad:
    """How many attempts of the key are in flight (but ``leaving_out``) and held."""
    row = await conn.fetchrow(q("limit_load"), key, list(leaving_out), PAUSED_HOLD)
    assert row is not None  # an aggregate answers one row
    return QueueLoad(int(row["in_flight"]), int(row["held"]))


@dataclass(frozen=True, slots=True)
class HeldLimited:
    """A held attempt of a key, with its queue, the max its node declared, and its
    other limit: a rate key and units (concurrency release), or a concurrency key and
    max (rate release)."""

    ref: TaskRef
    queue: str
    max: int
    rate_key: str | None = None
    units: int = 0
    limit_key: str | None = None


@translated
async def held_limit_tasks(conn: Connection, key: str, limit: int) -> list[HeldLimited]:
    """The held attempts of the key that go first (their run's priority, aged a level a
    minute, then first come: §4.16), at most ``limit``, locked (SKIP LOCKED)."""
    return [_held(r) for r in await conn.fetch(q("held_limit_tasks"), key, limit, PAUSED_HOLD)]


def _held(r: asyncpg.Record) -> HeldLimited:
    """A held attempt's row (either look-up selects the same columns)."""
    rate_key = r["rate_key"]
    return HeldLimited(
        TaskRef(r["run_id"], r["id"], r["node_id"], r["attempt"]),
        r["queue"],
        r["limit_max"] or 0,
        rate_key=rate_key,
        units=(r["rate_units"] or 1) if rate_key is not None else 0,
        limit_key=r["limit_key"],
    )


@translated
async def held_limit_keys(conn: Connection) -> list[str]:
    """The keys with held attempts."""
    return [r["limit_key"] for r in await conn.fetch(q("held_limit_keys"), PAUSED_HOLD)]


@dataclass(frozen=True, slots=True)
class NodeLimitKey:
    """A node concurrency key with attempts in flight or held."""

    key: str
    in_use: int
    waiting: int
    max: int | None


@translated
async def node_limit_keys(conn: Connection, *, limit: int = 1000) -> list[NodeLimitKey]:
    rows = await conn.fetch(q("node_limit_keys"), limit)
    return [
        NodeLimitKey(r["limit_key"], int(r["in_use"]), int(r["waiting"]), r["limit_max"])
        for r in rows
    ]


@dataclass(slots=True)
class RateBucket:
    """A rate key's bucket, locked and refilled to ``now``: mutate ``tokens`` and store it."""

    key: str
    limit: int
    per_seconds: float
    tokens: float
    now: dt.datetime
    #: Who set its limit through the API (None: the definitions' values apply).
    set_by: str | None

    def seconds_for(self, units: int) -> float:
        """Until ``units`` tokens are in the bucket, at its refill rate."""
        return max(0.0, (units - self.tokens) * self.per_seconds / self.limit)


@translated
async def take_rate_bucket(
    conn: Connection, key: str, *, limit: int | None = None, per_seconds: float | None = None
) -> RateBucket:
    """The key's bucket, locked until the transaction ends and refilled to now. A node
    asking passes its ``limit`` per ``per_seconds``: they make the bucket (full) at its
    first use and apply unless someone set the key through the API; a release passes
    none and reads what is stored."""
    if limit is not None and per_seconds is not None:
        await conn.execute(q("make_rate_bucket"), key, limit, per_seconds)
    row = await conn.fetchrow(q("take_rate_bucket"), key)
    if row is None:  # a release of a key whose bucket is gone: nothing to give
        return RateBucket(key, 1, 1.0, 0.0, dt.datetime.now(dt.UTC), None)
    if row["set_by"] is None and limit is not None and per_seconds is not None:
        limit_per, period = limit, per_seconds
    else:
        limit_per, period = int(row["limit_per"]), float(row["per_seconds"])
    stored_rate = int(row["limit_per"]) / float(row["per_seconds"])
    tokens = min(float(limit_per), float(row["tokens"]) + float(row["elapsed"]) * stored_rate)
    return RateBucket(key, limit_per, period, tokens, row["now"], row["set_by"])


@translated
async def store_rate_bucket(conn: Connection, bucket: RateBucket) -> None:
    await conn.execute(
        q("store_rate_bucket"),
        bucket.key,
        bucket.tokens,
        bucket.now,
        bucket.limit,
        bucket.per_seconds,
    )


@translated
async def set_rate_limit(
    conn: Connection, key: str, *, limit: int, per_seconds: float, set_by: str
) -> None:
    """The key's limit from now on, whatever the definitions say (PUT /v1/limits)."""
    await conn.execute(q("set_rate_limit"), key, limit, per_seconds, set_by)


@translated
async def rate_held_load(conn: Connection, key: str) -> int:
    """How many attempts wait for the key's tokens."""
    return int(await conn.fetchval(q("rate_held_load"), key, PAUSED_HOLD))


@translated
async def held_rate_tasks(conn: Connection, key: str, limit: int) -> list[HeldLimited]:
    """The attempts waiting for the key's tokens that go first (as ``held_limit_tasks``),
    locked (SKIP LOCKED)."""
    return [_held(r) for r in await conn.fetch(q("held_rate_tasks"), key, limit, PAUSED_HOLD)]


@translated
async def held_rate_keys(conn: Connection) -> list[str]:
    return [r["rate_key"] for r in await conn.fetch(q("held_rate_keys"), PAUSED_HOLD)]


@dataclass(frozen=True, slots=True)
class RateLimitKey:
    """A rate key's bucket as GET /v1/limits shows it."""

    key: str
    limit: int
    per_seconds: float
    tokens: float
    waiting: int
    set_by: str | None


@translated
async def rate_limit_keys(conn: Connection, *, limit: int = 1000) -> list[RateLimitKey]:
    rows = await conn.fetch(q("rate_limit_keys"), limit)
    return [
        RateLimitKey(
            r["key"],
            int(r["limit_per"]),
            float(r["per_seconds"]),
            float(r["tokens"]),
            int(r["waiting"]),
            r["set_by"],
        )
        for r in rows
    ]
