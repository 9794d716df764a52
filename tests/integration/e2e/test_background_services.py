"""The partition-manager's retention, and the timer, lease-sweeper and partition-manager
as processes: they refuse an outdated database, serve, and stop cleanly on SIGTERM.

This module drops partitions: it has a database of its own (module-scoped
``database_url``), so no other module's runs are in the months it drops.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import signal
import sys
from collections.abc import Iterator

import pytest

import composer_repo as repo
from composer_core.model import RunStatus
from composer_engine import Engine
from composer_partition_manager.loop import PartitionManager, month_end, month_start
from tests.integration.databases import scratch_database
from tests.integration.e2e.test_services import service_env, wait_for_line
from tests.integration.repo.helpers import ensure_definition, uuid7

UTC = dt.UTC
SERVICES = {
    "composer_timer": "firing due timers",
    "composer_lease_sweeper": "sweeping every",
    "composer_partition_manager": "retention is off",
}


@pytest.fixture
def empty_database(pg_admin_url: str) -> Iterator[str]:
    with scratch_database(pg_admin_url) as url:
        yield url


def months_ago(now: dt.datetime, months: int) -> dt.datetime:
    index = now.year * 12 + now.month - 1 - months
    return dt.datetime(index // 12, index % 12 + 1, 1, tzinfo=UTC)


async def test_an_expired_month_is_dropped_and_one_with_an_active_run_kept(
    pool: repo.Pool, caplog: pytest.LogCaptureFixture
) -> None:
    now = dt.datetime.now(UTC)
    expired, active = months_ago(now, 14), months_ago(now, 13)
    async with repo.transaction(pool) as conn:
        version = await ensure_definition(conn)
        for month in (expired, active):
            await conn.execute("SELECT composer_create_month($1)", month)
        done = uuid7(expired + dt.timedelta(days=2))
        await repo.insert_run(conn, done, workflow_id="wf", version=version)
        await repo.finish_run(conn, done, RunStatus.SUCCEEDED)
        waiting = uuid7(active + dt.timedelta(days=2))
        await repo.insert_run(conn, waiting, workflow_id="wf", version=version)
    manager = PartitionManager(Engine(pool), months_ahead=4, retention_days=180)

    with caplog.at_level(logging.INFO, logger="composer.partitions"):
        outcome = await manager.maintain()

    expired_month, active_month = f"{expired:%Y%m}", f"{active:%Y%m}"
    assert outcome.dropped == [expired_month]
    assert outcome.kept_active == {active_month: 1}
    assert f"{now:%Y%m}" in outcome.kept_recent
    async with repo.transaction(pool) as conn:
        months = await repo.list_partitions(conn)
        assert (await repo.get_run(conn, waiting)).status is RunStatus.RUNNING
        with pytest.raises(repo.NotFound):
            await repo.get_run(conn, done)
    assert expired_month not in months and active_month in months
    assert f"{months_ago(now, -4):%Y%m}" in months  # created ahead
    log = caplog.text
    assert f"dropped month {expired_month}" in log
    assert f"kept month {active_month} past retention" in log
    assert "1 run(s) still PENDING or RUNNING" in log

    # Once its last run finishes, the kept month goes on the next pass.
    async with repo.transaction(pool) as conn:
        await repo.finish_run(conn, waiting, RunStatus.FAILED, error="x")
    assert (await manager.maintain()).dropped == [active_month]


async def test_a_month_that_cannot_be_dropped_is_reported_and_the_others_go(
    pool: repo.Pool, caplog: pytest.LogCaptureFixture
) -> None:
    now = dt.datetime.now(UTC)
    stuck, expired = months_ago(now, 16), months_ago(now, 15)
    async with repo.transaction(pool) as conn:
        for month in (stuck, expired):
            await conn.execute("SELECT composer_create_month($1)", month)
        # someone's report view on the old month: DROP TABLE refuses while it exists
        await conn.execute(f"CREATE VIEW old_report AS SELECT * FROM task_instances_p{stuck:%Y%m}")
    manager = PartitionManager(Engine(pool), months_ahead=4, retention_days=180)

    with caplog.at_level(logging.INFO, logger="composer.partitions"):
        outcome = await manager.maintain()

    assert f"{expired:%Y%m}" in outcome.dropped  # the next month still went
    assert list(outcome.failed) == [f"{stuck:%Y%m}"]
    assert "other objects depend on it" in outcome.failed[f"{stuck:%Y%m}"]  # its reason
    [alert] = [r for r in caplog.records if r.levelname == "ALERT"]
    assert f"cannot drop month {stuck:%Y%m}" in alert.getMessage()
    async with repo.transaction(pool) as conn:
        await conn.execute("DROP VIEW old_report")
    assert (await manager.maintain()).dropped == [f"{stuck:%Y%m}"]  # fixed: it goes


async def test_with_retention_off_nothing_is_dropped(pool: repo.Pool) -> None:
    now = dt.datetime.now(UTC)
    old = months_ago(now, 30)
    async with repo.transaction(pool) as conn:
        await conn.execute("SELECT composer_create_month($1)", old)

    outcome = await PartitionManager(Engine(pool), retention_days=0).maintain()

    assert outcome.dropped == []
    assert f"{old:%Y%m}" in outcome.kept_recent


def test_month_bounds() -> None:
    assert month_start("202412") == dt.datetime(2024, 12, 1, tzinfo=UTC)
    assert month_end("202412") == dt.datetime(2025, 1, 1, tzinfo=UTC)
    assert month_end("202402") == dt.datetime(2024, 3, 1, tzinfo=UTC)


async def test_services_serve_and_stop_cleanly_on_sigterm(
    database_url: str, redis_url: str
) -> None:
    env = service_env(database_url, redis_url)
    procs = {
        module: await asyncio.create_subprocess_exec(
            sys.executable, "-m", module, env=env, stderr=asyncio.subprocess.PIPE
        )
        for module in SERVICES
    }
    for module, proc in procs.items():
        await wait_for_line(proc, SERVICES[module])
        proc.send_signal(signal.SIGTERM)
    for proc in procs.values():
        _, stderr = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0, stderr.decode()
