"""Child runs of SUB_WORKFLOW nodes (V020; docs/architecture.md §4.15).

A node's attempt writes its child run, PENDING and with its parent recorded, in
the parent's transaction, beside the task that waits for it; an event between
runs (``_run_events``) starts it under its own lock. So every attempt has
exactly one child, whatever is killed between the two.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from composer_core.model import RunStatus
from composer_core.templates import Json
from composer_repo._db import Connection, translated
from composer_repo._errors import Invalid, NotFound, RunAlreadyExists
from composer_repo._records import ParentRef
from composer_repo._sql import q


@dataclass(frozen=True, slots=True)
class ChildSummary:
    """A run one of a run's nodes started, as the parent's page lists it."""

    run_id: str
    workflow_id: str
    version: int
    status: RunStatus
    #: The parent's node and its attempt that started it.
    node_id: str
    task_id: str
    attempt: int
    #: Started with on_parent_cancel: abandon (the parent's cancel leaves it).
    detached: bool
    created_at: dt.datetime
    completed_at: dt.datetime | None


@translated
async def run_depth(conn: Connection, run_id: str) -> int:
    """How deep ``run_id`` is among child runs: 0 for a run a client started."""
    depth = await conn.fetchval(q("run_depth"), run_id)
    if depth is None:
        raise NotFound(f"workflow run {run_id} does not exist")
    return int(depth)


@translated
async def first_child_version(conn: Connection, parent_run_id: str, task_id: str) -> int | None:
    """The version the task's first child runs (None: it has none yet)."""
    value = await conn.fetchval(q("first_child_version"), parent_run_id, task_id)
    return None if value is None else int(value)


@translated
async def insert_child_run(
    conn: Connection,
    run_id: str,
    *,
    workflow_id: str,
    version: int,
    input: Json,
    data_key: str | None,
    depth: int,
    parent: ParentRef,
    detached: bool,
) -> None:
    """Write a child run, PENDING, with its parent. Raises NotFound (no such version)
    and Invalid (a deleted workflow starts no run), as a client's start does."""
    definition = await conn.fetchrow(q("definition_deleted_at"), workflow_id, version)
    if definition is None:
        raise NotFound(f"workflow {workflow_id!r} has no version {version}")
    if definition["deleted_at"] is not None:
        raise Invalid(f"workflow {workflow_id!r} is deleted: it starts no new runs")
    done = await conn.fetchval(
        q("insert_child_run"),
        run_id,
        workflow_id,
        version,
        input,
        data_key,
        depth,
        parent.run_id,
        parent.node_id,
        parent.task_id,
        parent.attempt,
        detached,
    )
    if done is None:
        raise RunAlreadyExists(f"child run {run_id} was already written")


@translated
async def start_child_task(conn: Connection, parent: ParentRef) -> tuple[bool, Json]:
    """The node attempt ``parent`` names is RUNNING, waiting for its child: (True, the
    task's stored input), or (False, None) when the attempt is no longer active."""
    row = await conn.fetchrow(
        q("start_child_task"), parent.run_id, parent.task_id, parent.node_id, parent.attempt
    )
    return (False, None) if row is None else (True, row["input"])


@translated
async def run_children(conn: Connection, run_id: str, *, limit: int = 1000) -> list[ChildSummary]:
    """The runs ``run_id``'s nodes started, oldest first (at most ``limit``)."""
    return [
        ChildSummary(
            r["id"],
            r["workflow_id"],
            r["version"],
            RunStatus(r["status"]),
            r["parent_node_id"],
            r["parent_task_id"],
            r["parent_attempt"],
            r["parent_detached"],
            r["created_at"],
            r["completed_at"],
        )
        for r in await conn.fetch(q("run_children"), run_id, limit)
    ]
