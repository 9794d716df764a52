"""Runs: insert, lock and load the snapshot the machine decides on, finish, reopen, list."""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import asyncpg

from composer_core.model import NodeType, RunStatus, TaskState
from composer_core.statemachine import MapProgress, MapState, NodeState, Run
from composer_core.templates import Json
from composer_repo._db import Connection, json_texts, translated
from composer_repo._errors import Invalid, NotFound, RunAlreadyExists
from composer_repo._records import (
    FinishedRun,
    LeaseHolder,
    LockedRun,
    LockedRuns,
    ParentRef,
    RunPage,
    RunRecord,
    RunSummary,
    StartedRun,
    TaskRecord,
)
from composer_repo._sql import q
from composer_repo._tx import note_transaction_id

#: Sorts after every UUID text (hex digits and dashes): "no upper bound".
_ABOVE_ALL_IDS = "~"


#: The listing statement's suffix for each (workflow given, status given): one
#: statement per combination, so each keeps a plan that uses its index.
def _listing(by_workflow: bool, by_status: bool, labelled: bool) -> str:
    """The listing statement for the filters given, one per combination (each named
    in full, so the check that every statement is used finds them)."""
    match (by_workflow, by_status, labelled):
        case (False, False, False):
            return q("list_runs")
        case (True, False, False):
            return q("list_runs_by_workflow")
        case (False, True, False):
            return q("list_runs_by_status")
        case (True, True, False):
            return q("list_runs_by_workflow_status")
        case (False, False, True):
            return q("list_runs_labelled")
        case (True, False, True):
            return q("list_runs_by_workflow_labelled")
        case (False, True, True):
            return q("list_runs_by_status_labelled")
        case _:
            return q("list_runs_by_workflow_status_labelled")


@translated
async def insert_run(
    conn: Connection,
    run_id: str,
    *,
    workflow_id: str,
    version: int,
    input: Json = None,
    config: Json = None,
    idempotency_key: str | None = None,
    request_digest: str | None = None,
    status: RunStatus = RunStatus.RUNNING,
    data_key: str | None = None,
    started_by: str | None = None,
    context: Json = None,
    labels: Mapping[str, str] | None = None,
    priority: int | None = None,
    schedule: tuple[str, dt.datetime] | None = None,
) -> StartedRun:
    """Create a run of a definition version that exists and is not deleted, in one
    round trip when it is new.

    ``started_by`` is the name of the API token that started it; ``context`` its
    calling context document (``composer_common.caller``; None: none); ``labels``
    its labels, stored in plain text (None or empty: none, stored as NULL so the
    label index holds no entry for it: V017); ``priority`` its rendered priority
    (V026; None: the default, 3, stored as NULL); ``schedule`` the schedule and fire
    time it was started for (V024).

    With an ``idempotency_key`` already used for this workflow, nothing is
    written and the existing run comes back (``created=False``) with the
    ``request_digest`` its start stored beside the key, for the caller to compare
    with its own; a concurrent start with the same key waits for this
    transaction, then gets this run.
    Raises NotFound (no such version), Invalid (deleted version),
    RunAlreadyExists (run id taken) and NoPartition (run id in a month with no
    partition: not a recent UUIDv7, or partitions not created ahead).
    """
    row = await conn.fetchrow(
        q("insert_run"),
        run_id,
        workflow_id,
        version,
        status.value,
        input,
        config,
        idempotency_key,
        data_key,
        started_by,
        context,
        dict(labels) if labels else None,
        request_digest,
        None if schedule is None else schedule[0],
        None if schedule is None else schedule[1],
        priority,
    )
    assert row is not None  # a SELECT of scalars: always one row
    return await _started(conn, row, run_id, workflow_id, version, idempotency_key)


@dataclass(frozen=True, slots=True)
class NewRun:
    """One start of ``insert_runs``: ``insert_run``'s arguments."""

    run_id: str
    workflow_id: str
    version: int
    input: Json = None
    config: Json = None
    idempotency_key: str | None = None
    request_digest: str | None = None
    status: RunStatus = RunStatus.RUNNING
    data_key: str | None = None
    started_by: str | None = None
    context: Json = None
    labels: Mapping[str, str] | None = None
    priority: int | None = None
    schedule: tuple[str, dt.datetime] | None = None


