"""Buffered signals: kept until a WAIT_FOR_EVENT node takes them, oldest first."""

from __future__ import annotations

from collections.abc import Collection

from composer_core.statemachine import BufferSignal, ConsumeSignal, Signal
from composer_repo._db import Connection, translated
from composer_repo._records import BufferedSignal
from composer_repo._sql import q


@translated
async def buffer_signal(conn: Connection, run_id: str, action: BufferSignal) -> None:
    """Store a signal no node was waiting for when it arrived."""
    await conn.execute(q("buffer_signal"), action.signal_id, run_id, action.name, action.payload)


@translated
async def pending_signal(
    conn: Connection, run_id: str, name: str, exclude: Collection[str] = ()
) -> Signal | None:
    """The oldest unconsumed signal called ``name``, skipping the ids in ``exclude``
    (those an earlier node took in the same event, not yet marked consumed)."""
    row = await conn.fetchrow(q("pending_signal"), run_id, name, list(exclude))
    if row is None:
        return None
    return Signal(signal_id=row["id"], name=row["name"], payload=row["payload"])


@translated
async def consume_signal(conn: Connection, run_id: str, action: ConsumeSignal) -> bool:
    """Mark a buffered signal taken by ``action.node_id``; False if it was already taken."""
    taken = await conn.fetchval(q("consume_signal"), run_id, action.signal_id, action.node_id)
    return taken is not None


@translated
async def run_signals(conn: Connection, run_id: str) -> list[BufferedSignal]:
    """Every signal buffered for the run, consumed or not, oldest first. A signal a
    waiting node took as it arrived was never buffered and is not listed."""
    rows = await conn.fetch(q("run_signals"), run_id)
    return [
        BufferedSignal(
            signal_id=r["id"],
            name=r["name"],
            payload=r["payload"],
            created_at=r["created_at"],
            consumed_at=r["consumed_at"],
            consumed_by=r["consumed_by"],
        )
        for r in rows
    ]
