"""Node concurrency (docs/architecture.md §4.12): a worker node's ``concurrency: {key,
max, scope}`` lets at most ``max`` attempts of its key be with a worker or on their way
to one; the others wait PENDING with a reason, oldest first, and go as the key's
attempts finish. ``scope: global`` shares the key by name across workflows."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

import composer_repo as repo
from composer_core.model import RunStatus
from composer_engine import Engine, Workflows, validate_definition
from tests.integration.waits import until


def _charge(workflow_id: str, *, scope: str, key: str = "partner") -> dict[str, object]:
    return {
        "id": workflow_id,
        "nodes": [
            {
                "id": "call",
                "type": "TASK",
                "queue": "partner-calls",
                "spec": {},
                "concurrency": {"key": key, "max": 2, "scope": scope},
                "retry": {"max_attempts": 3, "initial_seconds": 0.01},
            }
        ],
    }


SHARED = [_charge("charge-a", scope="global"), _charge("charge-b", scope="global")]
OWN = [_charge("own-a", scope="workflow"), _charge("own-b", scope="workflow")]
PER_CUSTOMER: dict[str, object] = {
    "id": "charge-per-customer",
    "nodes": [
        {
            "id": "call",
            "type": "TASK",
            "queue": "partner-calls",
            "spec": {},
            "concurrency": {"key": "{{input.customer}}", "max": 1, "scope": "global"},
            "retry": {"max_attempts": 3, "initial_seconds": 0.01},
        }
    ],
}
ITEMS: dict[str, object] = {
    "id": "charge-items",
    "nodes": [
        {
            "id": "each",
            "type": "MAP",
            "spec": {
                "items": "{{input.items}}",
                "max_parallel": 10,
                "node": {
                    "type": "TASK",
                    "queue": "partner-calls",
                    "spec": {"n": "{{item.n}}"},
                    "concurrency": {"key": "{{item.customer}}", "max": 1},
                    "retry": {"max_attempts": 2, "initial_seconds": 0.01},
                },
            },
        }
    ],
}


@pytest.fixture
async def engine(pool: repo.Pool) -> AsyncIterator[Engine]:
    workflows = Workflows(pool)
    for spec in (*SHARED, *OWN, PER_CUSTOMER, ITEMS):
        await workflows.create(validate_definition(spec), deploy=True)
    async with repo.connection(pool) as conn:  # each test starts from an empty key
        # task rows first: nothing cascades from a run (V028)
        for table in ("task_instances", "workflow_runs", "outbox", "run_slots", "runs_waiting"):
            await conn.execute(f"DELETE FROM {table}")
    e = Engine(pool)
    try:
        yield e
    finally:
        await e.aclose()


async def flying(pool: repo.Pool) -> list[str]:
    """Runs whose call is with a worker or on its way, oldest first."""
    async with repo.connection(pool) as conn:
        rows = await conn.fetch(
            "SELECT run_id FROM task_instances WHERE held_reason IS NULL "
            "AND state IN ('PENDING', 'QUEUED', 'RUNNING') ORDER BY created_at, id"
        )
    return [r[0] for r in rows]


async def held(pool: repo.Pool) -> dict[str, str]:
    async with repo.connection(pool) as conn:
        rows = await conn.fetch(
            "SELECT run_id, held_reason FROM task_instances WHERE held_reason IS NOT NULL"
        )
    return {r[0]: r[1] for r in rows}


async def finish(engine: Engine, pool: repo.Pool, run_id: str, *, fail: bool = False) -> None:
    async with repo.connection(pool) as conn:
        (task,) = await repo.get_run_tasks(conn, run_id)
    if fail:
        assert await engine.report_failed(
            run_id, task.task_id, task.node_id, task.attempt, "partner said no"
        )
    else:
        assert await engine.report_completed(run_id, task.task_id, task.node_id, task.attempt, {})


async def test_a_global_key_is_shared_across_workflows_and_goes_oldest_first(
    engine: Engine, pool: repo.Pool
) -> None:
    runs = [
        (await engine.start(workflow_id)).run_id
        for workflow_id in ("charge-a", "charge-b", "charge-a", "charge-b", "charge-a")
    ]
    assert await flying(pool) == runs[:2]
    waiting = await held(pool)
    assert set(waiting) == set(runs[2:])
    assert all("global concurrency key 'partner'" in r for r in waiting.values())
    assert all("limit of 2 attempt(s)" in r for r in waiting.values())

    await finish(engine, pool, runs[0])

    async def third_goes() -> bool:
        return await flying(pool) == [runs[1], runs[2]]

    await until(third_goes, what="the oldest held attempt released")
    # a failed attempt frees its place; its retry asks again and, its task the oldest
    # held, goes first
    await finish(engine, pool, runs[1], fail=True)

    async def retry_goes() -> bool:
        return set(await flying(pool)) == {runs[1], runs[2]}

    await until(retry_goes, what="the retry released")
    async with repo.connection(pool) as conn:
        tasks = await repo.get_run_tasks(conn, runs[1])
    assert tasks[0].attempt == 1
    for run in [runs[1], runs[2], runs[3], runs[4]]:

        async def going(run: str = run) -> bool:
            return run in await flying(pool)

        await until(going, what=f"run {run} released")
        assert len(await flying(pool)) <= 2
        await finish(engine, pool, run)
    async with repo.connection(pool) as conn:
        for run in runs:
            assert (await repo.get_run(conn, run)).status is RunStatus.SUCCEEDED


async def test_a_workflow_scoped_key_is_each_workflows_own(engine: Engine, pool: repo.Pool) -> None:
    runs = [
        (await engine.start(workflow_id)).run_id
        for workflow_id in ("own-a", "own-a", "own-a", "own-b", "own-b")
    ]
    assert set(await flying(pool)) == {runs[0], runs[1], runs[3], runs[4]}
    waiting = await held(pool)
    assert list(waiting) == [runs[2]]
    assert "concurrency key 'partner' of workflow 'own-a'" in waiting[runs[2]]
    limits = {
        (v.kind, v.workflow_id, v.key): v for v in await engine.reads.run_limits(full_access=True)
    }
    own_a = limits[("node_concurrency", "own-a", "partner")]
    assert (own_a.in_use, own_a.limit, own_a.waiting) == (2, 2, 1)
    own_b = limits[("node_concurrency", "own-b", "partner")]
    assert (own_b.in_use, own_b.waiting) == (2, 0)


async def test_the_sweeper_pass_releases_what_nobody_asked_for(
    engine: Engine, pool: repo.Pool
) -> None:
    runs = [(await engine.start("own-a")).run_id for _ in range(3)]
    async with repo.connection(pool) as conn:  # a place frees with no release asked
        await conn.execute(
            "UPDATE task_instances SET state = 'COMPLETED', dispatched_at = NULL, "
            "finished_at = now() WHERE run_id = $1",
            runs[0],
        )
    assert await engine.release_held() == 1
    assert runs[2] in await flying(pool)


async def test_a_templated_key_limits_each_rendered_key_on_its_own(
    engine: Engine, pool: repo.Pool
) -> None:
    customers = ["acme", "bolt", "acme", "acme", "bolt"]
    runs = [
        (await engine.start("charge-per-customer", input={"customer": c})).run_id for c in customers
    ]
    assert await flying(pool) == [runs[0], runs[1]]  # one attempt per customer
    waiting = await held(pool)
    assert set(waiting) == {runs[2], runs[3], runs[4]}
    assert "global concurrency key 'acme' is at its limit of 1" in waiting[runs[2]]
    limits = {(v.kind, v.key): v for v in await engine.reads.run_limits(full_access=True)}
    assert (
        limits[("node_concurrency", "acme")].in_use,
        limits[("node_concurrency", "acme")].waiting,
    ) == (1, 2)
    # a failure frees acme's place (its key read from the row): its retry, the oldest
    # held of the key, goes first; bolt's line does not move
    await finish(engine, pool, runs[0], fail=True)

    async def retry_goes() -> bool:
        return set(await flying(pool)) == {runs[0], runs[1]}

    await until(retry_goes, what="acme's retry released")
    for run in runs:

        async def going(run: str = run) -> bool:
            return run in await flying(pool)

        await until(going, what=f"run {run} released")
        flying_now = await flying(pool)
        for customer in ("acme", "bolt"):
            assert sum(customers[runs.index(r)] == customer for r in flying_now) <= 1
        await finish(engine, pool, run)
    async with repo.connection(pool) as conn:
        for run in runs:
            assert (await repo.get_run(conn, run)).status is RunStatus.SUCCEEDED


async def test_a_maps_items_go_through_their_inner_nodes_key(
    engine: Engine, pool: repo.Pool
) -> None:
    items = [{"n": i, "customer": "acme" if i % 3 else "bolt"} for i in range(6)]
    run_id = (await engine.start("charge-items", input={"items": items})).run_id

    async def items_in_flight() -> list[tuple[int, str]]:
        async with repo.connection(pool) as conn:
            rows = await conn.fetch(
                "SELECT item, limit_key FROM task_instances WHERE run_id = $1 AND item IS NOT "
                "NULL AND held_reason IS NULL AND state IN ('PENDING', 'QUEUED', 'RUNNING') "
                "ORDER BY item",
                run_id,
            )
        return [(r[0], r[1]) for r in rows]

    # 10 places in the MAP, but one attempt per customer: items 0 (bolt) and 1 (acme)
    assert await items_in_flight() == [
        (0, "workflow:charge-items:bolt"),
        (1, "workflow:charge-items:acme"),
    ]
    done: set[int] = set()
    while len(done) < len(items):

        async def some_going() -> bool:
            return bool(await items_in_flight())

        await until(some_going, what="an item with a worker")
        going = await items_in_flight()
        assert len(going) <= 2 and len({key for _, key in going}) == len(going)
        index = going[0][0]
        async with repo.connection(pool) as conn:
            (item,) = [t for t in await repo.get_map_items(conn, run_id, "each") if t.item == index]
        # the first try of item 1 fails: its retry goes through the key again
        if index == 1 and item.attempt == 0:
            assert await engine.report_failed(run_id, item.task_id, "each", 0, "no")
        else:
            assert await engine.report_completed(
                run_id, item.task_id, "each", item.attempt, {"n": index}
            )
            done.add(index)

        async def moved(before: list[tuple[int, str]] = going) -> bool:
            now = await items_in_flight()
            return now != before or len(done) == len(items)

        await until(moved, what="the next item released")
    async with repo.connection(pool) as conn:
        run = await repo.get_run(conn, run_id)
    assert run.status is RunStatus.SUCCEEDED


async def test_a_cancel_or_a_pause_frees_a_rendered_keys_place_at_once(
    engine: Engine, pool: repo.Pool
) -> None:
    runs = [
        (await engine.start("charge-per-customer", input={"customer": "acme"})).run_id
        for _ in range(3)
    ]
    assert await flying(pool) == runs[:1]
    # a cancel frees the key its row names: the next in line goes, with no sweeper
    await engine.cancel(runs[0], "not needed")

    async def second_goes() -> bool:
        return await flying(pool) == [runs[1]]

    await until(second_goes, what="the held attempt released after the cancel")
    # a pause holds the attempt on its way to a worker and frees its place too
    assert await engine.pause(runs[1], "later")

    async def third_goes() -> bool:
        return await flying(pool) == [runs[2]]

    await until(third_goes, what="the held attempt released after the pause")