@translated
async def insert_runs(conn: Connection, runs: Sequence[NewRun]) -> list[StartedRun]:
    """``insert_run`` for each of ``runs``, in one round trip when all are new: the
    StartedRun of each, in order. Raises the error ``insert_run`` would have raised for
    the first start it refuses (the caller's transaction is then to be rolled back)."""
    if not runs:
        return []
    rows = await conn.fetch(
        q("insert_runs"),
        [r.run_id for r in runs],
        [r.workflow_id for r in runs],
        [r.version for r in runs],
        [r.status.value for r in runs],
        json_texts(r.input for r in runs),
        json_texts(r.config for r in runs),
        [r.idempotency_key for r in runs],
        [r.data_key for r in runs],
        [r.started_by for r in runs],
        json_texts(r.context for r in runs),
        json_texts(dict(r.labels) if r.labels else None for r in runs),
        [r.request_digest for r in runs],
        [None if r.schedule is None else r.schedule[0] for r in runs],
        [None if r.schedule is None else r.schedule[1] for r in runs],
        [r.priority for r in runs],
    )
    return [
        await _started(conn, row, r.run_id, r.workflow_id, r.version, r.idempotency_key)
        for r, row in zip(runs, rows, strict=True)
    ]


async def _started(
    conn: Connection,
    row: asyncpg.Record,
    run_id: str,
    workflow_id: str,
    version: int,
    idempotency_key: str | None,
) -> StartedRun:
    """What an insert_run(s) row says of one start: created, or the run its key
    started before; raises when it was refused."""
    if row["live"] is None:
        raise NotFound(f"workflow {workflow_id!r} has no version {version}")
    if not row["live"]:
        raise Invalid(f"workflow {workflow_id!r} is deleted: it starts no new runs")
    if row["status"] is not None:
        return StartedRun(run_id, RunStatus(row["status"]), created=True, now=row["now"])
    if idempotency_key is None or row["claimed"]:
        raise RunAlreadyExists(run_id)
    existing = await conn.fetchrow(q("find_idempotent_run"), workflow_id, idempotency_key)
    if existing is None:  # pragma: no cover - the key row always names a stored run
        raise NotFound(
            f"idempotency key {idempotency_key!r} of workflow {workflow_id!r} names a run "
            "that no longer exists"
        )
    return StartedRun(
        existing["id"],
        RunStatus(existing["status"]),
        created=False,
        now=existing["now"],
        request_digest=existing["request_digest"],
    )


@translated
async def load_run(conn: Connection, run_id: str) -> LockedRun:
    """Lock the run for the rest of the transaction and load the machine's snapshot,
    with the transaction's clock.

    The first call of every event's transaction: the row lock serializes the
    events of one run, so concurrent completions see each other's writes. The
    snapshot holds each reached node's state but no inputs, outputs or buffered
    signals: ``load_outputs`` and ``pending_signals`` load those the machine asks
    for. Raises NotFound.
    """
    row = await conn.fetchrow(q("lock_run"), run_id)
    if row is None:
        raise NotFound(f"workflow run {run_id} does not exist")
    return await _snapshot(conn, run_id, row)


@translated
async def try_load_run(conn: Connection, run_id: str) -> LockedRun | None:
    """``load_run`` for a loop that must never wait for a run's lock: None when another
    transaction holds it (or the run is gone), so the caller moves on and comes back."""
    row = await conn.fetchrow(q("try_lock_run"), run_id)
    if row is None:
        return None
    return await _snapshot(conn, run_id, row)


@translated
async def lock_runs(
    conn: Connection, reports: Sequence[tuple[str, str]], *, not_before: dt.datetime | None = None
) -> LockedRuns:
    """``load_run`` for a batch of reports, each a (run id, task id), in two round trips
    whatever its size (three when one of its runs has a MAP in progress).

    Locks the reports' runs that no other transaction holds (SKIP LOCKED, in id
    order) and loads their snapshots and the owners of their RUNNING attempts'
    leases. Of a MAP's items a snapshot holds only those the reports name and as
    many of the next to go as its run has reports (``load_map_items_of_runs``),
    not every item in flight: an item is found by the report that names it. A run
    left out is locked by another transaction or does not exist: the caller applies
    its events one at a time (``load_run``), which waits for the lock or says NotFound.

    ``not_before``: the transaction's clock reads no earlier than it (a timer group
    staged ahead of its due time, which commits at that time).
    """
    rows = await conn.fetch(q("lock_runs"), sorted({run_id for run_id, _ in reports}), not_before)
    if not rows:
        return LockedRuns({}, None, {})
    note_transaction_id(conn, rows[0]["xid"])
    nodes: dict[str, dict[str, NodeState]] = {r["id"]: {} for r in rows}
    leases: dict[tuple[str, str, int], LeaseHolder] = {}
    tasks = await conn.fetch(q("load_task_states_of_runs"), list(nodes))
    mapping = sorted({t["run_id"] for t in tasks if _map_in_progress(t)})
    if mapping:  # a third round trip, for the runs with a MAP in progress only
        tasks += await conn.fetch(
            q("load_map_items_of_runs"),
            mapping,
            [run_id for run_id, _ in reports],
            [task_id for _, task_id in reports],
        )
    by_run: dict[str, list[Any]] = {run_id: [] for run_id in nodes}
    for t in tasks:
        by_run[t["run_id"]].append(t)
        if t["state"] == "RUNNING":
            leases[(t["run_id"], t["id"], t["attempt"])] = LeaseHolder(t["lease_token"], t["queue"])
    runs = {r["id"]: _run(r["id"], r, _node_states(by_run[r["id"]])) for r in rows}
    contexts = {r["id"]: r["context"] for r in rows if r["context"] is not None}
    data_keys = {r["id"]: r["data_key"] for r in rows}
    priorities = {r["id"]: r["priority"] for r in rows if r["priority"] is not None}
    return LockedRuns(runs, rows[0]["now"], leases, data_keys, contexts, priorities)


