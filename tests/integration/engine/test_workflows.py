"""The definitions use case on a real database: validation first, versions that
count up under concurrent creates, retries on transient failures, errors as the
engine's own."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import composer_repo as repo
from composer_core.errors import DefinitionInvalid
from composer_engine import BadRequest, NotFound, Unavailable, Workflows, validate_definition
from composer_engine._transaction import in_transaction
from composer_engine._tx import Tx


def definition(workflow_id: str = "wf", **extra: Any) -> dict[str, Any]:
    return {
        "id": workflow_id,
        "nodes": [{"id": "a", "type": "TASK", "queue": "q", "spec": {}}],
        **extra,
    }


def test_validation_covers_the_graph_not_only_the_shape() -> None:
    dangling = definition("dangling", edges=[{"from": "a", "to": "missing"}])
    with pytest.raises(DefinitionInvalid) as caught:
        validate_definition(dangling)  # a well-shaped document whose graph does not build
    assert any("missing" in str(p) for p in caught.value.problems)


def test_the_stored_document_is_the_spec_as_written() -> None:
    valid = validate_definition("id: yaml\nnodes:\n  - {id: a, type: TASK, queue: q, spec: {}}\n")
    assert valid.spec.id == "yaml"
    assert valid.document["nodes"][0]["queue"] == "q"
    assert "webhook_url" not in valid.document  # only what the author set


async def test_concurrent_creates_get_consecutive_versions(pool: repo.Pool) -> None:
    workflows = Workflows(pool)
    valid = validate_definition(definition("raced"))
    created = await asyncio.gather(*(workflows.create(valid) for _ in range(8)))
    assert sorted(d.version for d in created) == list(range(1, 9))


async def test_concurrent_identical_applies_store_one_version(pool: repo.Pool) -> None:
    workflows = Workflows(pool)
    valid = validate_definition(definition("applied"))
    applied = await asyncio.gather(*(workflows.apply(valid) for _ in range(8)))
    assert {a.definition.version for a in applied} == {1}
    assert sorted(a.unchanged for a in applied) == [False] + [True] * 7
    changed = await workflows.apply(validate_definition(definition("applied", name="Applied")))
    assert (changed.definition.version, changed.unchanged) == (2, False)


async def test_create_deploy_and_delete(pool: repo.Pool) -> None:
    workflows = Workflows(pool)
    first = await workflows.create(validate_definition(definition("life")), deploy=True)
    second = await workflows.create(validate_definition(definition("life", name="Life")))
    assert (first.version, first.deployed, second.version, second.deployed) == (1, True, 2, False)

    deployed = await workflows.deploy("life", 2)
    assert deployed.deployed and deployed.name == "Life"
    assert await workflows.delete("life") == [1, 2]

    with pytest.raises(BadRequest, match="deleted"):
        await workflows.deploy("life", 2)
    with pytest.raises(NotFound):
        await workflows.delete("life")
    with pytest.raises(NotFound):
        await workflows.deploy("never", 1)


async def test_a_transient_failure_is_tried_again_in_a_fresh_transaction(
    pool: repo.Pool,
) -> None:
    calls: list[bool] = []

    async def flaky(tx: Tx) -> int:
        calls.append(tx.conn.is_in_transaction())
        if len(calls) < 3:
            raise repo.Transient("connection lost (injected)")
        value: int = await tx.conn.fetchval("SELECT 42")
        return value

    assert await in_transaction(pool, flaky, first_delay=0.001) == 42
    assert calls == [True, True, True]


async def test_a_database_that_stays_down_is_unavailable_not_an_endless_loop(
    pool: repo.Pool,
) -> None:
    calls = 0

    async def down(tx: Tx) -> None:
        nonlocal calls
        calls += 1
        raise repo.Transient("connection refused (injected)")

    with pytest.raises(Unavailable, match="unavailable after 3 attempts"):
        await in_transaction(pool, down, attempts=3, first_delay=0.001)
    assert calls == 3


async def test_a_conflict_that_cannot_resolve_itself_is_not_retried(pool: repo.Pool) -> None:
    calls = 0

    async def taken(tx: Tx) -> None:
        nonlocal calls
        calls += 1
        raise repo.RunAlreadyExists("r1")

    with pytest.raises(Exception, match="already exists") as caught:
        await in_transaction(pool, taken, first_delay=0.001)
    assert calls == 1 and type(caught.value).__name__ == "Conflict"
