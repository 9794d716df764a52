"""Monthly partitions of the run-scoped tables (the SQL functions in V001)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from composer_repo._db import Connection, translated
from composer_repo._runs import uuid7_bound
from composer_repo._sql import q


@translated
async def ensure_partitions(conn: Connection, *, months_ahead: int = 3) -> int:
    """Create the partitions of this UTC month and ``months_ahead`` after it that are
    missing; returns how many tables it created. Safe to run from several processes."""
    created: int = await conn.fetchval(q("ensure_partitions"), months_ahead)
    return created


@dataclass(frozen=True, slots=True)
class Dropped:
    """What ``drop_partitions`` did: the months dropped (YYYYMM), and the months it
    could not drop with the database's reason (each month is dropped on its own, so
    one that cannot be does not keep the others)."""

    months: list[str]
    failed: dict[str, str]


@translated
async def drop_partitions(conn: Connection, *, older_than: dt.datetime) -> Dropped:
    """Drop every month that ended at or before ``older_than``, except months that
    still have a PENDING or RUNNING run."""
    rows = await conn.fetch(q("drop_partitions"), older_than)
    return Dropped(
        [r["suffix"] for r in rows if r["error"] is None],
        {r["suffix"]: r["error"] for r in rows if r["error"] is not None},
    )


@translated
async def list_partitions(conn: Connection) -> list[str]:
    """The months that have partitions (YYYYMM), oldest first."""
    return [r["suffix"] for r in await conn.fetch(q("list_partitions"))]


@translated
async def count_active_runs(conn: Connection, *, start: dt.datetime, end: dt.datetime) -> int:
    """How many PENDING or RUNNING runs were created in [start, end) (one partition's
    month: why retention keeps it)."""
    count: int = await conn.fetchval(q("count_active_runs"), uuid7_bound(start), uuid7_bound(end))
    return count
