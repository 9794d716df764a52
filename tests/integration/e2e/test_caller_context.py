"""ctx.caller end to end: a start over the API with a named token and request
metadata, through the run's row, its TASK rows and the lease, into an SDK handler.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

import composer_repo as repo
from composer_sdk import Caller, TaskContext
from tests.integration.api.conftest import Gateway, open_gateway
from tests.integration.e2e.conftest import Stack, open_stack

CI_TOKEN = "ci-token-0000000000000000000000000000000"


@dataclass
class Both:
    stack: Stack
    gateway: Gateway


@pytest.fixture
async def both(database_url: str, redis_url: str) -> AsyncIterator[Both]:
    async with (
        open_stack(database_url, redis_url) as stack,
        open_gateway(
            database_url, redis_url, prefix=stack.prefix, tokens=f"ci={CI_TOKEN}:operator"
        ) as gateway,
    ):
        yield Both(stack, gateway)


WORKFLOW = {
    "id": "with-caller",
    "nodes": [
        {"id": "first", "type": "TASK", "queue": "callers", "spec": {"n": 1}},
        {"id": "pause", "type": "WAIT", "spec": {"duration_seconds": 0}},
        {"id": "second", "type": "TASK", "queue": "callers", "spec": {"n": 2}},
    ],
    "edges": [{"from": "first", "to": "pause"}, {"from": "pause", "to": "second"}],
}


async def test_a_handler_sees_who_started_the_run_and_their_metadata(both: Both) -> None:
    stack, gw = both.stack, both.gateway
    seen: dict[str, Caller | None] = {}

    async def handler(ctx: TaskContext, input: dict[str, Any]) -> dict[str, Any]:
        seen[ctx.node_id] = ctx.caller
        return {"n": input["n"]}

    stack.worker({"callers": handler})
    await stack.deploy(WORKFLOW)
    metadata = {"ticket": "OPS-7", "nested": {"ids": [1, 2]}}
    started = await gw.call(
        "POST",
        "/v1/runs",
        role=None,
        headers={"Authorization": f"Bearer {CI_TOKEN}"},
        json={"workflow_id": "with-caller", "context": metadata},
    )
    assert started.status == 201, started.body
    run_id = started.body["run_id"]
    assert (await stack.wait_run(run_id)).status.value == "SUCCEEDED"

    assert set(seen) == {"first", "second"}
    for caller in seen.values():
        assert caller is not None
        assert (caller.name, caller.role, dict(caller.metadata)) == ("ci", "operator", metadata)

    # the copy is on the TASK rows only: the wait carries none
    async with repo.transaction(stack.pool) as conn:
        copies = {
            r["node_id"]: r["context"]
            for r in await conn.fetch(
                "SELECT node_id, context FROM task_instances WHERE run_id = $1", run_id
            )
        }
    document = {"caller": {"name": "ci", "role": "operator"}, "metadata": metadata}
    assert copies == {"first": document, "pause": None, "second": document}


async def test_a_run_with_no_calling_context_gives_handlers_none(stack: Stack) -> None:
    seen: list[Caller | None] = []

    async def handler(ctx: TaskContext, input: dict[str, Any]) -> dict[str, Any]:
        seen.append(ctx.caller)
        return {}

    stack.worker({"callers": handler})
    await stack.deploy(WORKFLOW)
    started = await stack.engine.start("with-caller")  # no token behind it
    assert (await stack.wait_run(started.run_id)).status.value == "SUCCEEDED"
    assert seen == [None, None]
    async with repo.transaction(stack.pool) as conn:
        stored = await conn.fetchval(
            "SELECT count(*) FROM task_instances WHERE run_id = $1 AND context IS NOT NULL",
            started.run_id,
        )
    assert stored == 0
