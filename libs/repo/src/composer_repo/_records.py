"""What repository functions take and return: small frozen dataclasses.

Rows come back as these rather than as driver records, so nothing above
libs/repo depends on asyncpg's types.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from composer_core.model import NodeType, RunStatus, TaskState
from composer_core.statemachine import Run
from composer_core.templates import Json

OutboxKind = Literal["dispatch", "webhook"]


@dataclass(frozen=True, slots=True)
class TaskRef:
    """One execution attempt of a task: the fencing token of every task write.

    A write applies only when all four match the stored row, which fences off
    reports and leases of stale attempts.
    """

    run_id: str
    task_id: str
    node_id: str
    attempt: int


# -- definitions ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Definition:
    """One version of a workflow definition, with its spec (the YAML as JSON)."""

    workflow_id: str
    version: int
    name: str
    spec: Json
    webhook_url: str | None
    created_by: str | None
    deployed: bool
    deployed_at: dt.datetime | None
    deleted_at: dt.datetime | None
    created_at: dt.datetime


@dataclass(frozen=True, slots=True)
class DefinitionVersion:
    """A version's metadata without its spec (listings)."""

    workflow_id: str
    version: int
    name: str
    webhook_url: str | None
    created_by: str | None
    deployed: bool
    deployed_at: dt.datetime | None
    created_at: dt.datetime


@dataclass(frozen=True, slots=True)
class WorkflowSummary:
    """One workflow in a listing: its newest name and versions."""

    workflow_id: str
    name: str
    latest_version: int
    deployed_version: int | None
    created_at: dt.datetime
    updated_at: dt.datetime


# -- runs ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StartedRun:
    """The result of inserting a run.

    ``created`` is False when the idempotency key was used before: ``run_id``
    and ``status`` are then those of the existing run, which is left untouched.
    """

    run_id: str
    status: RunStatus
    created: bool
    #: The inserting transaction's clock: the time the run's first decision is made at.
    now: dt.datetime
    #: Not created: the request digest stored with the key by the start that used it
    #: first (as stored: sealed or not; None: that start stored none).
    request_digest: str | None = None


@dataclass(frozen=True, slots=True)
class LockedRun:
    """A run locked until its transaction ends: the machine's snapshot, and the
    transaction's clock, from which every time the event persists is derived."""

    run: Run
    now: dt.datetime
    #: The run's sealed data key (None: its documents are plain).
    data_key: str | None = None
    #: The run's calling context document (None: it has none), which the TASK rows
    #: this event inserts copy: a lease reads it from the task, not from the run.
    context: Json = None


@dataclass(frozen=True, slots=True)
class NewTask:
    """A task to insert (``insert_tasks``): what ``insert_task`` takes, but SWITCH branches."""

    task_id: str
    run_id: str
    node_id: str
    node_type: NodeType
    state: TaskState
    input: Json = None
    output: Json = None
    error: str | None = None
    wake_at: dt.datetime | None = None
    awaited_signal: str | None = None
    queue: str | None = None
    max_attempts: int | None = None
    #: The run's calling context, copied for the lease (None: none, or no handler of
    #: the user's runs this task).
    context: Json = None
    #: A task created FAILED: the failure's code (INPUT_TOO_LARGE), if it has one.
    error_code: str | None = None
    #: A MAP's item: its index (None: a node's own task).
    item: int | None = None
    #: A MAP item that waits for a place: no dispatch time until it goes.
    waits: bool = False
    #: A MAP's own task: its progress (MapProgress.as_json()).
    map_progress: Json = None
    #: A task inserted RUNNING, leased to a worker as it is created (None: not leased).
    lease: NewLease | None = None


@dataclass(frozen=True, slots=True)
class NewLease:
    """The lease a task is inserted with (``NewTask.lease``): the next task a report's
    worker takes with its answer (engine/_lease_ahead.py)."""

    owner: str
    token: str
    expires_at: dt.datetime


@dataclass(frozen=True, slots=True)
class NewDispatch:
    """A dispatch to enqueue (``enqueue_dispatches``)."""

    run_id: str
    task_id: str
    queue: str
    payload: Json
    not_before: dt.datetime | None = None


