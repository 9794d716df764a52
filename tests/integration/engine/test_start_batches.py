"""Starts that arrive together share a transaction (``RunCommands.start``: a group
commit of starts, as the coordinator's of reports): many clients starting at once
pay one commit per batch, and each still gets its own answer — its run, or the
error that refused it alone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

import composer_repo as repo
from composer_common import ids
from composer_core.model import RunStatus
from composer_engine import Conflict, Engine, InputInvalid, Workflows, validate_definition
from composer_engine._runs import Started

WORKFLOW = "batched-one"
ONE = {
    "id": WORKFLOW,
    "input_schema": {"required": ["n"]},
    "nodes": [{"id": "work", "type": "TASK", "queue": "batched", "spec": {}}],
}


@pytest.fixture
async def engine(pool: repo.Pool) -> AsyncIterator[Engine]:
    await Workflows(pool).create(validate_definition(ONE), deploy=True)
    async with repo.connection(pool) as conn:
        # task rows first: nothing cascades from a run (V028)
        await conn.execute(
            "DELETE FROM task_instances t USING workflow_runs r"
            " WHERE t.run_id = r.id AND r.workflow_id = $1",
            WORKFLOW,
        )
        await conn.execute("DELETE FROM workflow_runs WHERE workflow_id = $1", WORKFLOW)
    e = Engine(pool)
    try:
        yield e
    finally:
        await e.aclose()


async def _tasks(pool: repo.Pool, run_id: str) -> list[repo.TaskRecord]:
    async with repo.connection(pool) as conn:
        return list(await repo.get_run_tasks(conn, run_id))


async def test_starts_at_once_share_commits_and_each_run_gets_its_first_task(
    engine: Engine, pool: repo.Pool
) -> None:
    batches = engine.runs.start_batches.batches
    started = await asyncio.gather(*(engine.start(WORKFLOW, input={"n": i}) for i in range(40)))
    assert all(s.created and s.status is RunStatus.RUNNING for s in started)
    assert len({s.run_id for s in started}) == 40
    for s in started:
        (task,) = await _tasks(pool, s.run_id)
        assert task.node_id == "work"
    # 40 starts, fewer commits: the ones that waited went together
    assert engine.runs.start_batches.batches - batches < 40


async def test_a_refused_start_fails_alone_and_the_rest_of_its_batch_starts(
    engine: Engine, pool: repo.Pool
) -> None:
    results = await asyncio.gather(
        *(engine.start(WORKFLOW, input={"n": i} if i != 7 else {}) for i in range(20)),
        return_exceptions=True,
    )
    assert isinstance(results[7], InputInvalid), results[7]
    rest = [r for i, r in enumerate(results) if i != 7]
    assert all(isinstance(r, Started) and r.created for r in rest), rest
    async with repo.connection(pool) as conn:
        count = await conn.fetchval(
            "SELECT count(*) FROM workflow_runs WHERE workflow_id = $1", WORKFLOW
        )
    assert count == 19


async def test_one_idempotency_key_sent_twice_at_once_starts_one_run(engine: Engine) -> None:
    fillers = [engine.start(WORKFLOW, input={"n": i}) for i in range(6)]
    twice = [engine.start(WORKFLOW, input={"n": 1}, idempotency_key="k-1") for _ in range(2)]
    results = await asyncio.gather(*fillers, *twice)
    first, second = results[-2:]
    assert first.run_id == second.run_id
    assert sorted([first.created, second.created]) == [False, True]


async def test_one_run_id_sent_twice_at_once_starts_it_once_and_refuses_the_other(
    engine: Engine, pool: repo.Pool
) -> None:
    run_id = ids.new_id()
    fillers = [engine.start(WORKFLOW, input={"n": i}) for i in range(6)]
    twice = [engine.start(WORKFLOW, input={"n": 1}, run_id=run_id) for _ in range(2)]
    results = await asyncio.gather(*fillers, *twice, return_exceptions=True)
    last_two = results[-2:]
    created = [r for r in last_two if isinstance(r, Started)]
    refused = [r for r in last_two if isinstance(r, Conflict)]
    assert len(created) == 1 and len(refused) == 1, last_two
    assert created[0].run_id == run_id
    (task,) = await _tasks(pool, run_id)  # started once: one first task
    assert task.node_id == "work"


async def test_aclose_waits_for_a_start_whose_caller_went_away(
    engine: Engine, pool: repo.Pool
) -> None:
    """A client that hangs up (a cancelled request) leaves its start's batch under way:
    a service stopping closes Redis and the pool only after that batch is done
    (``Engine.aclose``), so the run is there, with its first task, and nothing after
    uses a closed client."""
    run_id = ids.new_id()
    caller = asyncio.create_task(engine.start(WORKFLOW, input={"n": 1}, run_id=run_id))
    await asyncio.sleep(0)  # submitted: its batch has begun
    caller.cancel()

    await engine.aclose()

    (task,) = await _tasks(pool, run_id)
    assert task.node_id == "work"
    with pytest.raises(asyncio.CancelledError):
        await caller
