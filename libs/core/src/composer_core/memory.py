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
    CancelItems,
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
    MapProgress,
    MapProgressed,
    MapState,
    Missing,
    NodeState,
    ReopenRun,
    ResolveWait,
    RetryTask,
    Run,
    Signal,
    StartChild,
    StartItem,
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
    #: The item tasks of MAP nodes: (node id, index) → task row.
    items: dict[tuple[str, int], TaskRecord] = field(default_factory=dict)
    #: Each MAP's stored progress (its own row's map_progress).
    progress: dict[str, MapProgress] = field(default_factory=dict)
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
        for _ in range(len(self.tasks) + 4):  # each round loads something new
            result = machine.apply(snapshot, event)
            if isinstance(result, Transition):
                break
            snapshot = self._load(snapshot, result)
        else:  # pragma: no cover - a machine that keeps asking is a bug
            raise AssertionError(f"the machine keeps asking for data: {result}")
        if result.ignored is None:
            self._persist(result)
            self.run = self._stored(dataclasses.replace(result.run, outputs={}, signals=None))
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
        items: dict[str, dict[int, NodeState]] = {}
        for node_id, index in missing.items:
            record = self.items[(node_id, index)]
            items.setdefault(node_id, {})[index] = self._item_state(record)
        item_outputs = {
            node_id: tuple(
                r.output if r.state is TaskState.COMPLETED else None
                for (n, _), r in sorted(self.items.items())
                if n == node_id
            )
            for node_id in missing.item_outputs
        }
        return snapshot.with_data(outputs, signals, items=items, item_outputs=item_outputs)

    def _item_state(self, record: TaskRecord) -> NodeState:
        return NodeState(record.task_id, record.state, record.attempt, error=record.error)

    def _stored(self, run: Run) -> Run:
        """The run as the database gives it back: a MAP with its stored progress and only
        its items in flight and as many of the next (never all)."""
        nodes = dict(run.nodes)
        for node_id, state in run.nodes.items():
            if state.map is None:
                continue
            progress = self.progress.get(node_id, state.map.progress)
            ahead = range(progress.next, progress.next + len(progress.in_flight) + 1)
            wanted = (*progress.in_flight, *ahead)
            loaded = {
                i: self._item_state(self.items[(node_id, i)])
                for i in wanted
                if (node_id, i) in self.items
            }
            nodes[node_id] = dataclasses.replace(state, map=MapState(progress, loaded))
        return dataclasses.replace(run, nodes=nodes, item_outputs={})

    # -- persisting ----------------------------------------------------------

    def _persist(self, transition: Transition) -> None:
        for action in transition.actions:
            match action:
                case CreateTask() if action.item is not None:
                    self.items[(action.node_id, action.item)] = TaskRecord(
                        action.task_id, action.node_id, action.state, input=action.input
                    )
                case DispatchTask() if action.item is not None:
                    self._item(action.node_id, action.item).not_before = action.not_before
                case StartItem():
                    self._item(action.node_id, action.item).not_before = self.now()
                case StartChild() if action.item is not None:
                    record = self._item(action.node_id, action.item)
                    record.state, record.attempt = TaskState.RUNNING, action.attempt
                    self.children.append(action)
                case CompleteTask() if action.item is not None:
                    record = self._item(action.node_id, action.item)
                    record.state, record.output, record.error = (
                        TaskState.COMPLETED,
                        action.output,
                        None,
                    )
                case FailTask() if action.item is not None:
                    record = self._item(action.node_id, action.item)
                    record.state, record.error = TaskState.FAILED, action.error
                case RetryTask() if action.item is not None:
                    record = self._item(action.node_id, action.item)
                    record.state, record.error = TaskState.PENDING, action.error
                    record.attempt, record.not_before = action.next_attempt, action.not_before
                case CancelItems():
                    for (node_id, _), record in self.items.items():
                        if node_id == action.node_id and record.state.is_active:
                            record.state, record.error = TaskState.CANCELLED, action.reason
                case MapProgressed():
                    self.progress[action.node_id] = action.progress
                case CreateTask():
                    if action.map_progress is not None:
                        self.progress[action.node_id] = action.map_progress
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
                        self.progress.pop(node_id, None)
                        for key in [k for k in self.items if k[0] == node_id]:
                            del self.items[key]
                    self.output, self.error = None, None
                case CancelTasks():
                    for record in self.tasks.values():
                        if record.state.is_active:
                            record.state, record.error = TaskState.CANCELLED, action.reason
                case FinishRun():
                    self.output, self.error = action.output, action.error
                case _:
                    assert_never(action)

    def _item(self, node_id: str, index: int) -> TaskRecord:
        return self.items[(node_id, index)]

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
