"""Child runs: what a SUB_WORKFLOW node's attempt starts (docs/architecture.md §4.15).

The parent's machine decides the child's id (``StartChild``); here, in the
parent's transaction, the attempt's task becomes RUNNING, the child run is
written PENDING with its parent recorded, and an event between runs
(``run_started``, engine/_run_events.py) is written to start it under its own
lock right after the commit. The child exists with the parent's commit or not at
all, and its start is applied once whoever delivers it: so each attempt has
exactly one child, whatever is retried or killed.

What would make the child impossible — no such workflow or version, a deleted
one, an input its ``input_schema`` refuses, a depth past the limit — is not a
child: the node's attempt fails for good with an error that says so, through an
event the parent sends itself (the decision is already made; the event applies
the failure under the parent's lock after the commit, like a child's end).

``start_child`` serves any node that starts a child for one of its task's
attempts, a SUB_WORKFLOW node's or a MAP item's (a MAP whose inner node is a
SUB_WORKFLOW): the attempt is named by its ``ParentRef``, whose task is the item's
own task, so the child's end finds its item.
"""

from __future__ import annotations

import datetime as dt
from typing import Protocol

import composer_repo as repo
from composer_core.kinds import ChildKind, ChildRun, kind_of
from composer_core.model import WorkflowDAG
from composer_core.templates import Json
from composer_engine import _run_events
from composer_engine._definitions import DefinitionCache
from composer_engine._tx import Tx
from composer_engine.errors import BadRequest
from composer_engine.sealing import RunSeal, Sealer

#: How deep child runs nest by default (COMPOSER_MAX_CHILD_DEPTH): a run a client
#: started is at depth 0, its children at 1, …
DEFAULT_MAX_CHILD_DEPTH = 10

#: The error code of a node whose child could not even be started.
CHILD_NOT_STARTED = "child_not_started"
#: The error code of a node whose child would be deeper than the limit.
CHILD_TOO_DEEP = "child_too_deep"


class ChildHost(Protocol):
    """What starting a child needs of the engine (the event shell offers it)."""

    definitions: DefinitionCache
    sealer: Sealer
    max_child_depth: int


async def start_child(
    tx: Tx,
    host: ChildHost,
    parent: repo.ParentRef,
    child_run_id: str,
    child: ChildRun,
    *,
    parent_seal: RunSeal,
    not_before: dt.datetime | None = None,
) -> str | None:
    """Write the child run of attempt ``parent`` (PENDING) and the event that starts
    it (at once, or from ``not_before`` on). Returns the child's id, or None when it
    could not be started: then the event written fails the attempt for good, with
    the reason (``parent_seal`` seals it, as the parent's other documents)."""
    conn = tx.conn
    depth = await repo.run_depth(conn, parent.run_id) + 1
    if depth > host.max_child_depth:
        _refuse(
            tx,
            parent,
            parent_seal,
            f"SUB_WORKFLOW {parent.node_id}: a child of run {parent.run_id} would be at depth "
            f"{depth} of nested runs, over the limit of {host.max_child_depth} "
            "(COMPOSER_MAX_CHILD_DEPTH): does the workflow start itself without end?",
            CHILD_TOO_DEEP,
        )
        return None
    try:
        dag = await _child_dag(tx, host, parent, child)
    except (repo.NotFound, BadRequest) as exc:
        _refuse(tx, parent, parent_seal, f"SUB_WORKFLOW {parent.node_id}: {exc}", CHILD_NOT_STARTED)
        return None
    if dag.input_schema is not None:
        problems = dag.input_schema.problems(child.input)
        if problems:
            listed = "; ".join(str(p) for p in problems[:3])
            _refuse(
                tx,
                parent,
                parent_seal,
                f"SUB_WORKFLOW {parent.node_id}: its input does not match the input_schema of "
                f"{child.workflow_id!r} version {dag.version}: {listed}",
                CHILD_NOT_STARTED,
            )
            return None
    data_key = host.sealer.new_data_key(child_run_id)
    seal = host.sealer.for_run(child_run_id, data_key)
    try:
        await repo.insert_child_run(
            conn,
            child_run_id,
            workflow_id=child.workflow_id,
            version=dag.version,
            input=seal.doc(child.input),
            data_key=data_key,
            depth=depth,
            parent=parent,
            detached=child.detached,
        )
    except repo.Invalid as exc:  # deleted meanwhile
        _refuse(tx, parent, parent_seal, f"SUB_WORKFLOW {parent.node_id}: {exc}", CHILD_NOT_STARTED)
        return None
    tx.writes.run_events.append(
        _run_events.start_run(child_run_id, parent.run_id, not_before=not_before)
    )
    return child_run_id


async def _child_dag(
    tx: Tx, host: ChildHost, parent: repo.ParentRef, child: ChildRun
) -> WorkflowDAG:
    """The version the child runs: the one the spec pins; else the one the attempt's
    first child ran (a retry keeps it); else the one deployed now."""
    conn, workflow_id = tx.conn, child.workflow_id
    version = child.version
    if version is None and parent.attempt > 0:
        version = await repo.first_child_version(conn, parent.run_id, parent.task_id)
    if version is not None:
        try:
            return await host.definitions.get(conn, workflow_id, version)
        except repo.NotFound:
            raise repo.NotFound(
                f"workflow {workflow_id!r} has no version {version}: publish it, or change "
                "spec.version"
            ) from None
    try:
        return await host.definitions.deployed(conn, workflow_id)
    except repo.NotFound:
        raise repo.NotFound(
            f"workflow {workflow_id!r} does not exist or has no deployed version: publish and "
            "deploy it, or change spec.workflow"
        ) from None


def _refuse(tx: Tx, parent: repo.ParentRef, seal: RunSeal, error: str, code: str) -> None:
    tx.writes.run_events.append(_run_events.attempt_failed(parent, error, code, seal))


def item_child(dag: WorkflowDAG, node_id: str, rendered: Json) -> ChildRun:
    """The child a MAP item's attempt starts: from the item's stored input, the inner
    SUB_WORKFLOW's spec rendered with ``item`` and ``index`` when the MAP began (a
    retry of the item starts the same child again, as a worker's retry reuses its
    input)."""
    inner = dag.worker_node(node_id)
    assert inner is not None
    kind = kind_of(inner.type)
    assert isinstance(kind, ChildKind)  # only a MAP over a SUB_WORKFLOW starts children
    return kind.child_of(inner, rendered)


async def cancel_item_children(
    tx: Tx, run_id: str, task_ids: list[str], reason: str, seal: RunSeal
) -> None:
    """The children of MAP items just cancelled (fail_fast, or the run's cancel) are
    cancelled too, by their on_parent_cancel: an abandoned one runs on."""
    for child in await repo.active_children_of_tasks(tx.conn, run_id, task_ids):
        tx.writes.run_events.append(_run_events.cancel_item_child(child, run_id, reason, seal))
