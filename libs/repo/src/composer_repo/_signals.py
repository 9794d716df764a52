"""Signals: buffered until a WAIT_FOR_EVENT node takes them, oldest first; every
signal a run got is kept with who sent it."""

from __future__ import annotations

from composer_core.statemachine import Signal
from composer_core.templates import Json
from composer_repo._db import Connection, translated
from composer_repo._errors import NotFound
from composer_repo._records import BufferedSignal
from composer_repo._sql import q


@translated
async def buffer_signal(
    conn: Connection, run_id: str, signal_id: str, name: str, payload: Json = None
) -> None:
    """Store a signal no node was waiting for when it arrived."""
    await conn.execute(q("buffer_signal"), signal_id, run_id, name, payload)


@translated
async def record_signal_sender(conn: Connection, run_id: str, signal_id: str, sent_by: str) -> None:
    """Record who sent a signal this transaction buffered (their API token's name)."""
    if await conn.fetchval(q("record_signal_sender"), run_id, signal_id, sent_by) is None:
        raise NotFound(f"run {run_id} has no signal {signal_id}")


@translated
async def record_taken_signal(
    conn: Connection,
    run_id: str,
    signal_id: str,
    name: str,
    payload: Json = None,
    *,
    node_id: str,
    sent_by: str | None = None,
) -> None:
    """Keep a signal the waiting node ``node_id`` took as it arrived, consumed at once,
    so that the run's signals (``run_signals``) list it with who sent it."""
    await conn.execute(q("record_taken_signal"), signal_id, run_id, name, payload, node_id, sent_by)


@translated
async def pending_signals(conn: Connection, run_id: str) -> tuple[Signal, ...]:
    """The run's buffered signals no node took yet, oldest first."""
    rows = await conn.fetch(q("pending_signals"), run_id)
    return tuple(Signal(r["id"], r["name"], r["payload"]) for r in rows)


@translated
async def consume_signal(conn: Connection, run_id: str, signal_id: str, *, node_id: str) -> bool:
    """Mark a buffered signal taken by the node ``node_id``; False if it was already taken."""
    taken = await conn.fetchval(q("consume_signal"), run_id, signal_id, node_id)
    return taken is not None


@translated
async def run_signals(conn: Connection, run_id: str) -> list[BufferedSignal]:
    """Every signal of the run, consumed or not, oldest first, with who sent it. One a
    waiting node took as it arrived is listed consumed (since V008; not before)."""
    rows = await conn.fetch(q("run_signals"), run_id)
    return [
        BufferedSignal(
            signal_id=r["id"],
            name=r["name"],
            payload=r["payload"],
            created_at=r["created_at"],
            consumed_at=r["consumed_at"],
            consumed_by=r["consumed_by"],
            sent_by=r["sent_by"],
        )
        for r in rows
    ]


@translated
async def signal_key(conn: Connection, run_id: str, key: str) -> tuple[str, bool] | None:
    """The signal (name, delivered) applied to the run under Idempotency-Key ``key``;
    None when the key is new. Read under the run's lock, so two requests with one key
    cannot both find it new."""
    row = await conn.fetchrow(q("signal_key"), run_id, key)
    return None if row is None else (row["name"], row["delivered"])


@translated
async def record_signal_key(
    conn: Connection, run_id: str, key: str, *, name: str, delivered: bool
) -> None:
    """Remember, in the signal's transaction, that ``key`` sent signal ``name`` (and
    whether a waiting node took it), so a repeat of the request answers the same."""
    await conn.execute(q("record_signal_key"), run_id, key, name, delivered)
