"""A pooled connection inside one transaction, with driver errors translated.

The engine and the background loops own their transactions (the caller owns
the transaction); this is how they open one without touching asyncpg.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from composer_repo._db import Connection, Pool, borrow, translate_errors
from composer_repo._migrate import require_schema


@asynccontextmanager
async def transaction(pool: Pool) -> AsyncIterator[Connection]:
    """Borrow a connection and run the block in a transaction: commit on success,
    roll back on any exception. Acquire, begin and commit failures raise RepoErrors
    (a lost connection or an unreachable server is Transient). After any exception,
    cancellation included, the connection goes back idle or not at all (``borrow``)."""
    with translate_errors():
        async with borrow(pool) as conn, conn.transaction():
            yield conn


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
