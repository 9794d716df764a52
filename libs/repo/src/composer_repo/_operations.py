"""Bulk operations on runs (V022): an operation's row, the run ids it collected
and how each was settled (docs/architecture.md §6.7)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from composer_core.templates import Json
from composer_repo._db import Connection, translated
from composer_repo._errors import NotFound
from composer_repo._sql import q

Outcome = Literal["done", "skipped", "failed"]


@dataclass(frozen=True, slots=True)
class OperationRecord:
    """An operation and how far it got."""

    operation_id: str
    action: str
    #: The listing's parameters as stored; None when the request named its runs.
    filter: Json
    reason: str
    from_node: str | None
    requested_by: str | None
    #: The exclusive upper run id of the next page to collect.
    cursor: str
    collected: bool
    total: int
    done: int
    skipped: int
    failed: int
    last_error: str | None
    created_at: dt.datetime
    updated_at: dt.datetime
    finished_at: dt.datetime | None


def _operation(r: Any) -> OperationRecord:
    return OperationRecord(
        operation_id=r["id"],
        action=r["action"],
        filter=r["filter"],
        reason=r["reason"],
        from_node=r["from_node"],
        requested_by=r["requested_by"],
        cursor=r["cursor"],
        collected=r["collected"],
        total=r["total"],
        done=r["done"],
        skipped=r["skipped"],
        failed=r["failed"],
        last_error=r["last_error"],
        created_at=r["created_at"],
        updated_at=r["updated_at"],
        finished_at=r["finished_at"],
    )


@translated
async def insert_operation(
    conn: Connection,
    operation_id: str,
    *,
    action: str,
    filter: Json,
    reason: str = "",
    from_node: str | None = None,
    requested_by: str | None = None,
    idempotency_key: str | None = None,
) -> tuple[str, bool]:
    """Store a new operation; with an ``idempotency_key`` already used, the first
    operation's id comes back instead, with False (nothing stored)."""
    stored = await conn.fetchval(
        q("insert_operation"),
        operation_id,
        action,
        filter,
        reason,
        from_node,
        requested_by,
        idempotency_key,
    )
    if stored is not None:
        return str(stored), True
    first = await conn.fetchrow(q("operation_by_key"), idempotency_key)
    if first is None:  # pragma: no cover - the key's row is there: the insert met it
        raise NotFound(f"no operation has idempotency key {idempotency_key!r}")
    return str(first["id"]), False


@translated
async def collect_operation_items(
    conn: Connection, operation_id: str, run_ids: Sequence[str], *, cursor: str, last: bool
) -> int:
    """Add a page of run ids to the operation; ``cursor`` is where the next page
    starts, ``last`` whether there is none. Returns the total collected."""
    total = await conn.fetchval(
        q("collect_operation_items"), operation_id, list(run_ids), cursor, last
    )
    if total is None:
        raise NotFound(f"operation {operation_id} does not exist")
    return int(total)


@translated
async def get_operation(conn: Connection, operation_id: str) -> OperationRecord:
    """One operation. Raises NotFound."""
    r = await conn.fetchrow(q("get_operation"), operation_id)
    if r is None:
        raise NotFound(f"operation {operation_id} does not exist")
    return _operation(r)


@translated
async def going_operations(conn: Connection, *, limit: int) -> list[OperationRecord]:
    """The operations not finished yet, oldest first."""
    return [_operation(r) for r in await conn.fetch(q("going_operations"), limit)]


@translated
async def pending_operation_items(conn: Connection, operation_id: str, *, limit: int) -> list[str]:
    """Run ids of the operation not settled yet, in id order."""
    rows = await conn.fetch(q("pending_operation_items"), operation_id, limit)
    return [r["run_id"] for r in rows]


@translated
async def settle_operation_item(
    conn: Connection, operation_id: str, run_id: str, outcome: Outcome, error: str | None = None
) -> bool:
    """Record how one run went and count it; False when it was settled before."""
    return bool(
        await conn.fetchval(q("settle_operation_item"), operation_id, run_id, outcome, error)
    )


@translated
async def finish_operation(conn: Connection, operation_id: str) -> bool:
    """Mark the operation DONE if every run is collected and settled."""
    return await conn.fetchval(q("finish_operation"), operation_id) is not None
