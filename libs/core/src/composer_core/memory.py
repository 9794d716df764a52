"""An in-memory shell around the machine: keeps one run between events.

It plays the engine's part without a database: persists what actions write
(task inputs and outputs, buffered signals, the run's status and output) and
hands the machine a snapshot with no outputs and no signals loaded, then
answers its ``Missing`` the way the engine does — exactly as after a reload
from PostgreSQL. Used by the unit and property tests, the benchmarks and
``make simulate``. Clock and ids are injected like everywhere in the core.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import assert_never

from composer_core.model import RunStatus, TaskState, WorkflowDAG
from composer_core.statemachine import (
    BufferSignal,
    CancelTasks,
    CompleteTask,
    ConsumeSignal,
    CreateTask,
    Deps,
    DispatchTask,
    Event,
    FailTask,
    FinishRun,
    Machine,
    Missing,
    ReopenRun,
    ResolveWait,
    RetryTask,
    Run,
    Signal,
    StartChild,
    Transition,
)
from composer_core.templates import Json


@dataclass(slots=True)
class TaskRecord:
    """What the database would hold for one task row."""

    task_id: str
    node_id: str
    state: TaskState
    attempt: int = 0
    input: Json = None
    output: Json = None
    error: str | None = None
    wake_at: dt.datetime | None = None
    not_before: dt.datetime | None = None


@dataclass(slots=True)
class MemoryRun:
    """One run and everything persisted about it."""

    dag: WorkflowDAG
    run: Run
    now: Callable[[], dt.datetime]
    new_id: Callable[[], str]
    tasks: dict[str, TaskRecord] = field(default_factory=dict)  # node id → task row
    signals: list[tuple[Signal, bool]] = field(default_factory=list)  # (signal, consumed)
    output: Json = None
    error: str | None = None
    #: Node ids of every outputs load, in order: lets tests see what the machine asked for.
    loads: list[list[str]] = field(default_factory=list)
    #: How many times the signals were loaded.
    signal_loads: int = 0
    #: The child runs sub-workflow nodes started, in order (the engine inserts them).
    children: list[StartChild] = field(default_factory=list)

    @classmethod
    def create(
        cls,
        dag: WorkflowDAG,
        *,
        run_id: str = "run-1",
        input: Json = None,
        config: Json = None,
        now: Callable[[], dt.datetime],
        new_id: Callable[[], str],
    ) -> MemoryRun:
        run = Run(run_id, dag.workflow_id, dag.version, RunStatus.RUNNING, input, config)
        return cls(dag, run, now, new_id)

    def apply(self, event: Event, *, dag: WorkflowDAG | None = None) -> Transition:
        """Apply one event as the engine would; on error nothing is persisted."""
        machine = Machine(dag or self.dag, Deps(self.now(), self.new_id))
        snapshot = self.run  # stored without outputs or signals, as a reload gives it
        for _ in range(len(self.tasks) + 2):  # each round loads something new
            result = machine.apply(snapshot, event)
            if isinstance(result, Transition):
                break
            snapshot = self._load(snapshot, result)
        else:  # pragma: no cover - a machine that keeps asking is a bug
            raise AssertionError(f"the machine keeps asking for data: {result}")
        if result.ignored is None:
            self._persist(result)
            self.run = dataclasses.replace(result.run, outputs={}, signals=None)
            if dag is not None:
                self.dag = dag
        return result

    def _load(self, snapshot: Run, missing: Missing) -> Run:
        outputs: dict[str, Json] = {}
        if missing.outputs:
            ids = sorted(missing.outputs)
            self.loads.append(ids)
            outputs = {n: self.tasks[n].output if n in self.tasks else None for n in ids}
        signals = None
        if missing.signals:
            self.signal_loads += 1
            signals = tuple(s for s, consumed in self.signals if not consumed)
        return snapshot.with_data(outputs, signals)

    # -- persisting ----------------------------------------------------------

    def _persist(self, transition: Transition) -> None:
        for action in transition.actions:
            match action:
                case CreateTask():
                    if action.node_id in self.tasks:
                        raise AssertionError(f"second task for node {action.node_id}")
                    self.tasks[action.node_id] = TaskRecord(
                        action.task_id,
                        action.node_id,
                        action.state,
                        input=action.input,
                        output=action.output,
                        error=action.error,
                        wake_at=action.wake_at,
                    )
                case DispatchTask():
                    self._task(action.node_id, action.task_id).not_before = action.not_before
                case CompleteTask():
                    record = self._task(action.node_id, action.task_id)
                    record.state, record.output = TaskState.COMPLETED, action.output
                    record.error = None  # an earlier attempt's error goes (complete_tasks)
                case FailTask():
                    record = self._task(action.node_id, action.task_id)
                    record.state, record.error = TaskState.FAILED, action.error
                case RetryTask():
                    record = self._task(action.node_id, action.task_id)
                    record.state, record.error = TaskState.PENDING, action.error
                    record.attempt, record.not_before = action.next_attempt, action.not_before
                case StartChild():
                    record = self._task(action.node_id, action.task_id)
                    record.state, record.attempt = TaskState.RUNNING, action.attempt
                    self.children.append(action)
                case ResolveWait():
                    record = self._task(action.node_id, action.task_id)
                    record.state, record.output, record.error = (
                        action.state,
                        action.output,
                        action.error,
                    )
                case BufferSignal():
                    self.signals.append(
                        (Signal(action.signal_id, action.name, action.payload), False)
                    )
                case ConsumeSignal():
                    if not any(s.signal_id == action.signal_id and not c for s, c in self.signals):
                        raise AssertionError(
                            f"signal {action.signal_id} is not pending: consumed twice?"
                        )
                    self.signals = [
                        (s, consumed or s.signal_id == action.signal_id)
                        for s, consumed in self.signals
                    ]
                case ReopenRun():
                    for node_id in action.reset_nodes:
                        self.tasks.pop(node_id, None)
                    self.output, self.error = None, None
                case CancelTasks():
                    for record in self.tasks.values():
                        if record.state.is_active:
                            record.state, record.error = TaskState.CANCELLED, action.reason
                case FinishRun():
                    self.output, self.error = action.output, action.error
                case _:
                    assert_never(action)

    def _task(self, node_id: str, task_id: str) -> TaskRecord:
        record = self.tasks[node_id]
        if record.task_id != task_id:
            raise AssertionError(
                f"action for task {task_id} but node {node_id} has {record.task_id}"
            )
        return record


def sequential_ids(prefix: str = "t") -> Callable[[], str]:
    """Ids t0001, t0002, …: ordered like UUIDv7s, readable in tests."""
    counter = 0

    def new_id() -> str:
        nonlocal counter
        counter += 1
        return f"{prefix}{counter:04d}"

    return new_id
