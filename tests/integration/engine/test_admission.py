"""The admission step: a queue's concurrency limit holds the tasks beyond it, PENDING
with a reason a person can read, and releases them oldest first as places free —
never more in flight than the limit, even from engines deciding at once
(docs/architecture.md §4.12)."""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
from collections.abc import AsyncIterator

import pytest

import composer_repo as repo
from composer_core.model import RunStatus, TaskState
from composer_engine import Engine, QueueConcurrency, Workflows, validate_definition
from tests.integration.waits import until

LIMITED = {
    "id": "charge",
    "nodes": [{"id": "charge", "type": "TASK", "queue": "payments", "spec": {}}],
}
#: The same queue, with the run's priority from its input (1 first … 5).
RANKED = {
    "id": "ranked-charge",
    "priority": "{{input.priority}}",
    "nodes": [{"id": "charge", "type": "TASK", "queue": "payments", "spec": {}}],
}
#: A node concurrency key (a line of its own), with the run's priority from its input.
RANKED_KEY = {
    "id": "ranked-partner",
    "priority": "{{input.priority}}",
    "nodes": [
        {
            "id": "call",
            "type": "TASK",
            "queue": "partner-calls",
            "spec": {},
            "concurrency": {"key": "ranked", "max": 1, "scope": "global"},
        }
    ],
}
#: A node concurrency key of one place, and a retry after a minute.
RETRIED_KEY = {
    "id": "retried-partner",
    "nodes": [
        {
            "id": "call",
            "type": "TASK",
            "queue": "partner-calls",
            "spec": {},
            "concurrency": {"key": "retried", "max": 1, "scope": "global"},
            "retry": {"max_attempts": 2, "initial_seconds": 60},
        }
    ],
}
FREE = {
    "id": "mail",
    "nodes": [{"id": "mail", "type": "TASK", "queue": "emails", "spec": {}}],
}
LIMIT = QueueConcurrency({"payments": 2})


@pytest.fixture
async def engine(pool: repo.Pool) -> AsyncIterator[Engine]:
    workflows = Workflows(pool)
    for spec in (LIMITED, RANKED, RANKED_KEY, RETRIED_KEY, FREE):
        await workflows.create(validate_definition(spec), deploy=True)
    async with repo.connection(pool) as conn:  # each test starts from an empty queue
        await conn.execute("DELETE FROM task_instances")  # nothing cascades from a run (V028)
        await conn.execute("DELETE FROM workflow_runs")
        await conn.execute("DELETE FROM outbox")
    e = Engine(pool, admission=LIMIT)
    try:
        yield e
    finally:
        await e.aclose()


async def tasks(pool: repo.Pool, queue: str) -> list[tuple[str, str, str, str | None, bool]]:
    """(run, task, state, held reason, has an outbox row) of each task of ``queue``."""
    async with repo.connection(pool) as conn:
        rows = await conn.fetch(
            "SELECT t.run_id, t.id, t.state, t.held_reason, "
            "       EXISTS (SELECT 1 FROM outbox o WHERE o.task_id = t.id) AS sent "
            "  FROM task_instances t WHERE t.queue = $1 ORDER BY t.created_at, t.id",
            queue,
        )
    return [(r[0], r[1], r[2], r[3], r[4]) for r in rows]


async def in_flight(pool: repo.Pool) -> list[str]:
    return [
        run
        for run, _, state, held, _ in await tasks(pool, "payments")
        if state in ("PENDING", "QUEUED", "RUNNING") and held is None
    ]


async def held(pool: repo.Pool) -> list[str]:
    return [run for run, _, _, reason, _ in await tasks(pool, "payments") if reason is not None]


async def finish(engine: Engine, pool: repo.Pool, run_id: str) -> None:
    async with repo.connection(pool) as conn:
        (task,) = await repo.get_run_tasks(conn, run_id)
    assert await engine.report_completed(run_id, task.task_id, task.node_id, task.attempt, {})


