"""An in-memory shell around the machine: keeps one run between events.

It plays the engine's part without a database: persists what actions write
(task inputs and outputs, buffered signals, the run's status and output) and
builds a fresh Machine per event with an empty output cache, so outputs are
reachable only through the Store, exactly as after a reload from PostgreSQL.
Used by the unit and property tests, the benchmarks and ``make run``'s
simulation. Clock and ids are injected like everywhere in the core.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

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
    NodeState,
    ReopenRun,
    ResolveWait,
    RetryTask,
    Run,
    Signal,
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
    #: Node ids of every Store.outputs call, in order: lets tests see lazy loading.
    loads: list[list[str]] = field(default_factory=list)
    #: When set, every Store call raises it: a database outage in the middle of a decision.
    fault: Exception | None = None

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

    async def apply(self, event: Event, *, dag: WorkflowDAG | None = None) -> Transition:
        """Apply one event as the engine would; on error nothing is persisted."""
        self.run.outputs.clear()  # a reloaded snapshot caches nothing
        snapshot = _copy(self.run)
        machine = Machine(dag or self.dag, snapshot, Deps(self, self.now, self.new_id))
        transition = await machine.apply(event)
        if transition.ignored is None:
            self._persist(transition)
            snapshot.outputs.clear()
            self.run = snapshot
            if dag is not None:
                self.dag = dag
        return transition

    # -- Store ---------------------------------------------------------------

    async def outputs(self, node_ids: Collection[str]) -> Mapping[str, Json]:
        if self.fault is not None:
            raise self.fault
        self.loads.append(sorted(node_ids))
        return {n: self.tasks[n].output for n in node_ids if n in self.tasks}

    async def pending_signal(self, name: str, exclude: Collection[str]) -> Signal | None:
        if self.fault is not None:
            raise self.fault
        for signal, consumed in self.signals:
            if signal.name == name and not consumed and signal.signal_id not in exclude:
                return signal
        return None

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
                case FailTask():
                    record = self._task(action.node_id, action.task_id)
                    record.state, record.error = TaskState.FAILED, action.error
                case RetryTask():
                    record = self._task(action.node_id, action.task_id)
                    record.state, record.error = TaskState.PENDING, action.error
                    record.attempt = action.attempt + 1
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
                            record.state, record.error = TaskState.FAILED, action.reason
                case FinishRun():
                    self.output, self.error = action.output, action.error

    def _task(self, node_id: str, task_id: str) -> TaskRecord:
        record = self.tasks[node_id]
        if record.task_id != task_id:
            raise AssertionError(
                f"action for task {task_id} but node {node_id} has {record.task_id}"
            )
        return record


def _copy(run: Run) -> Run:
    nodes = {
        k: NodeState(v.task_id, v.state, v.attempt, v.branches, v.awaited_signal, v.error)
        for k, v in run.nodes.items()
    }
    return Run(run.run_id, run.workflow_id, run.version, run.status, run.input, run.config, nodes)


def sequential_ids(prefix: str = "t") -> Callable[[], str]:
    """Ids t0001, t0002, …: ordered like UUIDv7s, readable in tests."""
    counter = 0

    def new_id() -> str:
        nonlocal counter
        counter += 1
        return f"{prefix}{counter:04d}"

    return new_id