async def _snapshot(conn: Connection, run_id: str, row: Any) -> LockedRun:
    tasks = await conn.fetch(q("load_task_states"), run_id)
    if any(_map_in_progress(t) for t in tasks):
        # a second round trip, for a run with a MAP in progress only
        tasks = [*tasks, *await conn.fetch(q("load_map_items_of_run"), run_id)]
    nodes = _node_states(tasks)
    return LockedRun(
        _run(run_id, row, nodes), row["now"], data_key=row["data_key"], context=row["context"]
    )


def _map_in_progress(task: Any) -> bool:
    """Whether a task state row is a MAP node's, WAITING with its progress: its items
    are loaded by a statement of their own."""
    return task["map_progress"] is not None and task["state"] == TaskState.WAITING.value


def _node_states(rows: Sequence[Any]) -> dict[str, NodeState]:
    """Each reached node's state; a MAP's with its progress and the items loaded."""
    nodes: dict[str, NodeState] = {}
    items: dict[str, dict[int, NodeState]] = {}
    for t in rows:
        if t["item"] is None:
            nodes[t["node_id"]] = _node_state(t)
        else:
            items.setdefault(t["node_id"], {})[t["item"]] = _node_state(t)
    for node_id, loaded in items.items():
        state = nodes.get(node_id)
        if state is not None and state.map is not None:
            nodes[node_id] = replace(state, map=MapState(state.map.progress, loaded))
    return nodes


#: A task row's state by its text: the snapshot of a run with a wide FORK builds a
#: hundred states a report, and ``TaskState(text)`` took 2 % of the coordinator's CPU
#: on W2 (py-spy); a dictionary look-up takes a tenth of its time (30 ns, not 330).
_TASK_STATES: dict[str, TaskState] = {s.value: s for s in TaskState}


def _node_state(t: Any) -> NodeState:
    state = _TASK_STATES[t["state"]]
    branches = t["branches"]
    return NodeState(
        task_id=t["id"],
        state=state,
        attempt=t["attempt"],
        branches=None if branches is None else tuple(branches),
        awaited_signal=t["awaited_signal"] if state is TaskState.WAITING else None,
        error=t["error"],
        map=None
        if t["map_progress"] is None
        else MapState(MapProgress.from_json(t["map_progress"])),
    )


def _run(run_id: str, row: Any, nodes: dict[str, NodeState]) -> Run:
    return Run(
        run_id=run_id,
        workflow_id=row["workflow_id"],
        version=row["version"],
        status=RunStatus(row["status"]),
        input=row["input"],
        config=row["config"],
        nodes=nodes,
        signals=None,  # loaded when the machine asks (pending_signals)
    )


@translated
async def load_outputs(conn: Connection, run_id: str, node_ids: Collection[str]) -> dict[str, Json]:
    """The outputs of ``node_ids``: None for one that did not COMPLETE (or has no task),
    so that every node asked for is answered."""
    rows = await conn.fetch(q("load_outputs"), run_id, list(node_ids))
    found = {r["node_id"]: r["output"] for r in rows}
    return {node_id: found.get(node_id) for node_id in node_ids}


@translated
async def reopen_run(
    conn: Connection,
    run_id: str,
    *,
    version: int,
    input: Json,
    config: Json,
    reset_nodes: Sequence[str] = (),
) -> None:
    """Persist a retry: the run is RUNNING again on ``version`` with that input and
    config, its outcome cleared, and the tasks of ``reset_nodes`` deleted."""
    if await conn.fetchval(q("reopen_run"), run_id, version, input, config) is None:
        raise NotFound(f"workflow run {run_id} does not exist")
    if reset_nodes:
        await conn.execute(q("delete_tasks"), run_id, list(reset_nodes))


