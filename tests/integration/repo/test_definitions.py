"""Definitions: versions, one deployed version, soft delete."""

from __future__ import annotations

import pytest

import composer_repo as repo
from composer_core.model import RunStatus

from .helpers import uuid7


async def test_versions_count_up_and_one_is_deployed(conn: repo.Connection) -> None:
    v1 = await repo.create_definition(
        conn, "orders", name="Orders", spec={"v": 1}, created_by="ann", deploy=True
    )
    v2 = await repo.create_definition(
        conn, "orders", name="Orders v2", spec={"v": 2}, webhook_url="https://h"
    )

    assert (v1.version, v1.deployed, v2.version, v2.deployed) == (1, True, 2, False)
    assert (await repo.get_definition(conn, "orders")).version == 1

    deployed = await repo.deploy_definition(conn, "orders", 2)
    assert deployed.deployed and deployed.spec == {"v": 2} and deployed.webhook_url == "https://h"
    assert (await repo.get_definition(conn, "orders")).version == 2
    assert await repo.deployed_version(conn, "orders") == 2  # what a start reads
    assert (await repo.get_definition(conn, "orders", 1)).deployed is False
    assert (await repo.deploy_definition(conn, "orders", 2)).version == 2  # idempotent

    versions = await repo.list_definition_versions(conn, "orders")
    assert [(v.version, v.deployed) for v in versions] == [(2, True), (1, False)]
    (summary,) = [w for w in await repo.list_definitions(conn) if w.workflow_id == "orders"]
    assert (summary.name, summary.latest_version, summary.deployed_version) == ("Orders v2", 2, 2)


async def test_missing_things_are_not_found(conn: repo.Connection) -> None:
    await repo.create_definition(conn, "draft", name="Draft", spec={})
    with pytest.raises(repo.NotFound, match="no deployed version"):
        await repo.get_definition(conn, "draft")
    with pytest.raises(repo.NotFound, match="no deployed version"):
        await repo.deployed_version(conn, "draft")
    with pytest.raises(repo.NotFound):
        await repo.get_definition(conn, "draft", 7)
    with pytest.raises(repo.NotFound):
        await repo.deploy_definition(conn, "draft", 7)
    with pytest.raises(repo.NotFound):
        await repo.list_definition_versions(conn, "nope")
    with pytest.raises(repo.NotFound):
        await repo.delete_definition(conn, "nope")


async def test_soft_delete_stops_new_runs_but_keeps_versions_loadable(
    conn: repo.Connection,
) -> None:
    await repo.create_definition(conn, "temp", name="Temp", spec={"v": 1}, deploy=True)
    running = uuid7()
    await repo.insert_run(conn, running, workflow_id="temp", version=1)

    assert await repo.delete_definition(conn, "temp") == [1]

    with pytest.raises(repo.NotFound):
        await repo.get_definition(conn, "temp")
    with pytest.raises(repo.NotFound):
        await repo.deployed_version(conn, "temp")
    assert all(w.workflow_id != "temp" for w in await repo.list_definitions(conn))
    pinned = await repo.get_definition(conn, "temp", 1, include_deleted=True)
    assert pinned.spec == {"v": 1} and pinned.deleted_at is not None
    assert (await repo.get_run(conn, running)).status is RunStatus.RUNNING
    with pytest.raises(repo.Invalid, match="deleted"):
        await repo.deploy_definition(conn, "temp", 1)
    # Created again, it continues the numbering: old runs keep their version.
    again = await repo.create_definition(conn, "temp", name="Temp", spec={"v": 2}, deploy=True)
    assert again.version == 2
