"""Task rows: the writes the engine persists for a decision, and the worker's lease.

Every update is fenced: it names the task, its node and attempt and the
states it may be in, and reports "no row matched" as None or False rather
than raising. Under the run lock such a miss means the snapshot was stale (or
a worker's report or lease is for an old attempt): the caller decides.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from composer_core.model import NodeType, TaskState
from composer_core.statemachine import NodeState
from composer_core.templates import Json
from composer_repo._db import Connection, json_texts, translated
from composer_repo._errors import Invalid
from composer_repo._records import (
    FinishedTask,
    Lease,
    LeaseHolder,
    NewTask,
    Requeued,
    TaskRef,
    TaskRouting,
)
from composer_repo._sql import q


@translated
async def insert_task(
    conn: Connection,
    run_id: str,
    task_id: str,
    node_id: str,
    *,
    node_type: NodeType,
    state: TaskState,
    input: Json = None,
    output: Json = None,
    error: str | None = None,
    branches: Sequence[str] | None = None,
    wake_at: dt.datetime | None = None,
    awaited_signal: str | None = None,
    queue: str | None = None,
    max_attempts: int | None = None,
    context: Json = None,
) -> bool:
    """Insert a node's one task; ``queue`` and ``max_attempts`` (its node's attempt
    budget, handed out with each lease) for a task that goes to a worker, and
    ``context``, the run's calling context its lease hands to the handler.

    Returns False, without raising, when the node already has a task in this
    run (the unique (run_id, node_id) index): two decisions raced, or the
    snapshot was stale. Raises NotFound when the run does not exist.
    """
    inserted = await conn.fetchval(
        q("insert_task"),
        task_id,
        run_id,
        node_id,
        node_type.value,
        state.value,
        input,
        output,
        error,
        None if branches is None else list(branches),
        wake_at,
        awaited_signal,
        queue,
        max_attempts,
        context,
    )
    return inserted is not None


@translated
async def insert_tasks(conn: Connection, tasks: Sequence[NewTask]) -> set[str]:
    """``insert_task`` for many tasks in one statement; the ids inserted (one left out
    was not: its node already had a task)."""
    if not tasks:
        return set()
    rows = await conn.fetch(q("insert_tasks"), *insert_tasks_args(tasks))
    return {r["id"] for r in rows}


def insert_tasks_args(tasks: Sequence[NewTask]) -> tuple[Any, ...]:
    """The parameters of ``insert_tasks`` (and of ``together`` statements holding it)."""
    return (
        [t.task_id for t in tasks],
        [t.run_id for t in tasks],
        [t.node_id for t in tasks],
        [t.node_type.value for t in tasks],
        [t.state.value for t in tasks],
        json_texts(t.input for t in tasks),
        json_texts(t.output for t in tasks),
        [t.error for t in tasks],
        [t.wake_at for t in tasks],
        [t.awaited_signal for t in tasks],
        [t.queue for t in tasks],
        [t.max_attempts for t in tasks],
        json_texts(t.context for t in tasks),
        [t.error_code for t in tasks],
        [t.item for t in tasks],
        [t.map_progress for t in tasks],
        [t.waits for t in tasks],
        [None if t.lease is None else t.lease.owner for t in tasks],
        [None if t.lease is None else t.lease.token for t in tasks],
        [None if t.lease is None else t.lease.expires_at for t in tasks],
    )


@translated
async def start_items(conn: Connection, items: Sequence[tuple[str, str]]) -> set[str]:
    """MAP items (run id, task id) that waited for a place go: due for dispatch from now.
    The ids started (one left out was no longer waiting: a stale snapshot)."""
    if not items:
        return set()
    rows = await conn.fetch(q("start_items"), [r for r, _ in items], [t for _, t in items])
    return {r["id"] for r in rows}


@translated
async def set_map_progress(conn: Connection, progress: Sequence[tuple[str, str, Json]]) -> int:
    """Store the progress of MAP nodes (run id, the MAP's task id, progress): how many
    rows were written."""
    if not progress:
        return 0
    rows = await conn.fetch(
        q("set_map_progress"),
        [r for r, _, _ in progress],
        [t for _, t, _ in progress],
        [p for _, _, p in progress],
    )
    return len(rows)


@translated
async def cancel_items(
    conn: Connection, run_id: str, node_id: str, *, reason: str
) -> list[tuple[str, str | None]]:
    """Cancel every unfinished item of MAP ``node_id``: their (task id, queue), whose
    unpublished dispatches the caller deletes."""
    rows = await conn.fetch(q("cancel_items"), run_id, node_id, reason)
    ids = [r["id"] for r in rows]
    if ids:
        await conn.execute(q("delete_task_dispatches"), run_id, ids)
    return [(r["id"], r["queue"]) for r in rows]


@translated
async def load_items(
    conn: Connection, run_id: str, node_id: str, indexes: Collection[int]
) -> dict[int, NodeState]:
    """The states of items ``indexes`` of MAP ``node_id``."""
    rows = await conn.fetch(q("load_items"), run_id, node_id, list(indexes))
    return {
        r["item"]: NodeState(r["id"], TaskState(r["state"]), r["attempt"], error=r["error"])
        for r in rows
    }


@translated
async def load_item_outputs(conn: Connection, run_id: str, node_id: str) -> list[Json]:
    """Every item's output of MAP ``node_id``, in item order (None: it did not complete)."""
    rows = await conn.fetch(q("load_item_outputs"), run_id, node_id)
    return [r["output"] for r in rows]


@translated
async def complete_tasks(
    conn: Connection, completions: Sequence[tuple[TaskRef, Json]]
) -> dict[str, FinishedTask]:
    """``complete_task`` for many attempts in one statement: by task id, those that
    were active (one left out was stale)."""
    if not completions:
        return {}
    rows = await conn.fetch(q("complete_tasks"), *complete_tasks_args(completions))
    return completed(rows)


def complete_tasks_args(completions: Sequence[tuple[TaskRef, Json]]) -> tuple[Any, ...]:
    """The parameters of ``complete_tasks`` (and of ``together`` statements holding it)."""
    # in one order of attempts, as acquire_leases (no two batches wait for each other)
    completions = sorted(completions, key=lambda c: (c[0].run_id, c[0].task_id, c[0].attempt))
    return (
        [ref.run_id for ref, _ in completions],
        [ref.task_id for ref, _ in completions],
        [ref.node_id for ref, _ in completions],
        [ref.attempt for ref, _ in completions],
        json_texts(output for _, output in completions),
    )


def completed(rows: Sequence[Any]) -> dict[str, FinishedTask]:
    """``complete_tasks``' answer from its rows: by task id, the attempts completed."""
    return {r["id"]: _finished(r) for r in rows}


@translated
async def complete_task(conn: Connection, ref: TaskRef, output: Json) -> FinishedTask | None:
    """Mark the attempt COMPLETED with its output and release its lease.

    None when the attempt is stale or the task is no longer with a worker.
    """
    done = await complete_tasks(conn, [(ref, output)])  # the engine's one statement
    return done.get(ref.task_id)


@translated
async def fail_task(
    conn: Connection, ref: TaskRef, error: str, *, error_code: str | None = None
) -> FinishedTask | None:
    """Mark the attempt FAILED for good and release its lease. None when stale."""
    row = await conn.fetchrow(
        q("fail_task"), ref.run_id, ref.task_id, ref.node_id, ref.attempt, error, error_code
    )
    return None if row is None else _finished(row)


@translated
async def requeue_task(
    conn: Connection,
    ref: TaskRef,
    error: str,
    *,
    error_code: str | None = None,
    not_before: dt.datetime,
) -> Requeued | None:
    """Put the failed attempt ``ref`` back to PENDING with attempt + 1, due at ``not_before``.

    Returns the next attempt's number, queue and the input stored at creation
    (which the retry sends again), or None when stale.
    """
    row = await conn.fetchrow(
        q("requeue_task"),
        ref.run_id,
        ref.task_id,
        ref.node_id,
        ref.attempt,
        error,
        error_code,
        not_before,
    )
    if row is None:
        return None
    return Requeued(
        attempt=row["attempt"],
        node_type=NodeType(row["node_type"]),
        queue=row["queue"],
        input=row["input"],
        limit_key=row["limit_key"],
    )


@dataclass(frozen=True, slots=True)
class ResolvedWait:
    """A WAITING task that completes (timer fired, signal arrived) or fails (timed out)."""

    run_id: str
    task_id: str
    node_id: str
    state: TaskState
    output: Json = None
    error: str | None = None


@translated
async def resolve_waits(conn: Connection, waits: Sequence[ResolvedWait]) -> set[str]:
    """Resolve many waits in one statement (a group commit of timers fires tens): the
    ids of those that were still WAITING (one left out: the snapshot was stale)."""
    if not waits:
        return set()
    for w in waits:
        if w.state not in (TaskState.COMPLETED, TaskState.FAILED):
            raise Invalid(f"a wait resolves to COMPLETED or FAILED, not {w.state}")
    # in one order of rows, as complete_tasks (no two batches wait for each other)
    waits = sorted(waits, key=lambda w: (w.run_id, w.task_id))
    rows = await conn.fetch(
        q("resolve_waits"),
        [w.run_id for w in waits],
        [w.task_id for w in waits],
        [w.node_id for w in waits],
        [w.state.value for w in waits],
        json_texts(w.output for w in waits),
        [w.error for w in waits],
    )
    return {r["id"] for r in rows}


@translated
async def resolve_wait(
    conn: Connection,
    run_id: str,
    task_id: str,
    node_id: str,
    *,
    state: TaskState,
    output: Json = None,
    error: str | None = None,
) -> bool:
    """A WAITING task completes (timer fired, signal arrived) or fails (timed out).

    False when the task is no longer waiting.
    """
    resolved = ResolvedWait(run_id, task_id, node_id, state, output, error)
    return task_id in await resolve_waits(conn, [resolved])  # the engine's one statement


@translated
async def cancel_tasks(
    conn: Connection, run_id: str, task_ids: Sequence[str], *, reason: str
) -> list[str]:
    """Fail those of the run's ``task_ids`` that are still active, with ``reason``.

    Their unpublished dispatches are deleted with them; a published one meets
    a FAILED task and is refused a lease. Returns the ids of the tasks failed.
    """
    if not task_ids:
        return []
    rows = await conn.fetch(q("cancel_tasks"), run_id, list(task_ids), reason)
    cancelled = [r["id"] for r in rows]
    if cancelled:
        await conn.execute(q("delete_task_dispatches"), run_id, cancelled)
    return cancelled


@dataclass(frozen=True, slots=True)
class LeaseRequest:
    """One worker's request for (or renewal of) the lease on a task attempt.

    ``token`` is the lease's secret: the fresh one the engine issues with a grant
    (``Engine.acquire_leases`` sets it), or the one a renewal presents. ``claim`` is the worker's own random
    name for one lease request, so the request sent again after its answer was
    lost gets the same lease back. ``queues`` are those the worker's credentials
    cover (None: all); an attempt on another queue is neither granted nor renewed.

    A grant's only: ``queue`` is the queue whose stream the entry was read from and
    ``node_types`` the node types the worker's handler runs (None for either: not
    checked, a worker older than them); an attempt of another queue or type is not
    granted (docs/architecture.md §6.1).
    """

    run_id: str
    task_id: str
    attempt: int
    owner: str
    ttl: float
    token: str = ""
    claim: str = ""
    queues: frozenset[str] | None = None
    queue: str | None = None
    node_types: frozenset[NodeType] | None = None


async def acquire_lease(
    conn: Connection,
    run_id: str,
    task_id: str,
    attempt: int,
    *,
    owner: str,
    ttl: float,
    token: str,
    claim: str = "",
    queues: frozenset[str] | None = None,
    queue: str | None = None,
    node_types: frozenset[NodeType] | None = None,
) -> Lease | None:
    """Grant the attempt for ``ttl`` seconds under ``token`` and return what runs it.

    Granted when the attempt is PENDING or QUEUED and due (not in a retry's backoff),
    leased by someone whose lease expired, or already granted to this very request
    (same owner and claim: it keeps its first token), and only on one of ``queues``
    (None: any), on ``queue`` and of one of ``node_types`` (None: any). None when the
    attempt is stale, not due, finished, held by a live lease, or on another queue or
    of another type (``task_routing`` tells which).
    """
    request = LeaseRequest(
        run_id, task_id, attempt, owner, ttl, token, claim, queues, queue, node_types
    )
    [lease] = await acquire_leases(conn, [request])
    return lease


async def renew_lease(
    conn: Connection,
    run_id: str,
    task_id: str,
    attempt: int,
    *,
    owner: str,
    ttl: float,
    token: str,
    queues: frozenset[str] | None = None,
) -> dt.datetime | None:
    """Extend the lease ``token`` names by ``ttl`` seconds from now; returns the new
    expiry.

    None when the lease is lost (another lease, another attempt, the task
    finished or was cancelled), the token is not the lease's or the task is not
    on one of ``queues``: the worker must stop the handler.
    """
    request = LeaseRequest(run_id, task_id, attempt, owner, ttl, token, queues=queues)
    [expires] = await renew_leases(conn, [request])
    return expires


@translated
async def acquire_leases(
    conn: Connection, requests: Sequence[LeaseRequest], *, max_input_bytes: int | None = None
) -> list[Lease | None]:
    """``acquire_lease`` for many requests in one statement: for each, its lease or
    None. An attempt may appear only once per call. With ``max_input_bytes`` an
    attempt whose input is larger (as JSON text) is not granted either: the leases a
    report's answer carries stay small (engine/_reports.py)."""
    _check_batch(requests)
    # in one order of attempts, as every batch that updates them, so that two never
    # wait for each other (a deadlock costs a second: deadlock_timeout)
    ordered = sorted(requests, key=lambda r: (r.run_id, r.task_id, r.attempt))
    rows = await conn.fetch(
        q("acquire_leases"),
        *_columns(ordered),
        [r.claim for r in ordered],
        [_queues(r) for r in ordered],
        [r.queue for r in ordered],
        [_node_types(r) for r in ordered],
        max_input_bytes,
    )
    granted = {(r["run_id"], r["id"], r["attempt"]): r for r in rows}
    leases: list[Lease | None] = []
    for req in requests:
        row = granted.get((req.run_id, req.task_id, req.attempt))
        leases.append(
            None
            if row is None
            else Lease(
                run_id=req.run_id,
                task_id=req.task_id,
                node_id=row["node_id"],
                node_type=NodeType(row["node_type"]),
                attempt=req.attempt,
                queue=row["queue"],
                input=row["input"],
                expires_at=row["lease_expires_at"],
                max_attempts=row["max_attempts"],
                token=row["lease_token"],
                workflow_id=row["workflow_id"],
                workflow_version=row["version"],
                context=row["context"],
                priority=row["priority"],
            )
        )
    return leases


@translated
async def renew_leases(
    conn: Connection, requests: Sequence[LeaseRequest]
) -> list[dt.datetime | None]:
    """``renew_lease`` for many requests in one statement: for each, the new expiry
    or None (the lease is lost). An attempt may appear only once per call."""
    _check_batch(requests)
    rows = await conn.fetch(q("renew_leases"), *_columns(requests), [_queues(r) for r in requests])
    renewed = {(r["run_id"], r["id"], r["attempt"]): r["lease_expires_at"] for r in rows}
    return [renewed.get((req.run_id, req.task_id, req.attempt)) for req in requests]


@translated
async def task_routing(
    conn: Connection, tasks: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], TaskRouting]:
    """Where each (run id, task id) that exists belongs, and whether its attempt is
    due: why a lease was refused."""
    rows = await conn.fetch(q("task_routing"), [r for r, _ in tasks], [t for _, t in tasks])
    return {
        (r["run_id"], r["id"]): TaskRouting(
            node_id=r["node_id"],
            node_type=NodeType(r["node_type"]),
            queue=r["queue"],
            attempt=r["attempt"],
            state=TaskState(r["state"]),
            due_at=r["due_at"],
        )
        for r in rows
    }