@translated
async def record_cancelled_by(conn: Connection, run_id: str, name: str) -> None:
    """Record who cancelled the run (their API token's name), in the cancel's
    transaction. Raises NotFound."""
    if await conn.fetchval(q("record_cancelled_by"), run_id, name) is None:
        raise NotFound(f"workflow run {run_id} does not exist")


@translated
async def record_retried_by(conn: Connection, run_id: str, name: str) -> None:
    """Record who last retried the run, in the retry's transaction. Raises NotFound."""
    if await conn.fetchval(q("record_retried_by"), run_id, name) is None:
        raise NotFound(f"workflow run {run_id} does not exist")


@dataclass(frozen=True, slots=True)
class RunEnd:
    """A run that finishes: its terminal status, and its output or error."""

    run_id: str
    status: RunStatus
    output: Json = None
    error: str | None = None


@translated
async def finish_runs(conn: Connection, ends: Sequence[RunEnd]) -> dict[str, FinishedRun]:
    """Move PENDING, RUNNING or PAUSED runs to their terminal status, many in one
    statement (a group commit of timers ends tens of one-node runs): by run id, those
    that were not terminal yet (one left out: under its lock, a stale snapshot)."""
    if not ends:
        return {}
    for end in ends:
        if not end.status.is_terminal:
            raise Invalid(f"a run finishes with a terminal status, not {end.status}")
    ends = sorted(ends, key=lambda e: e.run_id)  # one order of rows for every batch
    rows = await conn.fetch(
        q("finish_runs"),
        [e.run_id for e in ends],
        [e.status.value for e in ends],
        json_texts(e.output for e in ends),
        [e.error for e in ends],
    )
    return {
        row["id"]: FinishedRun(
            workflow_id=row["workflow_id"],
            version=row["version"],
            created_at=row["created_at"],
            completed_at=row["completed_at"],
            webhook_url=row["webhook_url"],
            parent=None
            if row["parent_run_id"] is None
            else ParentRef(
                row["parent_run_id"],
                row["parent_node_id"],
                row["parent_task_id"],
                row["parent_attempt"],
            ),
        )
        for row in rows
    }


@translated
async def finish_run(
    conn: Connection,
    run_id: str,
    status: RunStatus,
    *,
    output: Json = None,
    error: str | None = None,
) -> FinishedRun | None:
    """Move a PENDING or RUNNING run to the terminal ``status``.

    Returns None when the run was already terminal (nothing written): under
    the run lock that means the snapshot was stale.
    """
    finished = await finish_runs(conn, [RunEnd(run_id, status, output, error)])
    return finished.get(run_id)  # the engine's one statement


@translated
async def get_run(conn: Connection, run_id: str) -> RunRecord:
    """One run with its input, config and outcome. Raises NotFound."""
    r = await conn.fetchrow(q("get_run"), run_id)
    if r is None:
        raise NotFound(f"workflow run {run_id} does not exist")
    return RunRecord(
        run_id=r["id"],
        workflow_id=r["workflow_id"],
        version=r["version"],
        status=RunStatus(r["status"]),
        input=r["input"],
        config=r["config"],
        output=r["output"],
        error=r["error"],
        idempotency_key=r["idempotency_key"],
        created_at=r["created_at"],
        updated_at=r["updated_at"],
        completed_at=r["completed_at"],
        context=r["context"],
        started_by=r["started_by"],
        cancelled_by=r["cancelled_by"],
        retried_by=r["retried_by"],
        labels=r["labels"] or {},
        schedule_id=r["schedule_id"],
        scheduled_for=r["scheduled_for"],
        parent=None
        if r["parent_run_id"] is None
        else ParentRef(
            r["parent_run_id"], r["parent_node_id"], r["parent_task_id"], r["parent_attempt"]
        ),
    )


@translated
async def get_run_tasks(conn: Connection, run_id: str) -> list[TaskRecord]:
    """Every task of a run with inputs and outputs, oldest first (the run page of the API)."""
    return [_task(r) for r in await conn.fetch(q("get_run_tasks"), run_id)]


@translated
async def get_map_items(
    conn: Connection, run_id: str, node_id: str, *, start: int = 0, limit: int = 100
) -> list[TaskRecord]:
    """A page of MAP ``node_id``'s item tasks, in item order from index ``start``."""
    if not 1 <= limit <= 1000:
        raise Invalid(f"limit must be between 1 and 1000, not {limit}")
    rows = await conn.fetch(q("get_map_items"), run_id, node_id, start, limit)
    return [_task(r) for r in rows]


