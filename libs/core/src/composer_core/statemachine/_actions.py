"""Actions: the changes a decision makes. The shell persists them in order;
``apply`` evolves the in-memory snapshot the same way."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from composer_core.model import NodeType, RunStatus, TaskState
from composer_core.statemachine._state import NodeState, Run
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

    def apply(self, run: Run) -> None:
        run.nodes[self.node_id] = NodeState(
            task_id=self.task_id,
            state=self.state,
            branches=self.branches,
            awaited_signal=self.awaited_signal,
            error=self.error,
        )


@dataclass(frozen=True, slots=True)
class DispatchTask:
    """Send a PENDING task attempt to its queue, no earlier than ``not_before``.

    ``input`` is None after a RetryTask: the shell re-sends the input stored on the task.
    """

    task_id: str
    node_id: str
    node_type: NodeType
    queue: str
    attempt: int
    not_before: dt.datetime
    input: Json = None
    timeout_seconds: float | None = None

    def apply(self, run: Run) -> None:
        pass


@dataclass(frozen=True, slots=True)
class CompleteTask:
    task_id: str
    node_id: str
    attempt: int
    output: Json = None

    def apply(self, run: Run) -> None:
        run.nodes[self.node_id].state = TaskState.COMPLETED


@dataclass(frozen=True, slots=True)
class FailTask:
    """An active task attempt failed for good."""

    task_id: str
    node_id: str
    attempt: int
    error: str
    error_code: str | None = None

    def apply(self, run: Run) -> None:
        node = run.nodes[self.node_id]
        node.state, node.error = TaskState.FAILED, self.error


@dataclass(frozen=True, slots=True)
class RetryTask:
    """A failed attempt will be retried: the task returns to PENDING with attempt+1."""

    task_id: str
    node_id: str
    attempt: int  # the attempt that failed
    error: str
    error_code: str | None = None

    def apply(self, run: Run) -> None:
        node = run.nodes[self.node_id]
        node.state, node.attempt = TaskState.PENDING, self.attempt + 1


@dataclass(frozen=True, slots=True)
class ResolveWait:
    """A WAITING node completed (timer fired, signal arrived) or failed (event timeout)."""

    task_id: str
    node_id: str
    state: TaskState
    output: Json = None
    error: str | None = None

    def apply(self, run: Run) -> None:
        node = run.nodes[self.node_id]
        node.state, node.awaited_signal, node.error = self.state, None, self.error


@dataclass(frozen=True, slots=True)
class BufferSignal:
    """Keep a signal that no node waits for yet."""

    signal_id: str
    name: str
    payload: Json = None

    def apply(self, run: Run) -> None:
        pass


@dataclass(frozen=True, slots=True)
class ConsumeSignal:
    """A buffered signal was used by the WAIT_FOR_EVENT node ``node_id``."""

    signal_id: str
    node_id: str

    def apply(self, run: Run) -> None:
        pass


@dataclass(frozen=True, slots=True)
class ReopenRun:
    """A retry: the run is RUNNING again on ``version``; the reset nodes' tasks are deleted."""

    version: int
    input: Json
    config: Json
    reset_nodes: tuple[str, ...]

    def apply(self, run: Run) -> None:
        for node_id in self.reset_nodes:
            run.nodes.pop(node_id, None)
            run.outputs.pop(node_id, None)
        run.version, run.input, run.config = self.version, self.input, self.config
        run.status = RunStatus.RUNNING


@dataclass(frozen=True, slots=True)
class CancelTasks:
    """Fail every task that is still active (``task_ids``), with ``reason``."""

    reason: str
    task_ids: tuple[str, ...]

    def apply(self, run: Run) -> None:
        for node in run.nodes.values():
            if node.state.is_active:
                node.state, node.error, node.awaited_signal = TaskState.FAILED, self.reason, None


@dataclass(frozen=True, slots=True)
class FinishRun:
    status: RunStatus
    error: str | None = None
    output: Json = None

    def apply(self, run: Run) -> None:
        run.status = self.status


Action = (
    CreateTask
    | DispatchTask
    | CompleteTask
    | FailTask
    | RetryTask
    | ResolveWait
    | BufferSignal
    | ConsumeSignal
    | ReopenRun
    | CancelTasks
    | FinishRun
)


@dataclass(slots=True)
class Transition:
    """What one event decided."""

    actions: list[Action]
    #: Why the event changed nothing (a stale or duplicate report), else None.
    ignored: str | None = None
    #: For SignalReceived: a waiting node took the signal (False: it was buffered).
    signal_delivered: bool = False
