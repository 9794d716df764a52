"""Actions: the changes a decision makes, as plain frozen values. The shell
persists them in order; the machine evolves its snapshot the same way
(``Transition.run``)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from composer_core.kinds import ChildRun
from composer_core.model import NodeType, RenderedKeys, RunStatus, TaskState
from composer_core.statemachine._state import MapProgress, Run
from composer_core.templates import Json


@dataclass(frozen=True, slots=True)
class CreateTask:
    """A reached node becomes its one task: PENDING (a DispatchTask follows), WAITING,
    or already final (COMPLETED control nodes and satisfied waits, SKIPPED, or FAILED
    when its input could not be resolved)."""

    task_id: str
    node_id: str
    node_type: NodeType
    state: TaskState
    input: Json = None
    output: Json = None
    error: str | None = None
    branches: tuple[str, ...] | None = None
    wake_at: dt.datetime | None = None
    awaited_signal: str | None = None
    #: FAILED: what kind of failure, when it has a code (INPUT_TOO_LARGE).
    error_code: str | None = None
    #: An item of a MAP node (its index; the task has the MAP's node id): None for a
    #: node's own task.
    item: int | None = None
    #: An item that waits for a place among the MAP's max_parallel: PENDING with no
    #: dispatch yet (a StartItem sends it later).
    waits: bool = False
    #: The MAP node's own task: its items' progress.
    map_progress: MapProgress | None = None
    #: A limited worker node's keys rendered from its templates (docs/architecture.md
    #: §4.12), stored on the task: None when they are plain names (or it has none).
    keys: RenderedKeys | None = None


@dataclass(frozen=True, slots=True)
class DispatchTask:
    """Send the first attempt of a new PENDING task to its queue, no earlier than
    ``not_before``. The message names the attempt only: the worker gets the input
    (stored by CreateTask) and the node's timeout with its lease."""

    task_id: str
    node_id: str
    node_type: NodeType
    queue: str
    not_before: dt.datetime
    item: int | None = None


@dataclass(frozen=True, slots=True)
class StartItem:
    """A MAP item that waited for a place goes: its task (PENDING since the MAP began)
    is dispatched to ``queue`` now (None: an inner SUB_WORKFLOW's, whose item starts a
    child run instead: a StartChild follows)."""

    task_id: str
    node_id: str
    node_type: NodeType
    item: int
    queue: str | None


@dataclass(frozen=True, slots=True)
class CancelItems:
    """Stop every item of the MAP node ``node_id`` that has not finished (sent or still
    waiting for a place): CANCELLED, with ``reason``."""

    node_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class MapProgressed:
    """Store the MAP node's progress on its own task row (the decision moved it)."""

    task_id: str
    node_id: str
    progress: MapProgress


@dataclass(frozen=True, slots=True)
class CompleteTask:
    task_id: str
    node_id: str
    attempt: int
    output: Json = None
    item: int | None = None


@dataclass(frozen=True, slots=True)
class FailTask:
    """An active task attempt failed for good."""

    task_id: str
    node_id: str
    attempt: int
    error: str
    error_code: str | None = None
    item: int | None = None


@dataclass(frozen=True, slots=True)
class RetryTask:
    """A failed attempt will be retried: the task returns to PENDING with attempt + 1 and
    that attempt goes to ``queue`` (with the input stored at creation) no earlier than
    ``not_before``. ``queue`` None: a sub-workflow node, whose next attempt is a new
    child run (a StartChild follows)."""

    task_id: str
    node_id: str
    node_type: NodeType
    attempt: int  # the attempt that failed
    error: str
    queue: str | None
    not_before: dt.datetime
    error_code: str | None = None
    item: int | None = None

    @property
    def next_attempt(self) -> int:
        return self.attempt + 1


@dataclass(frozen=True, slots=True)
class StartChild:
    """Attempt ``attempt`` of a sub-workflow node's task starts the child run
    ``child_run_id`` (docs/architecture.md §4.15): the task is RUNNING, and the child
    run is written with it, in the same transaction, so each attempt has exactly one
    child whatever is retried or killed; the child starts under its own lock, no
    earlier than ``not_before`` (None: at once)."""

    task_id: str
    node_id: str
    attempt: int
    child_run_id: str
    child: ChildRun
    not_before: dt.datetime | None = None
    #: The MAP item whose attempt this is (None: a SUB_WORKFLOW node's own task). An
    #: item's child takes its input (and version) from the item's stored input, the
    #: inner node's spec rendered with ``item`` and ``index`` when the MAP began.
    item: int | None = None


@dataclass(frozen=True, slots=True)
class ResolveWait:
    """A WAITING node completed (timer fired, signal arrived) or failed (event timeout)."""

    task_id: str
    node_id: str
    state: TaskState
    output: Json = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class BufferSignal:
    """Keep a signal that no node waits for yet."""

    signal_id: str
    name: str
    payload: Json = None


@dataclass(frozen=True, slots=True)
class ConsumeSignal:
    """A buffered signal was used by the WAIT_FOR_EVENT node ``node_id``."""

    signal_id: str
    node_id: str
    #: Its name, for the run's history (the snapshot the history reads has no signals).
    name: str | None = None


@dataclass(frozen=True, slots=True)
class ReopenRun:
    """A retry: the run is RUNNING again on ``version``; the reset nodes' tasks are deleted."""

    version: int
    input: Json
    config: Json
    reset_nodes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CancelTasks:
    """Stop every task that is still active (``task_ids``): CANCELLED, with ``reason``."""

    reason: str
    task_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class FinishRun:
    status: RunStatus
    error: str | None = None
    output: Json = None


Action = (
    CreateTask
    | DispatchTask
    | CompleteTask
    | FailTask
    | RetryTask
    | StartChild
    | ResolveWait
    | BufferSignal
    | ConsumeSignal
    | ReopenRun
    | CancelTasks
    | FinishRun
    | StartItem
    | CancelItems
    | MapProgressed
)


@dataclass(frozen=True, slots=True)
class Transition:
    """What one event decided, and the snapshot after it."""

    actions: tuple[Action, ...]
    #: The run with every action applied (its outputs: those given, loaded or produced).
    run: Run
    #: Why the event changed nothing (a stale or duplicate report), else None.
    ignored: str | None = None
    #: For SignalReceived: a waiting node took the signal (False: it was buffered).
    signal_delivered: bool = False