@translated
async def list_runs(
    conn: Connection,
    *,
    workflow_id: str | None = None,
    status: RunStatus | None = None,
    labels: Mapping[str, str] | None = None,
    created_after: dt.datetime | None = None,
    created_before: dt.datetime | None = None,
    schedule_id: str | None = None,
    cursor: str | None = None,
    limit: int = 50,
) -> RunPage:
    """Runs newest first, filtered by workflow, status, labels (each must match)
    and creation time, in any combination; or by the schedule that started them.

    ``cursor`` is the ``next_cursor`` of the previous page (the last run id it
    showed); pages stay stable while new runs arrive, since ids grow with time.
    """
    if not 1 <= limit <= 1000:
        raise Invalid(f"limit must be between 1 and 1000, not {limit}")
    upper = _ABOVE_ALL_IDS if created_before is None else uuid7_bound(created_before)
    if cursor is not None:
        upper = min(upper, cursor)
    lower = "" if created_after is None else uuid7_bound(created_after)
    args: list[Any] = [upper, lower, limit + 1]
    if schedule_id is not None:  # its own small index; with a status at most
        if workflow_id is not None or labels:
            raise Invalid("schedule_id combines with status and the creation times only")
        rows = await conn.fetch(
            q("list_runs_by_schedule"), *args, schedule_id, None if status is None else status.value
        )
        return _page(rows, limit)
    if workflow_id is not None:
        args.append(workflow_id)
    if status is not None:
        args.append(status.value)
    if labels:
        args.append(dict(labels))
        await conn.execute(q("plan_listing_per_value"))  # for this transaction only
    rows = await conn.fetch(
        _listing(workflow_id is not None, status is not None, bool(labels)), *args
    )
    return _page(rows, limit)


def _page(rows: Sequence[Any], limit: int) -> RunPage:
    runs = [
        RunSummary(
            run_id=r["id"],
            workflow_id=r["workflow_id"],
            version=r["version"],
            status=RunStatus(r["status"]),
            error=r["error"],
            idempotency_key=r["idempotency_key"],
            created_at=r["created_at"],
            updated_at=r["updated_at"],
            completed_at=r["completed_at"],
            started_by=r["started_by"],
            labels=r["labels"] or {},
            schedule_id=r["schedule_id"],
            scheduled_for=r["scheduled_for"],
        )
        for r in rows[:limit]
    ]
    next_cursor = runs[-1].run_id if len(rows) > limit else None
    return RunPage(runs, next_cursor)


@translated
async def idempotent_run_id(conn: Connection, workflow_id: str, idempotency_key: str) -> str | None:
    """The run a start with this key started; None when none did."""
    row = await conn.fetchrow(q("find_idempotent_run"), workflow_id, idempotency_key)
    return None if row is None else str(row["id"])


def uuid7_bound(ts: dt.datetime) -> str:
    """The smallest UUIDv7 text with a timestamp at or after ``ts``.

    The same bound as the SQL function composer_uuid7_bound, which draws the
    partition boundaries: a time range of runs is an id range.
    """
    if ts.tzinfo is None:
        raise Invalid(f"uuid7_bound needs an aware datetime, got {ts!r}")
    millis = int(ts.timestamp() * 1000)
    h = f"{max(millis, 0):012x}"
    return f"{h[:8]}-{h[8:12]}-0000-0000-000000000000"


def _task(r: Any) -> TaskRecord:
    branches = r["branches"]
    return TaskRecord(
        task_id=r["id"],
        node_id=r["node_id"],
        node_type=NodeType(r["node_type"]),
        state=TaskState(r["state"]),
        attempt=r["attempt"],
        input=r["input"],
        output=r["output"],
        error=r["error"],
        error_code=r["error_code"],
        branches=None if branches is None else tuple(branches),
        wake_at=r["wake_at"],
        awaited_signal=r["awaited_signal"],
        queue=r["queue"],
        lease_owner=r["lease_owner"],
        lease_expires_at=r["lease_expires_at"],
        created_at=r["created_at"],
        updated_at=r["updated_at"],
        started_at=r["started_at"],
        finished_at=r["finished_at"],
        max_attempts=r["max_attempts"],
        held_reason=r["held_reason"],
        item=r["item"],
        items_total=r["items_total"],
        item_counts=None if r["items_total"] is None else dict(r["item_counts"] or {}),
    )


@translated
async def set_data_key(conn: Connection, run_id: str, data_key: str) -> str:
    """Give a run started with sealing off its data key (under its lock). Returns the
    run's key: this one, or the one it already had."""
    stored: str = await conn.fetchval(q("set_data_key"), run_id, data_key)
    return stored
