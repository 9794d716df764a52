"""Advisory locks that keep a background loop single across its replicas.

A session-level lock rather than a transaction-level one: a sweep spans many
transactions (each recovered task is its own event), so the lock is held on
a connection set aside for the whole pass. If the holder dies, PostgreSQL
ends its session and the lock is free for another replica; a connection
going back to the pool is reset, which releases every advisory lock it holds.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from composer_repo._db import Pool, translate_errors
from composer_repo._sql import q


@asynccontextmanager
async def singleton(pool: Pool, name: str) -> AsyncIterator[bool]:
    """Try to become the one holder of ``name`` for the block; yields whether this
    process holds it. Never waits: a replica that does not get it skips its turn.

    Only the lock's own statements are translated into RepoErrors; exceptions from
    the block pass through untouched.
    """
    with translate_errors():
        conn = await pool.acquire()
    try:
        with translate_errors():
            held = bool(await conn.fetchval(q("try_advisory_lock"), name))
        yield held
        if held:
            with translate_errors():
                await conn.fetchval(q("advisory_unlock"), name)
    finally:
        with translate_errors():
            await pool.release(conn)  # the reset on release unlocks whatever is left