def _check_batch(requests: Sequence[LeaseRequest]) -> None:
    keys = {(r.run_id, r.task_id, r.attempt) for r in requests}
    if len(keys) != len(requests):
        raise Invalid("a batch of lease requests names an attempt twice: send it in another batch")
    for r in requests:
        if r.ttl <= 0:
            raise Invalid(f"a lease needs a positive ttl, not {r.ttl}")
        if not r.token:
            raise Invalid("a lease request needs a token")


def _columns(requests: Sequence[LeaseRequest]) -> tuple[list[Any], ...]:
    return (
        [r.run_id for r in requests],
        [r.task_id for r in requests],
        [r.attempt for r in requests],
        [r.owner for r in requests],
        [float(r.ttl) for r in requests],
        [r.token for r in requests],
    )


def _queues(request: LeaseRequest) -> str | None:
    """The queues as the statements take them: joined by '|' (no queue name holds
    one), None for all."""
    return None if request.queues is None else "|".join(sorted(request.queues))


def _node_types(request: LeaseRequest) -> str | None:
    """The node types as acquire_leases takes them: joined by '|', None for all."""
    return None if request.node_types is None else "|".join(sorted(request.node_types))


@translated
async def lease_holder(
    conn: Connection, run_id: str, task_id: str, attempt: int
) -> LeaseHolder | None:
    """The lease on a RUNNING attempt (expired or not); None when it is not RUNNING.

    The engine checks it before applying a worker's report: a worker whose
    lease expired and was taken by another, or who never held it, must not
    finish the attempt.
    """
    row = await conn.fetchrow(q("lease_holder"), run_id, task_id, attempt)
    return None if row is None else LeaseHolder(row["lease_token"], row["queue"])


def _finished(row: Any) -> FinishedTask:
    return FinishedTask(
        node_type=NodeType(row["node_type"]),
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        queue=row.get("queue"),
        limit_key=row.get("limit_key"),
    )


@translated
async def park_task(
    conn: Connection, ref: TaskRef, token: str, *, park_for: dt.timedelta, reason: str
) -> bool:
    """Take back the grant of attempt ``ref`` (lease ``token``) before its worker runs it:
    QUEUED again with its attempt unspent and ``reason`` as its error (code PARKED),
    not dispatched again for ``park_for``. False when the grant is no longer there."""
    status = await conn.execute(
        q("park_task"), ref.run_id, ref.task_id, ref.attempt, token, park_for, reason
    )
    return status.endswith(" 1")
