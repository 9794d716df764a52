"""Pause and resume in the engine, beside the admission step (docs/architecture.md
§4.14): a retry decided while paused is held with its backoff kept and sent at the
resume no earlier than its backoff's end; a pause frees its tasks' places on a limited
queue for other runs, and its resume goes through the queue's limit again."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator

import pytest

import composer_repo as repo
from composer_engine import Engine, QueueConcurrency, Workflows, validate_definition

FLAKY = {
    "id": "flaky-charge",
    "nodes": [
        {
            "id": "charge",
            "type": "TASK",
            "queue": "flaky",
            "spec": {},
            "retry": {"max_attempts": 3, "initial_seconds": 60},
        }
    ],
}
LIMITED = {
    "id": "limited-charge",
    "nodes": [{"id": "charge", "type": "TASK", "queue": "one-at-a-time", "spec": {}}],
}


@pytest.fixture
async def engine(pool: repo.Pool) -> AsyncIterator[Engine]:
    workflows = Workflows(pool)
    for spec in (FLAKY, LIMITED):
        await workflows.create(validate_definition(spec), deploy=True)
    e = Engine(pool, admission=QueueConcurrency({"one-at-a-time": 1}))
    try:
        yield e
    finally:
        await e.aclose()


async def task_row(pool: repo.Pool, run_id: str) -> dict[str, object]:
    async with repo.connection(pool) as conn:
        row = await conn.fetchrow(
            "SELECT t.id, t.state, t.attempt, t.held_reason, t.dispatched_at, now() AS now, "
            "       (SELECT o.next_attempt_at FROM outbox o"
            "         WHERE o.kind = 'dispatch' AND o.task_id = t.id) AS outbox_due,"
            "       EXISTS (SELECT 1 FROM outbox o"
            "                WHERE o.kind = 'dispatch' AND o.task_id = t.id) AS sent"
            "  FROM task_instances t WHERE t.run_id = $1",
            run_id,
        )
    assert row is not None
    return dict(row)


async def test_a_retry_decided_while_paused_keeps_its_backoff_through_the_resume(
    engine: Engine, pool: repo.Pool
) -> None:
    run_id = (await engine.start("flaky-charge")).run_id
    first = await task_row(pool, run_id)
    grant = await engine.acquire_lease(run_id, str(first["id"]), 0, owner="w-1", ttl=30.0)
    assert grant.granted
    await engine.pause(run_id)
    failed = await engine.report_failed(run_id, str(first["id"]), "charge", 0, "card declined")
    assert failed

    held = await task_row(pool, run_id)
    assert (held["state"], held["attempt"], held["held_reason"]) == (
        "PENDING",
        1,
        repo.PAUSED_HOLD,
    )
    assert not held["sent"]  # no outbox row: nothing publishes it while paused
    backoff_end = held["dispatched_at"]
    assert isinstance(backoff_end, dt.datetime) and isinstance(held["now"], dt.datetime)
    assert backoff_end - held["now"] > dt.timedelta(seconds=50)  # the 60 s backoff kept
    # a stream entry for it would be refused: held attempts are no one's to lease
    assert not (await engine.acquire_lease(run_id, str(first["id"]), 1, owner="w", ttl=5)).granted

    assert await engine.resume(run_id)
    released = await task_row(pool, run_id)
    assert released["held_reason"] is None
    assert released["sent"] and released["outbox_due"] == backoff_end  # sent when due


async def test_a_pause_frees_its_place_on_a_limited_queue_and_the_resume_waits_for_one(
    engine: Engine, pool: repo.Pool
) -> None:
    first = (await engine.start("limited-charge")).run_id
    second = (await engine.start("limited-charge")).run_id
    assert (await task_row(pool, first))["held_reason"] is None
    assert str((await task_row(pool, second))["held_reason"]).startswith("queue 'one-at-a-time'")

    await engine.pause(first)
    assert (await task_row(pool, first))["held_reason"] == repo.PAUSED_HOLD
    await engine.release_held()  # what the release after the pause's commit (or a sweep) does
    assert (await task_row(pool, second))["held_reason"] is None  # it took the place

    await engine.resume(first)  # the place is taken: held again, for the queue this time
    again = await task_row(pool, first)
    assert (again["state"], again["sent"]) == ("PENDING", False)
    assert str(again["held_reason"]).startswith("queue 'one-at-a-time'")
