"""A pooled connection inside one transaction, with driver errors translated.

The engine and the background loops own their transactions (the caller owns
the transaction); this is how they open one without touching asyncpg.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Literal

import asyncpg

from composer_repo._db import Connection, Pool, borrow, translate_errors
from composer_repo._errors import CommitUnknown, Transient
from composer_repo._migrate import require_schema
from composer_repo._sql import q

#: What ``commit_status`` can say of a transaction whose COMMIT answer was lost.
CommitStatus = Literal["committed", "aborted"]


@asynccontextmanager
async def transaction(pool: Pool) -> AsyncIterator[Connection]:
    """Borrow a connection and run the block in a transaction: commit on success,
    roll back on any exception. Acquire, begin and commit failures raise RepoErrors
    (a lost connection or an unreachable server is Transient). After any exception,
    cancellation included, the connection goes back idle or not at all (``borrow``)."""
    with translate_errors():
        async with borrow(pool) as conn, conn.transaction():
            yield conn


@dataclass(slots=True)
class _Tracking:
    """The open tracked transaction's connection, and its id once a statement read it."""

    conn: Connection
    xid: str | None = None


_tracking: ContextVar[_Tracking | None] = ContextVar("composer_repo.tracking", default=None)


def note_transaction_id(conn: Connection, xid: str | None) -> None:
    """A statement of ``conn``'s transaction read the transaction's id (``lock_runs``
    does, after its row locks gave it one): ``tracked_transaction`` needs no round trip
    of its own to ask for it before COMMIT."""
    tracking = _tracking.get()
    if xid is not None and tracking is not None and tracking.conn is conn:
        tracking.xid = xid


@asynccontextmanager
async def tracked_transaction(pool: Pool) -> AsyncIterator[Connection]:
    """``transaction``, for work that must take effect once: when the connection is
    lost while COMMIT is in flight, raises CommitUnknown (naming the transaction)
    instead of a plain Transient, so the caller asks ``commit_status`` rather than
    applying the work a second time. Costs one round trip before COMMIT (the
    transaction's id) unless a statement of the block read it already
    (``note_transaction_id``); a transaction that wrote nothing has none, and losing
    its COMMIT is a plain Transient."""
    xid: str | None = None
    pid = 0
    committing = False
    try:
        with translate_errors():
            async with borrow(pool) as conn, conn.transaction():
                tracking = _Tracking(conn)
                token = _tracking.set(tracking)
                try:
                    yield conn
                finally:
                    _tracking.reset(token)
                xid = tracking.xid or await conn.fetchval(q("transaction_id"))
                pid = conn.get_server_pid()
                committing = True
    except Transient as exc:
        if committing and xid is not None and _lost_in_flight(exc):
            raise CommitUnknown(
                f"the connection was lost during COMMIT of transaction {xid}: {exc}",
                xid=xid,
                backend_pid=pid,
            ) from exc
        raise


def _lost_in_flight(exc: Transient) -> bool:
    """Whether COMMIT failed with the connection (its outcome unknown) rather than
    being refused by the server (a definite rollback)."""
    cause = exc.__cause__
    if isinstance(cause, asyncpg.PostgresError):
        return isinstance(
            cause,
            asyncpg.PostgresConnectionError
            | asyncpg.AdminShutdownError
            | asyncpg.CrashShutdownError
            | asyncpg.CannotConnectNowError,
        )
    return True  # OSError, a timeout, the driver's "connection is closed"


async def commit_status(
    pool: Pool, xid: str, backend_pid: int, *, settle_seconds: float = 2.0
) -> CommitStatus:
    """Whether transaction ``xid`` (from CommitUnknown) committed. Raises Transient
    while the database cannot be asked; the caller retries.

    Right after the loss the server may still hold the transaction open ("in
    progress": it has not noticed its client is gone). After ``settle_seconds`` of
    that, the session holding it is ended, which settles it either way."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + settle_seconds
    give_up = deadline + settle_seconds
    delay = 0.01
    async with connection(pool) as conn:
        while True:
            status = await conn.fetchval(q("commit_status"), xid)
            if status == "committed":
                return "committed"
            if status == "aborted":
                return "aborted"
            if status is None:  # too old to know; cannot happen seconds after the loss
                raise Transient(f"the database no longer knows whether transaction {xid} committed")
            if loop.time() >= give_up:
                raise Transient(
                    f"transaction {xid} is still in progress after its session was ended"
                )
            if loop.time() >= deadline:
                await conn.fetchval(
                    q("end_transaction_of"), backend_pid, str(int(xid) & 0xFFFFFFFF)
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.2)


@asynccontextmanager
async def connection(pool: Pool) -> AsyncIterator[Connection]:
    """Borrow a connection with no transaction around the block: for one statement,
    which PostgreSQL runs atomically on its own (a lease is one fenced UPDATE).
    Saves the BEGIN and COMMIT round trips ``transaction`` costs. Errors as there,
    and a cancelled statement leaves no transaction behind (``borrow``)."""
    with translate_errors():
        async with borrow(pool) as conn:
            yield conn


async def check_ready(pool: Pool) -> None:
    """A readiness check: the database answers and its schema is the one this code needs.

    Raises SchemaOutdated (naming ``make migrate``) or a Transient error otherwise.
    """
    async with transaction(pool) as conn:
        await require_schema(conn)
