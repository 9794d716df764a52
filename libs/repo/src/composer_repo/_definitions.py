"""Workflow definitions: versioned, deployed one version at a time, soft-deleted."""

from __future__ import annotations

from typing import Any

from composer_core.templates import Json
from composer_repo._db import Connection, translated
from composer_repo._errors import Invalid, NotFound
from composer_repo._records import Definition, DefinitionVersion, WorkflowSummary
from composer_repo._sql import q


@translated
async def create_definition(
    conn: Connection,
    workflow_id: str,
    *,
    name: str,
    spec: Json,
    webhook_url: str | None = None,
    created_by: str | None = None,
    deploy: bool = False,
) -> Definition:
    """Store the next version of a workflow (1 for a new one) and optionally deploy it.

    Versions are never reused, also after a delete: runs pinned to an old
    version keep loading it. Raises a retryable Conflict when a concurrent
    create took the same version. Run it in a transaction when ``deploy`` is
    set, so the new version never exists undeployed to others.
    """
    row = await conn.fetchrow(
        q("create_definition"), workflow_id, name, spec, webhook_url, created_by
    )
    assert row is not None  # INSERT … SELECT of an aggregate always yields one row
    definition = _definition(row)
    if deploy:
        return await deploy_definition(conn, workflow_id, definition.version)
    return definition


@translated
async def get_definition(
    conn: Connection, workflow_id: str, version: int | None = None, *, include_deleted: bool = False
) -> Definition:
    """One version of a workflow; ``version=None`` means the deployed one.

    The engine loads a run's pinned version with ``include_deleted=True``: a
    deleted definition no longer starts runs, but its running ones finish.
    """
    if version is None:
        row = await conn.fetchrow(q("get_deployed_definition"), workflow_id)
        if row is None:
            raise NotFound(
                f"workflow {workflow_id!r} has no deployed version: deploy one, or name the version"
            )
        return _definition(row)
    row = await conn.fetchrow(q("get_definition"), workflow_id, version)
    if row is None or (row["deleted_at"] is not None and not include_deleted):
        raise NotFound(f"workflow {workflow_id!r} has no version {version}")
    return _definition(row)


@translated
async def deployed_version(conn: Connection, workflow_id: str) -> int:
    """The number of the version new runs of a workflow use: what a start reads, its
    built DAG cached by (workflow, version), so that a batch of starts does not fetch
    and decode the spec it already holds."""
    version = await conn.fetchval(q("get_deployed_version"), workflow_id)
    if version is None:
        raise NotFound(
            f"workflow {workflow_id!r} has no deployed version: deploy one, or name the version"
        )
    return int(version)


@translated
async def latest_definition(conn: Connection, workflow_id: str) -> Definition | None:
    """The newest version of a workflow that is not deleted (None: no such workflow,
    or it is deleted): what an apply compares a definition with.

    Takes a transaction-level lock on the workflow's versions first (held until the
    caller's commit), so concurrent applies of one workflow take turns: a check
    followed by a create would otherwise let two identical applies both store."""
    await conn.execute(q("lock_definition_versions"), workflow_id)
    row = await conn.fetchrow(q("get_latest_definition"), workflow_id)
    return None if row is None else _definition(row)


@translated
async def list_definition_versions(conn: Connection, workflow_id: str) -> list[DefinitionVersion]:
    """The versions of a workflow that is not deleted, newest first (no specs)."""
    rows = await conn.fetch(q("list_definition_versions"), workflow_id)
    if not rows:
        raise NotFound(f"workflow {workflow_id!r} does not exist")
    return [
        DefinitionVersion(
            workflow_id=r["id"],
            version=r["version"],
            name=r["name"],
            webhook_url=r["webhook_url"],
            created_by=r["created_by"],
            deployed=r["deployed"],
            deployed_at=r["deployed_at"],
            created_at=r["created_at"],
        )
        for r in rows
    ]


@translated
async def list_definitions(conn: Connection) -> list[WorkflowSummary]:
    """Every workflow that is not deleted, by id."""
    rows = await conn.fetch(q("list_definitions"))
    return [
        WorkflowSummary(
            workflow_id=r["id"],
            name=r["name"],
            latest_version=r["latest_version"],
            deployed_version=r["deployed_version"],
            created_at=r["created_at"],
            updated_at=r["updated_at"],
        )
        for r in rows
    ]


@translated
async def deploy_definition(conn: Connection, workflow_id: str, version: int) -> Definition:
    """Make ``version`` the one new runs use (and no other version). Idempotent.

    Raises NotFound for a missing version, Invalid for a deleted one, and a
    retryable Conflict when another deploy of the workflow ran at the same time.
    """
    rows = await conn.fetch(q("deploy_definition"), workflow_id, version)
    if not any(r["deployed"] and r["version"] == version for r in rows):
        row = await conn.fetchrow(q("get_definition"), workflow_id, version)
        if row is None:
            raise NotFound(f"workflow {workflow_id!r} has no version {version} to deploy")
        raise Invalid(
            f"workflow {workflow_id!r} version {version} is deleted and cannot be deployed; "
            "create a new version instead"
        )
    row = await conn.fetchrow(q("get_definition"), workflow_id, version)
    assert row is not None
    return _definition(row)


@translated
async def delete_definition(conn: Connection, workflow_id: str) -> list[int]:
    """Soft-delete every version of a workflow; returns the versions deleted.

    New runs are refused from now on; runs already started finish on their
    version. Creating the workflow again later continues the version numbers.
    """
    rows = await conn.fetch(q("delete_definition"), workflow_id)
    if not rows:
        raise NotFound(f"workflow {workflow_id!r} does not exist (or is already deleted)")
    return sorted(r["version"] for r in rows)


def _definition(row: Any) -> Definition:
    return Definition(
        workflow_id=row["id"],
        version=row["version"],
        name=row["name"],
        spec=row["spec"],
        webhook_url=row["webhook_url"],
        created_by=row["created_by"],
        deployed=row["deployed"],
        deployed_at=row["deployed_at"],
        deleted_at=row["deleted_at"],
        created_at=row["created_at"],
    )
