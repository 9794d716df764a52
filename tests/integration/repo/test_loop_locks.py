"""What the timer, lease-sweeper and partition-manager lock and ask: a run lock that
never waits, a fenced check of an expired lease, a singleton lock, batch task states."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

import composer_repo as repo
from composer_core.model import TaskState
from tests.integration.waits import expire_lease, until, waiting_on_a_lock

from .helpers import new_run, new_worker_task

UTC = dt.UTC


async def expire(conn: repo.Connection, ref: repo.TaskRef) -> None:
    """Expire the attempt's lease by the database's clock, which judges leases."""
    await expire_lease(conn, ref.run_id, ref.task_id)


async def test_try_load_run_passes_a_run_another_transaction_holds(
    conn: repo.Connection, database_url: str
) -> None:
    run_id = await new_run(conn)
    other = await repo.connect(database_url)
    try:
        async with other.transaction():
            await repo.load_run(other, run_id)  # holds the run lock

            async with conn.transaction():
                skipped = await asyncio.wait_for(repo.try_load_run(conn, run_id), 2)
        async with conn.transaction():
            taken = await repo.try_load_run(conn, run_id)
    finally:
        await other.close()

    assert skipped is None
    assert taken is not None and taken.run.run_id == run_id


async def test_lock_expired_lease_is_fenced_by_expiry_owner_and_attempt(
    conn: repo.Connection,
) -> None:
    run_id = await new_run(conn)
    ref = await new_worker_task(conn, run_id)
    assert await repo.acquire_lease(conn, run_id, ref.task_id, 0, owner="w1", ttl=60, token="tok")

    live = await repo.lock_expired_lease(conn, ref, "w1")
    await expire(conn, ref)
    other_owner = await repo.lock_expired_lease(conn, ref, "w2")
    other_attempt = await repo.lock_expired_lease(
        conn, repo.TaskRef(run_id, ref.task_id, ref.node_id, 1), "w1"
    )
    expired = await repo.lock_expired_lease(conn, ref, "w1")
    await repo.renew_lease(conn, run_id, ref.task_id, 0, owner="w1", ttl=60, token="tok")
    renewed = await repo.lock_expired_lease(conn, ref, "w1")

    assert (live, other_owner, other_attempt, expired, renewed) == (
        False,
        False,
        False,
        True,
        False,
    )


async def test_lock_expired_lease_holds_off_a_renewal_until_commit(
    conn: repo.Connection, database_url: str
) -> None:
    run_id = await new_run(conn)
    ref = await new_worker_task(conn, run_id)
    assert await repo.acquire_lease(conn, run_id, ref.task_id, 0, owner="w1", ttl=60, token="tok")
    await expire(conn, ref)
    worker = await repo.connect(database_url)
    try:
        async with conn.transaction():
            assert await repo.lock_expired_lease(conn, ref, "w1")
            renewal = asyncio.ensure_future(
                repo.renew_lease(worker, run_id, ref.task_id, 0, owner="w1", ttl=60, token="tok")
            )
            pid = worker.get_server_pid()
            await until(lambda: waiting_on_a_lock(conn, pid), what="the renewal waits on the row")
            assert not renewal.done()
            await repo.fail_task(conn, ref, "lease expired")
        assert await asyncio.wait_for(renewal, 5) is None  # the attempt is no longer RUNNING
    finally:
        await worker.close()


async def test_singleton_is_held_by_one_session_at_a_time(database_url: str) -> None:
    pool = await repo.create_pool(database_url, min_size=1, max_size=3)
    try:
        async with (
            repo.singleton(pool, "test-loop") as first,
            repo.singleton(pool, "test-loop") as second,
            repo.singleton(pool, "other-loop") as unrelated,
        ):
            held = (first, second, unrelated)
        async with repo.singleton(pool, "test-loop") as again:
            after = again
    finally:
        await pool.close()

    assert held == (True, False, True)
    assert after is True


async def test_a_singleton_whose_session_died_keeps_the_blocks_own_error(
    database_url: str, conn: repo.Connection
) -> None:
    """Found by the chaos suite: a database restart mid-sweep made the unlock fail, and
    its error replaced the sweep's own and ended the process."""

    class SweepFailed(Exception):
        pass

    pool = await repo.create_pool(database_url, min_size=1, max_size=2)

    async def sweep() -> None:
        async with repo.singleton(pool, "dying-loop") as held:
            assert held
            await conn.execute(  # the lock's session dies (this test's database only)
                "SELECT pg_terminate_backend(pid) FROM pg_locks"
                " WHERE locktype = 'advisory' AND pid <> pg_backend_pid()"
                " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            )
            raise SweepFailed("the sweep's own error")

    try:
        with pytest.raises(SweepFailed):
            await sweep()
        async with repo.singleton(pool, "dying-loop") as again:
            assert again  # the lock went with the session
    finally:
        await pool.close()


async def test_task_attempts_reports_state_and_attempt_by_task(conn: repo.Connection) -> None:
    run_id = await new_run(conn)
    queued = await new_worker_task(conn, run_id, "q")
    leased = await new_worker_task(conn, run_id, "l")
    await repo.acquire_lease(conn, run_id, leased.task_id, 0, owner="w", ttl=30, token="tok")

    found = await repo.task_attempts(
        conn, [(run_id, queued.task_id), (run_id, leased.task_id), (run_id, "gone")]
    )

    assert {k: (v.state, v.attempt) for k, v in found.items()} == {
        queued.task_id: (TaskState.PENDING, 0),
        leased.task_id: (TaskState.RUNNING, 0),
    }
    assert await repo.task_attempts(conn, []) == {}


async def test_count_active_runs_counts_one_months_pending_and_running(
    conn: repo.Connection,
) -> None:
    now = dt.datetime.now(UTC)
    start = dt.datetime(now.year, now.month, 1, tzinfo=UTC)
    end = start + dt.timedelta(days=40)
    before = await repo.count_active_runs(conn, start=start, end=end)
    await new_run(conn)

    assert await repo.count_active_runs(conn, start=start, end=end) == before + 1
    assert await repo.count_active_runs(conn, start=end, end=end + dt.timedelta(days=30)) == 0


async def test_singleton_unlocks_when_its_block_raises(database_url: str) -> None:
    # one connection: the next holder gets the same session, so a lock left behind would show
    pool = await repo.create_pool(database_url, min_size=1, max_size=1)
    try:

        async def failing_pass() -> None:
            async with repo.singleton(pool, "test-loop") as held:
                assert held
                raise RuntimeError("the pass failed")

        with pytest.raises(RuntimeError):
            await failing_pass()
        other = await repo.connect(database_url)
        try:
            async with repo.singleton(pool, "test-loop") as again:
                taken = bool(
                    await other.fetchval("SELECT pg_try_advisory_lock(hashtext('test-loop'))")
                )
            free_after = bool(
                await other.fetchval("SELECT pg_try_advisory_lock(hashtext('test-loop'))")
            )
        finally:
            await other.close()
    finally:
        await pool.close()

    assert again is True
    assert taken is False  # held by the pooled session while the block ran
    assert free_after is True  # and released at its end, with no reset query


async def test_connection_borrows_without_a_transaction(pool: repo.Pool) -> None:
    async with repo.connection(pool) as conn:
        outside = conn.is_in_transaction()
    async with repo.transaction(pool) as conn:
        inside = conn.is_in_transaction()

    assert (outside, inside) == (False, True)
