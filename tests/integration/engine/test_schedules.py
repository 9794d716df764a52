"""Schedules on PostgreSQL with a fixed clock (docs/architecture.md §6.8): one run per
fire time whoever fires it and however often, the catch-up window, each overlap
policy, pause, trigger, backfill, and the schedules a deployed definition lists."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator

import pytest

import composer_repo as repo
from composer_core.model import RunStatus
from composer_core.schedules import ScheduleSpec
from composer_engine import Conflict, Engine, InputInvalid, Workflows, validate_definition

T0 = dt.datetime(2026, 12, 2, 10, 0, tzinfo=dt.UTC)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


SLOW = {  # its TASK has no worker here: a run stays RUNNING until cancelled
    "id": "report",
    "nodes": [{"id": "build", "type": "TASK", "queue": "reports", "spec": {}}],
}


@pytest.fixture
async def engine(pool: repo.Pool) -> AsyncIterator[Engine]:
    async with repo.connection(pool) as conn:
        tables = ("workflow_runs", "schedules", "schedule_events", "run_idempotency_keys")
        for table in ("task_instances", *tables):  # task rows first: nothing cascades (V028)
            await conn.execute(f"DELETE FROM {table}")
    await Workflows(pool).create(validate_definition(SLOW), deploy=True)
    e = Engine(pool)
    try:
        yield e
    finally:
        await e.aclose()


async def runs_of(pool: repo.Pool, schedule_id: str) -> list[repo.RunRecord]:
    async with repo.connection(pool) as conn:
        page = await repo.list_runs(conn, schedule_id=schedule_id, limit=1000)
        return [await repo.get_run(conn, r.run_id) for r in reversed(page.runs)]


async def events_of(pool: repo.Pool, schedule_id: str) -> list[repo.ScheduleEvent]:
    async with repo.connection(pool) as conn:
        return list(reversed(await repo.schedule_events(conn, schedule_id, 1000)))


async def schedule(engine: Engine, **fields: object) -> str:
    spec = ScheduleSpec.model_validate({"id": "every10", "every_seconds": 10, **fields})
    await engine.schedules.create("report", spec, created_by="ops", now=at(-5))
    return spec.id


async def test_each_fire_time_starts_one_run_marked_with_it(
    engine: Engine, pool: repo.Pool
) -> None:
    sid = await schedule(engine, overlap="allow_all", input={"day": "today"})
    assert (await engine.schedules.fire_due(token="a", now=at(-1))).started == 0  # not yet
    done = await engine.schedules.fire_due(token="a", now=at(0.2))
    assert done.started == 1
    [lag] = done.lags  # its due time to its start, in the pass's time
    assert 0.2 <= lag < 5
    again = await engine.schedules.fire_due(token="a", now=at(0.3))
    assert again.started == 0  # the same fire time is not due twice
    await engine.schedules.fire_due(token="a", now=at(20.5))  # :10 and :20
    runs = await runs_of(pool, sid)
    assert [r.scheduled_for for r in runs] == [at(0), at(10), at(20)]
    assert all(r.schedule_id == sid and r.input == {"day": "today"} for r in runs)
    assert all(r.started_by == "schedule every10" for r in runs)
    assert [e.kind for e in await events_of(pool, sid)] == ["created", "fired", "fired", "fired"]


async def test_a_pass_repeated_after_a_lost_write_back_finds_its_runs(
    engine: Engine, pool: repo.Pool
) -> None:
    sid = await schedule(engine, overlap="allow_all")
    await engine.schedules.fire_due(token="a", now=at(10.5))
    first = [r.run_id for r in await runs_of(pool, sid)]
    assert len(first) == 2
    # as if the pass died after its starts committed and before its row's update
    async with repo.connection(pool) as conn:
        await conn.execute(
            "UPDATE schedules SET next_fire_at = $2, due_at = $2, fired = 0 WHERE id = $1",
            sid,
            at(0),
        )
    await engine.schedules.fire_due(token="b", now=at(10.6))
    assert [r.run_id for r in await runs_of(pool, sid)] == first  # found, not started again


async def test_two_replicas_firing_at_once_start_each_fire_once(
    engine: Engine, pool: repo.Pool
) -> None:
    for n in range(20):
        spec = ScheduleSpec(id=f"s{n}", every_seconds=10, overlap="allow_all")
        await engine.schedules.create("report", spec, now=at(-5))
    other = Engine(pool)
    try:
        passes = await asyncio.gather(
            engine.schedules.fire_due(token="a", now=at(0.1), limit=20),
            other.schedules.fire_due(token="b", now=at(0.1), limit=20),
        )
    finally:
        await other.aclose()
    assert sum(p.started for p in passes) == 20
    async with repo.connection(pool) as conn:
        counts = await conn.fetch(
            "SELECT schedule_id, count(*) AS n FROM workflow_runs GROUP BY schedule_id"
        )
    assert sorted((r["schedule_id"], r["n"]) for r in counts) == sorted(
        (f"s{n}", 1) for n in range(20)
    )


async def test_fires_older_than_the_catchup_window_are_missed_and_recorded(
    engine: Engine, pool: repo.Pool
) -> None:
    sid = await schedule(engine, overlap="allow_all", catchup_window_seconds=25)
    done = await engine.schedules.fire_due(token="a", now=at(50.5))  # down for 50 s
    assert (done.started, done.missed) == (3, 3)  # :30 :40 :50 started; :00 :10 :20 missed
    assert [r.scheduled_for for r in await runs_of(pool, sid)] == [at(30), at(40), at(50)]
    missed = [e for e in await events_of(pool, sid) if e.kind == "missed"]
    assert len(missed) == 1 and missed[0].detail is not None
    assert missed[0].detail.startswith("3 fire time(s) from 2026-12-02T10:00:00+00:00")
    async with repo.connection(pool) as conn:
        row = await repo.get_schedule(conn, sid)
    assert (row.fired, row.missed, row.next_fire_at) == (3, 3, at(60))


async def test_skip_leaves_out_a_fire_while_the_last_run_goes(
    engine: Engine, pool: repo.Pool
) -> None:
    sid = await schedule(engine)  # overlap: skip (the default)
    await engine.schedules.fire_due(token="a", now=at(0.1))
    await engine.schedules.fire_due(token="a", now=at(10.1))
    runs = await runs_of(pool, sid)
    assert len(runs) == 1
    skipped = [e for e in await events_of(pool, sid) if e.kind == "skipped"]
    assert [e.scheduled_for for e in skipped] == [at(10)]
    await engine.cancel(runs[0].run_id, "done with it")
    await engine.schedules.fire_due(token="a", now=at(20.1))
    assert [r.scheduled_for for r in await runs_of(pool, sid)] == [at(0), at(20)]


async def test_buffer_one_keeps_one_fire_for_the_end_of_the_last_run(
    engine: Engine, pool: repo.Pool
) -> None:
    sid = await schedule(engine, overlap="buffer_one")
    await engine.schedules.fire_due(token="a", now=at(0.1))
    await engine.schedules.fire_due(token="a", now=at(20.1))  # :10 buffered, :20 skipped
    kinds = [(e.kind, e.scheduled_for) for e in await events_of(pool, sid)]
    assert ("buffered", at(10)) in kinds and ("skipped", at(20)) in kinds
    first = (await runs_of(pool, sid))[0]
    await engine.schedules.fire_due(token="a", now=at(21.5))  # still going: kept
    assert len(await runs_of(pool, sid)) == 1
    await engine.cancel(first.run_id, "done with it")
    await engine.schedules.fire_due(token="a", now=at(22.6))  # rechecked within a second
    assert [r.scheduled_for for r in await runs_of(pool, sid)] == [at(0), at(10)]


async def test_cancel_other_replaces_the_running_run(engine: Engine, pool: repo.Pool) -> None:
    sid = await schedule(engine, overlap="cancel_other")
    await engine.schedules.fire_due(token="a", now=at(0.1))
    await engine.schedules.fire_due(token="a", now=at(10.1))
    first, second = await runs_of(pool, sid)
    assert first.status is RunStatus.CANCELLED
    assert first.error is not None and "overlap cancel_other" in first.error
    assert second.status is RunStatus.RUNNING and second.scheduled_for == at(10)


async def test_a_paused_schedule_does_not_fire_and_resumes_from_now(
    engine: Engine, pool: repo.Pool
) -> None:
    sid = await schedule(engine, overlap="allow_all")
    await engine.schedules.pause(sid, by="ops")
    assert (await engine.schedules.fire_due(token="a", now=at(30.1))).started == 0
    resumed = await engine.schedules.resume(sid, by="ops", now=at(31))
    assert resumed.next_fire_at == at(40)  # the fires it slept through are not made up
    await engine.schedules.fire_due(token="a", now=at(40.1))
    assert [r.scheduled_for for r in await runs_of(pool, sid)] == [at(40)]


async def test_trigger_starts_a_run_now_under_the_overlap_policy(
    engine: Engine, pool: repo.Pool
) -> None:
    sid = await schedule(engine)  # skip
    fired = await engine.schedules.trigger(sid, by="ops", request_id="r1", now=at(3))
    assert fired.run_id is not None
    again = await engine.schedules.trigger(sid, by="ops", request_id="r1", now=at(3))
    assert again.run_id == fired.run_id  # the same request: its run, found again
    other = await engine.schedules.trigger(sid, by="ops", request_id="r2", now=at(4))
    assert other.run_id is None  # another while the first still goes: skipped
    runs = await runs_of(pool, sid)
    assert [(r.run_id, r.scheduled_for) for r in runs] == [(fired.run_id, at(3))]
    async with repo.connection(pool) as conn:
        row = await repo.get_schedule(conn, sid)
    assert (row.fired, row.skipped) == (1, 1)


async def test_a_backfill_starts_each_fire_time_of_its_range_once(
    engine: Engine, pool: repo.Pool
) -> None:
    sid = await schedule(engine, overlap="allow_all")
    await engine.schedules.fire_due(token="a", now=at(0.1))  # :00 fired already
    backfill = await engine.schedules.backfill(sid, at(-30), at(0), by="ops")
    assert backfill.total == 4  # -30, -20, -10, 0
    await engine.schedules.fire_due(token="a", now=at(1))
    async with repo.connection(pool) as conn:
        done = await repo.get_backfill(conn, backfill.backfill_id)
    assert done.finished_at is not None and done.started == 4
    fired = sorted(r.scheduled_for for r in await runs_of(pool, sid) if r.scheduled_for)
    assert fired == [at(-30), at(-20), at(-10), at(0)]  # :00 is the run it fired, found again


async def test_buffer_all_backfills_one_run_after_another(engine: Engine, pool: repo.Pool) -> None:
    sid = await schedule(engine)
    await engine.schedules.pause(sid)
    backfill = await engine.schedules.backfill(sid, at(-20), at(0), overlap="buffer_all")
    for expected in (1, 2, 3):
        await engine.schedules.fire_due(token="a", now=at(1))
        runs = await runs_of(pool, sid)
        assert len(runs) == expected  # the next waits for this one's end
        await engine.cancel(runs[-1].run_id, "next")
    await engine.schedules.fire_due(token="a", now=at(1))
    async with repo.connection(pool) as conn:
        assert (await repo.get_backfill(conn, backfill.backfill_id)).finished_at is not None


async def test_a_deployed_definition_writes_and_removes_its_schedules(
    engine: Engine, pool: repo.Pool
) -> None:
    workflows = Workflows(pool)
    with_schedule = {
        **SLOW,
        "schedules": [{"id": "nightly", "cron": "0 2 * * *", "timezone": "Europe/Berlin"}],
    }
    await workflows.create(validate_definition(with_schedule), deploy=True)
    listed = await engine.schedules.list(workflow_id="report")
    assert [(s.schedule_id, s.source) for s in listed] == [("nightly", "definition")]
    with pytest.raises(Conflict, match="deploy a version without it"):
        await engine.schedules.delete("nightly")
    await workflows.create(validate_definition(SLOW), deploy=True)
    assert await engine.schedules.list(workflow_id="report") == []
    await schedule(engine)
    clash = {**SLOW, "schedules": [{"id": "every10", "every_seconds": 5}]}
    with pytest.raises(Conflict, match="made through the API"):
        await workflows.create(validate_definition(clash), deploy=True)


async def test_a_fire_the_engine_refuses_does_not_hold_up_the_others(
    engine: Engine, pool: repo.Pool
) -> None:
    lax = {**SLOW, "id": "strict"}
    await Workflows(pool).create(validate_definition(lax), deploy=True)
    bad = ScheduleSpec(id="bad", every_seconds=10, input={})  # fits version 1, not 2
    await engine.schedules.create("strict", bad, now=at(-5))
    strict = {**lax, "input_schema": {"required": ["day"]}}
    await Workflows(pool).create(validate_definition(strict), deploy=True)
    with pytest.raises(InputInvalid, match="schedule 'late'"):  # refused when made now
        await engine.schedules.create("strict", bad.model_copy(update={"id": "late"}))
    for n in range(5):  # fired in the same pass, their starts in the same transaction
        good = ScheduleSpec(id=f"good{n}", every_seconds=10, input={"day": "today"})
        await engine.schedules.create("strict", good, now=at(-5))
    done = await engine.schedules.fire_due(token="a", now=at(0.1))
    assert (done.started, done.skipped) == (5, 1)
    for n in range(5):
        assert [r.scheduled_for for r in await runs_of(pool, f"good{n}")] == [at(0)]
    failed = [e for e in await events_of(pool, "bad") if e.kind == "failed"]
    assert len(failed) == 1 and failed[0].detail is not None
    assert "input" in failed[0].detail and failed[0].scheduled_for == at(0)
    async with repo.connection(pool) as conn:
        assert (await repo.get_schedule(conn, "bad")).next_fire_at == at(10)  # it goes on
