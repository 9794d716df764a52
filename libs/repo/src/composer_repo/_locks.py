"""Advisory locks that keep a background loop single across its replicas.

A session-level lock rather than a transaction-level one: a sweep spans many
transactions (each recovered task is its own event), so the lock is held on
a connection set aside for the whole pass. If the holder dies, PostgreSQL
ends its session and the lock is free for another replica. The pool does not
reset connections, so the block's end always unlocks (or ends the session).
"""

from __future__ import annotations

import contextlib
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
    held = asked = False
    try:
        with translate_errors():
            held = bool(await conn.fetchval(q("try_advisory_lock"), name))
        asked = True
        yield held
    finally:
        ended = False
        try:
            if not asked:
                # cut short inside the lock's statement: it may have left a transaction
                # open that asyncpg does not know about (see _db.borrow)
                conn.terminate()
            elif held:
                # the pool does not reset connections (create_pool): unlock before release
                with translate_errors():
                    await conn.fetchval(q("advisory_unlock"), name)
        except Exception:
            # The connection was lost (a database restart; asyncpg may have taken it
            # back already): the session ended and freed the lock, and the block's own
            # outcome (its error, if any) stands.
            with contextlib.suppress(Exception):
                conn.terminate()
            ended = True
        except BaseException:
            conn.terminate()  # the session ends, and its lock with it
            raise
        finally:
            try:
                with translate_errors():
                    await pool.release(conn)
            except Exception:
                if not ended:
                    raise