async def test_tasks_beyond_the_limit_wait_with_a_reason_and_go_oldest_first(
    engine: Engine, pool: repo.Pool
) -> None:
    runs = [(await engine.start("charge")).run_id for _ in range(5)]

    assert await in_flight(pool) == runs[:2]
    assert await held(pool) == runs[2:]
    for _, _, state, reason, sent in await tasks(pool, "payments"):
        if reason is not None:  # held: PENDING, nothing sent
            assert state == TaskState.PENDING.value
            assert not sent
            assert "'payments' is at its limit of 2" in reason
            assert "COMPOSER_QUEUE_CONCURRENCY" in reason
    async with repo.connection(pool) as conn:
        kinds = [h.kind for h in await repo.run_history(conn, runs[2])]
    assert "task.held" in kinds

    await finish(engine, pool, runs[0])
    await until(lambda: _flight_is(pool, runs[1:3]), what="the oldest held task released")
    assert await held(pool) == runs[3:]
    async with repo.connection(pool) as conn:
        kinds = [h.kind for h in await repo.run_history(conn, runs[2])]
    assert kinds.index("task.held") < kinds.index("task.released")

    for run in runs[1:]:
        await until(functools.partial(_flying, pool, run), what=f"run {run} in flight")
        assert len(await in_flight(pool)) <= 2
        await finish(engine, pool, run)
    for run in runs:
        async with repo.connection(pool) as conn:
            assert (await repo.get_run(conn, run)).status is RunStatus.SUCCEEDED


async def _flight_is(pool: repo.Pool, expected: list[str]) -> bool:
    return await in_flight(pool) == expected


async def _flying(pool: repo.Pool, run: str) -> bool:
    return run in await in_flight(pool)


async def test_a_queue_without_a_limit_is_never_held(engine: Engine, pool: repo.Pool) -> None:
    for _ in range(4):
        await engine.start("mail")
    states = await tasks(pool, "emails")
    assert len(states) == 4
    assert all(reason is None and sent for _, _, _, reason, sent in states)


async def test_engines_deciding_at_once_never_pass_the_limit(
    engine: Engine, pool: repo.Pool, database_url: str
) -> None:
    other_pool = await repo.create_pool(database_url, min_size=2, max_size=4)
    other = Engine(other_pool, admission=LIMIT)
    try:
        await asyncio.gather(*(e.start("charge") for _ in range(6) for e in (engine, other)))
    finally:
        await other.aclose()
        await other_pool.close()
    assert len(await in_flight(pool)) == 2
    assert len(await held(pool)) == 10


async def test_a_release_nobody_asked_for_is_made_by_the_sweeper_s_call(
    engine: Engine, pool: repo.Pool
) -> None:
    runs = [(await engine.start("charge")).run_id for _ in range(3)]
    # finished by an engine without the policy: no release is asked for after its commit
    await finish(Engine(pool), pool, runs[0])
    assert await held(pool) == runs[2:]

    assert await engine.release_held() == 1  # what the lease-sweeper calls on each pass

    assert await in_flight(pool) == runs[1:]
    assert await held(pool) == []
    assert await engine.release_held() == 0


async def _start(engine: Engine, workflow: str, priority: int) -> str:
    return (await engine.start(workflow, input={"priority": priority})).run_id


async def _age(pool: repo.Pool, run_id: str, minutes: int) -> None:
    """Make ``run_id``'s task ``minutes`` older, as if it had waited that long: the
    database's clock judges the wait, so moving its creation back is the wait."""
    async with repo.connection(pool) as conn:
        await conn.execute(
            "UPDATE task_instances SET created_at = created_at - make_interval(mins => $2) "
            "WHERE run_id = $1",
            run_id,
            minutes,
        )


async def test_a_late_high_priority_run_goes_before_held_low_ones(
    engine: Engine, pool: repo.Pool
) -> None:
    going = [await _start(engine, "ranked-charge", 3) for _ in range(2)]
    low = [await _start(engine, "ranked-charge", 5) for _ in range(3)]
    high = await _start(engine, "ranked-charge", 1)
    assert await held(pool) == [*low, high]  # a new task waits behind those held

    await finish(engine, pool, going[0])

    await until(lambda: _flight_is(pool, [going[1], high]), what="the priority-1 task released")
    assert await held(pool) == low
    await finish(engine, pool, going[1])
    await until(
        lambda: _flight_is(pool, [low[0], high]),  # listed oldest first
        what="then the oldest priority-5",
    )


