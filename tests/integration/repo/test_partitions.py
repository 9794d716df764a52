"""Monthly partitions: created ahead, a clear error outside them, dropped when expired."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Iterator

import pytest

import composer_repo as repo
from composer_core.model import RunStatus
from tests.integration.databases import scratch_database

from .helpers import ensure_definition, uuid7

UTC = dt.UTC


def month_start(moment: dt.datetime, months: int = 0) -> dt.datetime:
    index = moment.year * 12 + moment.month - 1 + months
    return dt.datetime(index // 12, index % 12 + 1, 1, tzinfo=UTC)


def suffix(moment: dt.datetime) -> str:
    return f"{moment:%Y%m}"


@pytest.fixture(scope="module")
def own_database_url(pg_admin_url: str, pg_template: str) -> Iterator[str]:
    """This module drops partitions: it gets a database no other module shares."""
    with scratch_database(pg_admin_url, template=pg_template) as url:
        yield url


@pytest.fixture
async def pconn(own_database_url: str) -> AsyncIterator[repo.Connection]:
    connection = await repo.connect(own_database_url)
    try:
        yield connection
    finally:
        await connection.close()


async def test_partitions_exist_for_this_month_and_three_ahead(pconn: repo.Connection) -> None:
    now = dt.datetime.now(UTC)
    expected = [suffix(month_start(now, i)) for i in range(4)]

    months = await repo.list_partitions(pconn)

    assert set(expected) <= set(months)
    tables = {
        r["relname"]
        for r in await pconn.fetch("SELECT relname FROM pg_class WHERE relname LIKE '%\\_p2%'")
    }
    # every run-scoped table: run_history (V009) is found in the catalogue, not listed
    for table in ("workflow_runs", "task_instances", "workflow_events", "run_history"):
        assert {f"{table}_p{s}" for s in expected} <= tables
    assert await repo.ensure_partitions(pconn, months_ahead=3) == 0  # idempotent


async def test_a_client_run_id_from_yesterday_has_a_partition(pconn: repo.Connection) -> None:
    """Client run ids may be up to 24 h old, so on the 1st of a month the previous
    month needs a partition even in a database migrated that day."""
    yesterday = dt.datetime.now(UTC) - dt.timedelta(hours=23)

    assert suffix(yesterday) in await repo.list_partitions(pconn)
    version = await ensure_definition(pconn, "yesterday")
    await repo.insert_run(pconn, uuid7(yesterday), workflow_id="yesterday", version=version)


async def test_partition_bounds_follow_the_uuid7_time(pconn: repo.Connection) -> None:
    for moment in (
        dt.datetime(2026, 1, 1, tzinfo=UTC),
        dt.datetime(2026, 11, 29, 8, 21, 27, 123000, tzinfo=UTC),
    ):
        assert repo.uuid7_bound(moment) == await pconn.fetchval(
            "SELECT composer_uuid7_bound($1)", moment
        )
    start = month_start(dt.datetime.now(UTC))
    assert repo.uuid7_bound(start) <= uuid7(start) < repo.uuid7_bound(month_start(start, 1))


async def test_a_run_id_with_no_partition_gets_a_clear_error(pconn: repo.Connection) -> None:
    version = await ensure_definition(pconn)
    ancient = uuid7(dt.datetime(2001, 1, 1, tzinfo=UTC))
    not_a_uuid = "run-42"

    for run_id in (ancient, not_a_uuid):
        with pytest.raises(repo.NoPartition, match="run ids are UUIDv7s") as caught:
            await repo.insert_run(pconn, run_id, workflow_id="wf", version=version)
        assert run_id in str(caught.value)
        assert "composer_ensure_partitions" in str(caught.value)


async def test_dropping_expired_months_keeps_one_with_an_active_run(pconn: repo.Connection) -> None:
    version = await ensure_definition(pconn)
    now = dt.datetime.now(UTC)
    finished_month = month_start(now, -3)
    active_month = month_start(now, -2)
    for month in (finished_month, active_month):
        await pconn.execute("SELECT composer_create_month($1)", month)

    done = uuid7(finished_month + dt.timedelta(days=3))
    await repo.insert_run(pconn, done, workflow_id="wf", version=version, idempotency_key="k-old")
    await repo.record_signal_key(pconn, done, "s-old", name="go", delivered=True)
    await repo.finish_run(pconn, done, RunStatus.SUCCEEDED)
    active = uuid7(active_month + dt.timedelta(days=3))
    await repo.insert_run(pconn, active, workflow_id="wf", version=version)

    dropped = await repo.drop_partitions(pconn, older_than=month_start(now, -1))

    assert (dropped.months, dropped.failed) == ([suffix(finished_month)], {})
    months = await repo.list_partitions(pconn)
    assert suffix(finished_month) not in months
    assert suffix(active_month) in months
    assert await pconn.fetchval("SELECT to_regclass($1)", f"run_history_p{suffix(active_month)}")
    assert suffix(now) in months  # the current month is never "expired" here
    for table in ("task_instances", "workflow_events", "run_history"):
        assert (
            await pconn.fetchval("SELECT to_regclass($1)", f"{table}_p{suffix(finished_month)}")
            is None
        )
    with pytest.raises(repo.NotFound):
        await repo.get_run(pconn, done)
    assert (await repo.get_run(pconn, active)).status is RunStatus.RUNNING
    # The dropped month's idempotency keys went with it: the key is free again.
    again = await repo.insert_run(
        pconn, uuid7(), workflow_id="wf", version=version, idempotency_key="k-old"
    )
    assert again.created
    assert await repo.signal_key(pconn, done, "s-old") is None  # signal keys went too

    # Once the run finishes, its month goes too.
    await repo.finish_run(pconn, active, RunStatus.FAILED, error="x")
    assert (await repo.drop_partitions(pconn, older_than=month_start(now, -1))).months == [
        suffix(active_month)
    ]
