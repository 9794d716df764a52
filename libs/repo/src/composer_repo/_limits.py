"""Node concurrency (V019): the attempts of a concurrency key in flight and held
(docs/architecture.md §4.12). Decisions on a key take its advisory lock until
their transaction ends, so two never see the same free place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from composer_repo._admission import QueueLoad
from composer_repo._db import Connection, translated
from composer_repo._pauses import PAUSED_HOLD
from composer_repo._records import TaskRef
from composer_repo._sql import q


@translated
async def set_task_limits(conn: Connection, limited: Sequence[tuple[TaskRef, str, int]]) -> None:
    """Mark just-inserted tasks with their node's key and max."""
    if not limited:
        return
    await conn.execute(
        q("set_task_limits"),
        [ref.run_id for ref, _, _ in limited],
        [ref.task_id for ref, _, _ in limited],
        [key for _, key, _ in limited],
        [most for _, _, most in limited],
    )


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
    """A held attempt of a key, with its queue and the max its node declared."""

    ref: TaskRef
    queue: str
    max: int


@translated
async def held_limit_tasks(conn: Connection, key: str, limit: int) -> list[HeldLimited]:
    """The oldest held attempts of the key, at most ``limit``, locked (SKIP LOCKED)."""
    rows = await conn.fetch(q("held_limit_tasks"), key, limit, PAUSED_HOLD)
    return [
        HeldLimited(
            TaskRef(r["run_id"], r["id"], r["node_id"], r["attempt"]), r["queue"], r["limit_max"]
        )
        for r in rows
    ]


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