async def test_a_held_task_gains_a_level_per_minute_so_nothing_starves(
    engine: Engine, pool: repo.Pool
) -> None:
    going = [await _start(engine, "ranked-charge", 3) for _ in range(2)]
    old_low = await _start(engine, "ranked-charge", 5)
    fresh_high = await _start(engine, "ranked-charge", 2)
    await _age(pool, old_low, 3)  # 5 less 3 levels: 2, as high as the fresh one, and older

    await finish(engine, pool, going[0])

    # listed oldest first, and it is the oldest now
    await until(lambda: _flight_is(pool, [old_low, going[1]]), what="the aged task released")
    assert await held(pool) == [fresh_high]


async def test_a_node_concurrency_key_releases_by_priority_then_first_come(
    engine: Engine, pool: repo.Pool
) -> None:
    first = await _start(engine, "ranked-partner", 3)
    low = [await _start(engine, "ranked-partner", 4) for _ in range(2)]
    high = await _start(engine, "ranked-partner", 2)

    async def next_after(run_id: str) -> str:
        async with repo.connection(pool) as conn:
            (task,) = await repo.get_run_tasks(conn, run_id)
        assert await engine.report_completed(run_id, task.task_id, task.node_id, task.attempt, {})
        going: list[str] = []

        async def one_going() -> bool:
            async with repo.connection(pool) as conn:
                going[:] = [
                    r[0]
                    for r in await conn.fetch(
                        "SELECT run_id FROM task_instances WHERE limit_key = 'global:ranked' "
                        "AND state IN ('PENDING', 'QUEUED') AND held_reason IS NULL"
                    )
                ]
            return len(going) == 1

        await until(one_going, what=f"the key's next attempt after {run_id} released")
        return going[0]

    assert await next_after(first) == high
    assert await next_after(high) == low[0]
    assert await next_after(low[0]) == low[1]


async def test_a_held_retry_is_sent_no_earlier_than_its_backoff_end(
    engine: Engine, pool: repo.Pool
) -> None:
    """A retry the admission step holds keeps its backoff: released while the backoff
    still runs, it is sent when it ends, not at once (it holds its place meanwhile)."""
    first = (await engine.start("retried-partner")).run_id
    second = (await engine.start("retried-partner")).run_id  # held: the key's place is taken

    async def attempt_of(run_id: str) -> dict[str, object]:
        async with repo.connection(pool) as conn:
            row = await conn.fetchrow(
                "SELECT t.id, t.node_id, t.attempt, t.held_reason, t.dispatched_at, now() AS now,"
                "       (SELECT o.next_attempt_at FROM outbox o"
                "         WHERE o.kind = 'dispatch' AND o.task_id = t.id"
                "         ORDER BY o.id DESC LIMIT 1) AS outbox_due"
                "  FROM task_instances t WHERE t.run_id = $1",
                run_id,
            )
        assert row is not None
        return dict(row)

    one = await attempt_of(first)
    assert (await attempt_of(second))["held_reason"] is not None
    assert (await engine.acquire_lease(first, str(one["id"]), 0, owner="w", ttl=30)).granted
    assert await engine.report_failed(first, str(one["id"]), "call", 0, "partner down")
    retry = await attempt_of(first)
    assert retry["attempt"] == 1 and retry["held_reason"] is not None  # behind the second
    backoff_end = retry["dispatched_at"]
    assert isinstance(backoff_end, dt.datetime) and isinstance(retry["now"], dt.datetime)
    assert backoff_end - retry["now"] > dt.timedelta(seconds=50)  # its minute, kept

    # the retry's task is older than the second's: it goes first, when its minute ends
    await engine.release_held()
    released = await attempt_of(first)
    assert released["held_reason"] is None
    assert released["dispatched_at"] == backoff_end
    assert released["outbox_due"] == backoff_end  # sent when its backoff ends, not now
    assert (await attempt_of(second))["held_reason"] is not None  # the place is the retry's