@dataclass(frozen=True, slots=True)
class LockedRuns:
    """The runs of a batch of events locked until its transaction ends (``lock_runs``)."""

    #: run id → snapshot, for every run that was locked (the others are another's now).
    runs: dict[str, Run]
    #: The transaction's clock, read after the last lock (None: nothing was locked).
    now: dt.datetime | None
    #: (run id, task id, attempt) → its lease, for every RUNNING attempt loaded: the
    #: runs' own tasks and the MAP items the batch's reports name.
    leases: dict[tuple[str, str, int], LeaseHolder]
    #: run id → its sealed data key (None: its documents are plain).
    data_keys: dict[str, str | None] = field(default_factory=dict)
    #: run id → its calling context, for the locked runs that have one.
    contexts: dict[str, Json] = field(default_factory=dict)
    #: run id → its priority, for the locked runs that have one (None: the default).
    priorities: dict[str, int] = field(default_factory=dict)

    def locked(self, run_id: str) -> LockedRun:
        """One run of the batch as ``load_run`` would have returned it (it must be locked)."""
        assert self.now is not None
        return LockedRun(
            self.runs[run_id],
            self.now,
            data_key=self.data_keys.get(run_id),
            context=self.contexts.get(run_id),
        )


@dataclass(frozen=True, slots=True)
class ParentRef:
    """The node attempt of another run that a run was started for, and reports its end to."""

    run_id: str
    node_id: str
    task_id: str
    attempt: int


@dataclass(frozen=True, slots=True)
class FinishedRun:
    """A run this call moved to a terminal status: what metrics and webhooks need."""

    workflow_id: str
    version: int
    created_at: dt.datetime
    completed_at: dt.datetime
    webhook_url: str | None
    #: The node of another run it was started for, which hears of its end.
    parent: ParentRef | None = None

    @property
    def duration(self) -> dt.timedelta:
        return self.completed_at - self.created_at


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A run as the API shows it."""

    run_id: str
    workflow_id: str
    version: int
    status: RunStatus
    input: Json
    config: Json
    output: Json
    error: str | None
    idempotency_key: str | None
    created_at: dt.datetime
    updated_at: dt.datetime
    completed_at: dt.datetime | None
    #: The calling context of the start (``composer_common.caller``); None: none.
    context: Json = None
    #: The names of the API tokens that started, cancelled and last retried the run.
    started_by: str | None = None
    cancelled_by: str | None = None
    retried_by: str | None = None
    #: Its labels (V017), in plain text even when the run is sealed; empty: none.
    labels: Mapping[str, str] = field(default_factory=dict)
    #: The node attempt of another run that started it (a SUB_WORKFLOW's); None: none.
    parent: ParentRef | None = None
    #: The schedule that started it (V024) and the fire time it was started for.
    schedule_id: str | None = None
    scheduled_for: dt.datetime | None = None


@dataclass(frozen=True, slots=True)
class RunSummary:
    """A run in a listing: no input, config or output."""

    run_id: str
    workflow_id: str
    version: int
    status: RunStatus
    error: str | None
    idempotency_key: str | None
    created_at: dt.datetime
    updated_at: dt.datetime
    completed_at: dt.datetime | None
    started_by: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    #: The schedule that started it and the fire time it was started for (V024).
    schedule_id: str | None = None
    scheduled_for: dt.datetime | None = None


@dataclass(frozen=True, slots=True)
class RunPage:
    """One page of runs, newest first; pass ``next_cursor`` to get the next page."""

    runs: list[RunSummary]
    next_cursor: str | None


# -- tasks ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """A task row as the API shows it."""

    task_id: str
    node_id: str
    node_type: NodeType
    state: TaskState
    attempt: int
    input: Json
    output: Json
    error: str | None
    error_code: str | None
    branches: tuple[str, ...] | None
    wake_at: dt.datetime | None
    awaited_signal: str | None
    queue: str | None
    lease_owner: str | None
    lease_expires_at: dt.datetime | None
    created_at: dt.datetime
    updated_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    #: The attempts its node's retry policy allows (worker nodes; None for the others
    #: and rows from before V004). ``attempt`` counts from 0.
    max_attempts: int | None = None
    #: Why the admission step holds it (PENDING, not sent; V015); None: not held.
    held_reason: str | None = None
    #: A MAP's item: its index (None: a node's own task).
    item: int | None = None
    #: A MAP's own task: how many items it has, and how many are in each state.
    items_total: int | None = None
    item_counts: dict[str, int] | None = None


@dataclass(frozen=True, slots=True)
class FinishedTask:
    """A task attempt this call finished: what metrics need."""

    node_type: NodeType
    started_at: dt.datetime | None
    finished_at: dt.datetime
    #: The queue of a worker task (None for others): its finish frees a place there.
    queue: str | None = None
    #: Its node concurrency key, as its row carries it (None: none): its finish frees
    #: a place there.
    limit_key: str | None = None


@dataclass(frozen=True, slots=True)
class Requeued:
    """The next attempt of a requeued task: everything its dispatch needs."""

    attempt: int
    node_type: NodeType
    queue: str | None
    input: Json
    #: Its node concurrency key (None: none): the failed attempt's place frees.
    limit_key: str | None = None


@dataclass(frozen=True, slots=True)
class Lease:
    """A worker's lease on a task attempt, with the input to run it on."""

    run_id: str
    task_id: str
    node_id: str
    node_type: NodeType
    attempt: int
    queue: str | None
    input: Json
    expires_at: dt.datetime
    #: The node's attempt budget (its retry policy's max_attempts); None for a task
    #: written before the schema kept it.
    max_attempts: int | None = None
    #: The lease's secret: renewals and reports must present it.
    token: str = ""
    workflow_id: str = ""
    workflow_version: int = 0
    #: The run's calling context, from the task's copy (None: none).
    context: Json = None
    #: The run's priority (V026; None: the default, 3).
    priority: int | None = None


