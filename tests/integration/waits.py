"""Waiting on the database instead of sleeping: a condition polled to a deadline, and a
lease expired by the database's clock instead of by sleeping past its TTL.

A test that sleeps "long enough" passes or fails with the machine's load; one that
waits for the condition it needs takes as long as that takes, and says what did not
happen when the deadline passes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import composer_repo as repo


async def until(
    check: Callable[[], Awaitable[object]], timeout: float = 10.0, what: str = "condition"
) -> None:
    """Poll an async ``check`` until it returns something truthy, failing after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not hold within {timeout}s")
        await asyncio.sleep(0.02)


async def expire_lease(db: repo.Pool | repo.Connection, run_id: str, task_id: str) -> None:
    """Expire the task's lease now by the database's clock, which is what judges leases."""
    await db.execute(
        "UPDATE task_instances SET lease_expires_at = now() - interval '1 second' "
        "WHERE run_id = $1 AND id = $2",
        run_id,
        task_id,
    )


async def waiting_on_a_lock(conn: repo.Connection, pid: int) -> bool:
    """Whether backend ``pid`` is blocked on a lock (a row another transaction holds)."""
    return bool(
        await conn.fetchval(
            "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1", pid
        )
    )


async def backend_gone(conn: repo.Connection, pid: int) -> bool:
    """Whether backend ``pid`` has exited (after pg_terminate_backend, say)."""
    return not await conn.fetchval("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid)
