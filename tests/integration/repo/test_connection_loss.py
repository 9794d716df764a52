"""A connection the server drops in the middle of a transaction fails the transaction as
Transient, whatever asyncpg raises on the way out, so callers retry instead of crashing
(PostgreSQL restarts in the chaos suite killed the timer and the outbox-enqueuer so)."""

from __future__ import annotations

import pytest

import composer_repo as repo
from tests.integration.waits import backend_gone, until


async def _terminate(conn: repo.Connection, pid: int) -> None:
    await conn.execute("SELECT pg_terminate_backend($1)", pid)
    await until(lambda: backend_gone(conn, pid), what=f"backend {pid} exited")


async def _dies_mid_block(pool: repo.Pool, killer: repo.Connection) -> None:
    async with repo.transaction(pool) as doomed:
        await _terminate(killer, await doomed.fetchval("SELECT pg_backend_pid()"))
        await repo.next_outbox_due(doomed, "dispatch")


async def _dies_before_commit(pool: repo.Pool, killer: repo.Connection) -> None:
    async with repo.transaction(pool) as doomed:
        await _terminate(killer, await doomed.fetchval("SELECT pg_backend_pid()"))


async def test_a_transaction_whose_connection_dies_mid_block_is_transient(
    pool: repo.Pool, conn: repo.Connection
) -> None:
    with pytest.raises(repo.Transient):
        await _dies_mid_block(pool, conn)


async def test_a_transaction_whose_connection_dies_before_commit_is_transient(
    pool: repo.Pool, conn: repo.Connection
) -> None:
    with pytest.raises(repo.Transient):
        await _dies_before_commit(pool, conn)


async def test_the_pool_serves_again_after_its_connection_died(
    pool: repo.Pool, conn: repo.Connection
) -> None:
    with pytest.raises(repo.Transient):
        await _dies_mid_block(pool, conn)
    async with repo.transaction(pool) as fresh:
        assert await repo.outbox_size(fresh) is not None