@dataclass(frozen=True, slots=True)
class TaskRouting:
    """Where a task belongs and whether its attempt is due: what a refused lease is
    told (docs/architecture.md §6.1)."""

    node_id: str
    node_type: NodeType
    queue: str | None
    attempt: int
    state: TaskState
    #: When the waiting attempt is due, if that is still ahead (a retry's backoff, a
    #: parked attempt); None: due, or not waiting for a worker.
    due_at: dt.datetime | None


@dataclass(frozen=True, slots=True)
class LeaseHolder:
    """Who may report a RUNNING attempt: the lease's token, and the task's queue."""

    token: str | None
    queue: str | None


@dataclass(frozen=True, slots=True)
class Redispatch:
    """A lost attempt made due again: what its dispatch needs."""

    run_id: str
    task_id: str
    node_id: str
    node_type: NodeType
    attempt: int
    queue: str | None
    input: Json


# -- background loops ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DueWait:
    """A WAITING task whose timer is due: the timer loop applies TimerFired to it."""

    run_id: str
    task_id: str
    node_id: str
    wake_at: dt.datetime


@dataclass(frozen=True, slots=True)
class ExpiredLease:
    """A RUNNING attempt whose worker stopped renewing its lease."""

    run_id: str
    task_id: str
    node_id: str
    attempt: int
    owner: str | None
    expired_at: dt.datetime


@dataclass(frozen=True, slots=True)
class LostDispatch:
    """An attempt due for dispatch long ago that no worker took and no outbox row carries."""

    run_id: str
    task_id: str
    node_id: str
    attempt: int
    state: TaskState
    dispatched_at: dt.datetime
    #: The queue it is dispatched on (its stream is ``<prefix>:q:<queue>:<shard>``).
    queue: str | None = None


@dataclass(frozen=True, slots=True)
class TaskAttempt:
    """Where a task stands now: its state and current attempt."""

    run_id: str
    task_id: str
    state: TaskState
    attempt: int
    node_id: str = ""


@dataclass(frozen=True, slots=True)
class BufferedSignal:
    """A signal sent to a run: buffered until a WAIT_FOR_EVENT node takes it, or taken
    as it arrived (consumed at once; since V008)."""

    signal_id: str
    name: str
    payload: Json
    created_at: dt.datetime
    consumed_at: dt.datetime | None
    #: The WAIT_FOR_EVENT node that took it (None while it waits).
    consumed_by: str | None
    #: The name of the API token that sent it (None: sent by no token, or before V008).
    sent_by: str | None = None


@dataclass(frozen=True, slots=True)
class OutboxMessage:
    """A claimed outbox row: publish it, then delete it in the claiming transaction."""

    id: int
    kind: OutboxKind
    run_id: str
    task_id: str | None
    destination: str
    payload: Json
    attempts: int
    next_attempt_at: dt.datetime
    created_at: dt.datetime
    #: A webhook's random delivery id (the same on every retry); None for a dispatch.
    delivery_id: str | None = None


WorkerState = Literal["SERVING", "DRAINING", "STOPPED"]


@dataclass(frozen=True, slots=True)
class WorkerBeat:
    """What a worker's heartbeat says about it (the coordinator records it)."""

    worker_id: str
    host: str
    queues: tuple[str, ...]
    concurrency: int
    in_flight: int
    sdk_version: str
    state: WorkerState
    started_at: dt.datetime


@dataclass(frozen=True, slots=True)
class WorkerRecord:
    """A worker as its last recorded heartbeat left it, and the database's clock
    (``now``) when it was read: how long ago is ``now - last_seen_at``."""

    worker_id: str
    host: str
    queues: tuple[str, ...]
    concurrency: int
    in_flight: int
    sdk_version: str
    state: WorkerState
    started_at: dt.datetime
    last_seen_at: dt.datetime
    stopped_at: dt.datetime | None
    now: dt.datetime


@dataclass(frozen=True, slots=True)
class UnservedQueue:
    """A queue a run's task waits on that no live worker serves: when a worker
    serving it was last seen (None: never), and the database's clock."""

    queue: str
    last_seen_at: dt.datetime | None
    now: dt.datetime
