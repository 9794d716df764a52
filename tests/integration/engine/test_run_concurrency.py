"""Run concurrency (docs/architecture.md §4.13): a workflow's runs of one key hold at
most ``max_runs`` slots; those over the limit wait PENDING in their key's line and
start, by priority then first come, as slots free — or are cancelled, by the
strategy the workflow names. Slots are rows counted under the key's lock, so two
engines starting at once never both take the last one."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator

import pytest

import composer_repo as repo
from composer_core.model import RunStatus
from composer_engine import BadRequest, Engine, Report, Workflows, validate_definition
from tests.integration.waits import until


def _workflow(workflow_id: str, **concurrency: object) -> dict[str, object]:
    return {
        "id": workflow_id,
        "concurrency": {"key": "{{input.customer}}", "max_runs": 2, **concurrency},
        "priority": "{{has(input.priority) ? input.priority : 3}}",
        "nodes": [{"id": "charge", "type": "TASK", "queue": "payments", "spec": {}}],
    }


QUEUED = _workflow("charge")
NEWEST = _workflow("charge-newest", strategy="cancel_newest")
IN_PROGRESS = _workflow("charge-latest", strategy="cancel_in_progress")
ONE = {
    "id": "one-at-a-time",
    "concurrency": {"max_runs": 1},
    "priority": "{{input.priority}}",
    "nodes": [{"id": "work", "type": "TASK", "queue": "payments", "spec": {}}],
}


@pytest.fixture
async def engine(pool: repo.Pool) -> AsyncIterator[Engine]:
    workflows = Workflows(pool)
    for spec in (QUEUED, NEWEST, IN_PROGRESS, ONE):
        await workflows.create(validate_definition(spec), deploy=True)
    async with repo.connection(pool) as conn:  # each test starts with no run
        # task rows first: nothing cascades from a run (V028)
        for table in ("task_instances", "workflow_runs", "outbox", "run_slots", "runs_waiting"):
            await conn.execute(f"DELETE FROM {table}")
    e = Engine(pool)
    try:
        yield e
    finally:
        await e.aclose()


async def statuses(pool: repo.Pool, run_ids: list[str]) -> list[RunStatus]:
    async with repo.connection(pool) as conn:
        return [(await repo.get_run(conn, r)).status for r in run_ids]


async def running_per_key(pool: repo.Pool, workflow_id: str) -> Counter[str]:
    """How many runs of each key are RUNNING, read from the runs themselves."""
    async with repo.connection(pool) as conn:
        rows = await conn.fetch(
            "SELECT input->>'customer' FROM workflow_runs WHERE workflow_id = $1 "
            "AND status = 'RUNNING'",
            workflow_id,
        )
    return Counter(r[0] for r in rows)


async def finish(engine: Engine, pool: repo.Pool, run_id: str) -> None:
    async with repo.connection(pool) as conn:
        (task,) = await repo.get_run_tasks(conn, run_id)
    assert await engine.report_completed(run_id, task.task_id, task.node_id, task.attempt, {})


async def test_runs_over_a_keys_limit_wait_and_start_as_slots_free(
    engine: Engine, pool: repo.Pool
) -> None:
    keys = ["acme", "globex", "initech"]
    runs = {k: [] for k in keys}  # type: dict[str, list[str]]
    for i in range(12):
        key = keys[i % 3]
        started = await engine.start("charge", input={"customer": key})
        runs[key].append(started.run_id)
        assert started.status is (RunStatus.RUNNING if len(runs[key]) <= 2 else RunStatus.PENDING)

    assert await running_per_key(pool, "charge") == Counter(dict.fromkeys(keys, 2))
    for key in keys:
        assert await statuses(pool, runs[key]) == [RunStatus.RUNNING] * 2 + [RunStatus.PENDING] * 2
    waiting = await engine.reads.run(runs["acme"][3], full_access=True, live_seconds=15)
    assert waiting.waiting is not None
    assert "key 'acme'" in waiting.waiting and "2 of 2 running" in waiting.waiting
    assert "1 run(s) ahead of it" in waiting.waiting
    async with repo.connection(pool) as conn:
        kinds = [h.kind for h in await repo.run_history(conn, runs["acme"][3])]
    assert kinds == ["run.queued"]

    # every run ends; at no point does a key have more than 2 running, and the
    # waiting ones start in the order they came
    started_order: dict[str, list[str]] = {k: [] for k in keys}
    for _ in range(4):
        for key in keys:
            current = [
                r
                for r, s in zip(runs[key], await statuses(pool, runs[key]), strict=True)
                if s is RunStatus.RUNNING
            ]
            assert 1 <= len(current) <= 2
            started_order[key].extend(r for r in current if r not in started_order[key])
            await finish(engine, pool, current[0])
            assert max((await running_per_key(pool, "charge")).values(), default=0) <= 2

            async def settled(key: str = key) -> bool:
                s = await statuses(pool, runs[key])
                return s.count(RunStatus.PENDING) == 0 or s.count(RunStatus.RUNNING) == 2

            await until(settled, what=f"a waiting run of {key} started")
    for key in keys:
        assert started_order[key] == runs[key][: len(started_order[key])]
    for key in keys:
        for run in runs[key]:

            async def done(run: str = run) -> bool:
                (status,) = await statuses(pool, [run])
                return status is not RunStatus.PENDING

            await until(done, what=f"run {run} started")
            (status,) = await statuses(pool, [run])
            if status is RunStatus.RUNNING:
                await finish(engine, pool, run)
    for key in keys:
        assert await statuses(pool, runs[key]) == [RunStatus.SUCCEEDED] * 4
    async with repo.connection(pool) as conn:
        assert await conn.fetchval("SELECT count(*) FROM run_slots") == 0
        assert await conn.fetchval("SELECT count(*) FROM runs_waiting") == 0
        kinds = [h.kind for h in await repo.run_history(conn, runs["acme"][3])]
    assert kinds[:2] == ["run.queued", "run.started"]


async def test_engines_starting_at_once_never_exceed_the_limit(
    engine: Engine, pool: repo.Pool
) -> None:
    other = Engine(pool)
    try:
        started = await asyncio.gather(
            *(
                (engine if i % 2 else other).start("charge", input={"customer": "acme"})
                for i in range(10)
            )
        )
    finally:
        await other.aclose()
    assert sorted(s.status.value for s in started) == ["PENDING"] * 8 + ["RUNNING"] * 2
    assert await running_per_key(pool, "charge") == Counter({"acme": 2})


async def test_cancel_newest_cancels_the_start_over_the_limit(
    engine: Engine, pool: repo.Pool
) -> None:
    first = [await engine.start("charge-newest", input={"customer": "acme"}) for _ in range(2)]
    over = await engine.start("charge-newest", input={"customer": "acme"})
    other_key = await engine.start("charge-newest", input={"customer": "globex"})

    assert [s.status for s in first] == [RunStatus.RUNNING] * 2
    assert over.status is RunStatus.CANCELLED
    assert other_key.status is RunStatus.RUNNING
    async with repo.connection(pool) as conn:
        record = await repo.get_run(conn, over.run_id)
    assert record.status is RunStatus.CANCELLED
    assert record.error is not None and "'acme'" in record.error
    assert "cancel_newest" in record.error


async def test_cancel_in_progress_cancels_the_oldest_and_takes_its_slot(
    engine: Engine, pool: repo.Pool
) -> None:
    first = [
        (await engine.start("charge-latest", input={"customer": "acme"})).run_id for _ in range(2)
    ]
    newest = await engine.start("charge-latest", input={"customer": "acme"})
    assert newest.status is RunStatus.RUNNING

    async def oldest_cancelled() -> bool:
        return (await statuses(pool, first)) == [RunStatus.CANCELLED, RunStatus.RUNNING]

    await until(oldest_cancelled, what="the oldest run of the key cancelled")
    async with repo.connection(pool) as conn:
        record = await repo.get_run(conn, first[0])
        slots = await conn.fetchval("SELECT count(*) FROM run_slots WHERE key = 'acme'")
    assert record.error is not None and newest.run_id in record.error
    assert slots == 2
    assert await running_per_key(pool, "charge-latest") == Counter({"acme": 2})


async def test_a_late_high_priority_run_goes_before_queued_low_ones(
    engine: Engine, pool: repo.Pool
) -> None:
    holder = (await engine.start("one-at-a-time", input={"priority": 3})).run_id
    low = [(await engine.start("one-at-a-time", input={"priority": 5})).run_id for _ in range(3)]
    high = (await engine.start("one-at-a-time", input={"priority": 1})).run_id
    assert await statuses(pool, [*low, high]) == [RunStatus.PENDING] * 4

    order = []
    current = holder
    for _ in range(4):
        await finish(engine, pool, current)

        async def next_started() -> list[str]:
            s = await statuses(pool, [*low, high])
            return [r for r, st in zip([*low, high], s, strict=True) if st is RunStatus.RUNNING]

        await until(next_started, what="the next run in line started")
        (current,) = await next_started()
        order.append(current)
    assert order == [high, *low]


async def test_a_cancelled_waiting_run_leaves_the_line(engine: Engine, pool: repo.Pool) -> None:
    holder = (await engine.start("one-at-a-time", input={"priority": 3})).run_id
    waiting = [
        (await engine.start("one-at-a-time", input={"priority": 3})).run_id for _ in range(2)
    ]
    await engine.cancel(waiting[0], "not needed")
    await finish(engine, pool, holder)

    async def second_started() -> bool:
        return (await statuses(pool, waiting)) == [RunStatus.CANCELLED, RunStatus.RUNNING]

    await until(second_started, what="the run behind the cancelled one started")


async def test_a_start_whose_input_cannot_render_its_key_is_refused(engine: Engine) -> None:
    with pytest.raises(BadRequest, match=r"concurrency.key could not be rendered"):
        await engine.start("charge", input={"nobody": 1})
    with pytest.raises(BadRequest, match=r"priority must be a whole number from 1 to 5"):
        await engine.start("one-at-a-time", input={"priority": 9})


async def test_child_runs_of_a_limited_workflow_take_slots_too(
    engine: Engine, pool: repo.Pool
) -> None:
    workflows = Workflows(pool)
    await workflows.create(
        validate_definition(
            {
                "id": "parent-of-one",
                "nodes": [
                    {
                        "id": "child",
                        "type": "SUB_WORKFLOW",
                        "spec": {"workflow": "one-at-a-time", "input": {"priority": 3}},
                    }
                ],
            }
        ),
        deploy=True,
    )
    parents = [(await engine.start("parent-of-one")).run_id for _ in range(3)]

    async def children() -> list[tuple[str, RunStatus]]:
        async with repo.connection(pool) as conn:
            rows = await conn.fetch(
                "SELECT id, status FROM workflow_runs WHERE parent_run_id = ANY($1::text[]) "
                "ORDER BY id",
                parents,
            )
        return [(r[0], RunStatus(r[1])) for r in rows]

    async def one_runs_two_wait() -> bool:
        found = [s for _, s in await children()]
        return sorted(found) == sorted([RunStatus.RUNNING, RunStatus.PENDING, RunStatus.PENDING])

    await until(one_runs_two_wait, what="one child started, two waiting for the slot")
    for _ in range(3):
        (running,) = [c for c, s in await children() if s is RunStatus.RUNNING]
        await finish(engine, pool, running)

        async def handed_on(done: str = running) -> bool:
            found = dict(await children())
            return found[done] is RunStatus.SUCCEEDED and (
                RunStatus.PENDING not in found.values() or RunStatus.RUNNING in found.values()
            )

        await until(handed_on, what="the slot handed to the next child")
    assert {s for _, s in await children()} == {RunStatus.SUCCEEDED}

    async def parents_done() -> bool:
        return await statuses(pool, parents) == [RunStatus.SUCCEEDED] * 3

    await until(parents_done, what="every parent finished with its child")


async def test_a_handed_run_whose_lock_is_held_elsewhere_is_sent_its_start_instead(
    engine: Engine, pool: repo.Pool
) -> None:
    # a group commit starts the run it hands a slot to in its own transaction, but never
    # waits for that run's lock: held elsewhere, the run is sent its start as an event,
    # applied once the lock is free
    first = (await engine.start("one-at-a-time", input={"priority": 3})).run_id
    second = (await engine.start("one-at-a-time", input={"priority": 3})).run_id
    async with repo.connection(pool) as conn:
        (task,) = await repo.get_run_tasks(conn, first)
    report = Report(first, task.task_id, task.node_id, task.attempt, None, True, {})
    async with repo.connection(pool) as holder, holder.transaction():
        await holder.execute("SELECT 1 FROM workflow_runs WHERE id = $1 FOR UPDATE", second)
        assert await engine.report_many([report]) == [True]
        assert await statuses(pool, [first, second]) == [RunStatus.SUCCEEDED, RunStatus.PENDING]
        async with repo.connection(pool) as conn:
            sent = await conn.fetchval(
                "SELECT count(*) FROM outbox WHERE run_id = $1 AND kind = 'run_event'", second
            )
        assert sent == 1

    async def started() -> bool:
        return await statuses(pool, [second]) == [RunStatus.RUNNING]

    await until(started, what="the run handed the slot started from its event")
    async with repo.connection(pool) as conn:
        (second_task,) = await repo.get_run_tasks(conn, second)
        history = await repo.run_history(conn, second)
    assert second_task.node_id == "work"
    assert [h.actor for h in history if h.kind == "run.started"] == [f"run {first}"]
