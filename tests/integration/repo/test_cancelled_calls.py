"""A call cancelled at any point never leaves a transaction on a pooled connection.

The shape of the bug (issue 13, item 8): a task cancelled inside a statement that
asyncpg had not prepared on that connection yet, after it sent Parse/Describe/Flush
and before the Sync, leaves PostgreSQL in an implicit transaction that asyncpg
does not know about. The pool sends no reset query, so the connection went back
as it was, and the next BEGIN on it joined that old transaction: a stale ``now()``
(a task finished before it started in the chaos suite) and a lock on task_instances
held while the connection sat in the pool.

Each test cancels many lease renewals at random points (``task.cancel()`` after a
random fraction of a millisecond, or ``asyncio.wait_for`` with a tiny timeout) on a
one-connection pool, and after each one opens a transaction on that pool and asks
the database whether it began after the cancelled call ended and holds no lock
on task_instances. Without a statement cache every call prepares its statement,
which widens the window; with the cache (how services run) a connection prepares
a statement on its first use, so the window opens after every new connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest

import composer_repo as repo

from .helpers import new_run, new_worker_task

CALLS = 300
#: Cancel within this many seconds of the call's start: most land inside a statement.
WINDOW = 0.0005

Borrow = Callable[[repo.Pool], AbstractAsyncContextManager[repo.Connection]]


@contextlib.asynccontextmanager
async def one_connection_pool(database_url: str, **kwargs: Any) -> AsyncIterator[repo.Pool]:
    """A pool of one connection, so the transaction after a call runs where the call ran."""
    pool = await repo.create_pool(database_url, min_size=1, max_size=1, **kwargs)
    try:
        yield pool
    finally:
        await pool.close()


async def cancel_at_random(rng: random.Random, call: Callable[[], Awaitable[None]]) -> bool:
    """Run ``call()`` and cancel it at a random point; whether it was cut short."""
    if rng.random() < 0.5:
        task = asyncio.ensure_future(call())
        asyncio.get_running_loop().call_later(rng.uniform(0, WINDOW), task.cancel)
        try:
            await task
        except asyncio.CancelledError:
            return True
        return False
    try:
        await asyncio.wait_for(call(), rng.uniform(0, WINDOW))
    except TimeoutError:
        return True
    return False


@pytest.mark.parametrize(
    ("borrow", "statement_cache_size", "surfaces_as"),
    [
        pytest.param(repo.connection, 0, "cancellation", id="single-statement-unprepared"),
        pytest.param(repo.connection, 100, "cancellation", id="single-statement-cached"),
        pytest.param(repo.transaction, 0, "cancellation", id="transaction-unprepared"),
        # the statement is cut short inside the block, which turns that into an
        # ordinary error: the connection is kept only if it proves idle
        pytest.param(repo.connection, 0, "error", id="single-statement-then-an-error"),
    ],
)
async def test_the_transaction_after_a_cancelled_call_starts_fresh(
    conn: repo.Connection,
    database_url: str,
    borrow: Borrow,
    statement_cache_size: int,
    surfaces_as: str,
) -> None:
    run_id = await new_run(conn)
    ref = await new_worker_task(conn, run_id)
    assert await repo.acquire_lease(conn, run_id, ref.task_id, 0, owner="w", ttl=600, token="tok")
    seed = random.randrange(2**32)
    rng = random.Random(seed)

    async def renew() -> None:
        async with borrow(pool) as c:
            await repo.renew_lease(c, run_id, ref.task_id, 0, owner="w", ttl=600, token="tok")

    async def renew_then_fail() -> bool:
        cut = False

        async def renewal(c: repo.Connection) -> None:
            await repo.renew_lease(c, run_id, ref.task_id, 0, owner="w", ttl=600, token="tok")

        try:
            async with borrow(pool) as c:
                cut = await cancel_at_random(rng, lambda: renewal(c))
                raise LookupError("the block fails after its statement was cut short")
        except LookupError:
            return cut

    cut_short = stale = locked = 0
    async with one_connection_pool(database_url, statement_cache_size=statement_cache_size) as pool:
        for _ in range(CALLS):
            if surfaces_as == "error":
                cut_short += await renew_then_fail()
            else:
                cut_short += await cancel_at_random(rng, renew)
            ended = await conn.fetchval("SELECT clock_timestamp()")
            async with repo.transaction(pool) as c:
                began = await c.fetchval("SELECT transaction_timestamp()")
                leftover_locks = await c.fetchval(
                    "SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() "
                    "AND relation = 'task_instances'::regclass"
                )
            stale += began < ended
            locked += leftover_locks > 0
        # and the connection serves after all that
        async with repo.connection(pool) as c:
            assert await repo.renew_lease(
                c, run_id, ref.task_id, 0, owner="w", ttl=600, token="tok"
            )

    # the test can fail only if the cancellations land inside the calls
    assert cut_short >= CALLS // 4, f"only {cut_short} of {CALLS} calls were cut short"
    assert (stale, locked) == (0, 0), (
        f"seed {seed}: of {cut_short} cancelled calls, {stale} left a transaction the next "
        f"BEGIN joined, {locked} left a lock on task_instances"
    )


async def fails_in_a_transaction(pool: repo.Pool) -> None:
    async with repo.transaction(pool) as c:
        await c.execute("SELECT 1")
        raise LookupError("the block's own error")


async def test_an_error_in_the_block_rolls_back_and_keeps_the_connection(
    database_url: str,
) -> None:
    async with one_connection_pool(database_url) as pool:
        async with repo.connection(pool) as c:
            pid = await c.fetchval("SELECT pg_backend_pid()")
        with pytest.raises(repo.RepoError):
            async with repo.connection(pool) as c:
                await c.execute("SELECT 1/0")
        with pytest.raises(LookupError):
            await fails_in_a_transaction(pool)
        async with repo.transaction(pool) as c:
            assert await c.fetchval("SELECT pg_backend_pid()") == pid


async def test_a_cancelled_block_gives_up_its_connection(database_url: str) -> None:
    """Cancellation ends the session rather than await a ROLLBACK a second cancel could cut."""
    blocked = asyncio.Event()

    async def stuck(pool: repo.Pool) -> None:
        async with repo.connection(pool) as c:
            await c.fetchval("SELECT 1")
            blocked.set()
            await asyncio.Event().wait()

    async with one_connection_pool(database_url) as pool:
        async with repo.connection(pool) as c:
            pid = await c.fetchval("SELECT pg_backend_pid()")
        task = asyncio.create_task(stuck(pool))
        await asyncio.wait_for(blocked.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        async with repo.transaction(pool) as c:
            assert await c.fetchval("SELECT pg_backend_pid()") != pid
