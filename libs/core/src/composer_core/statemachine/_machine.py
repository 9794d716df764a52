"""The state machine: one event and a run snapshot in, a Transition out.

A pure function of its inputs: it reads no clock, makes no ids and does no
I/O. ``Deps`` brings the time (the database clock of the event's transaction)
and the id generator. When a template reads an output the snapshot lacks, or a
WAIT_FOR_EVENT node needs buffered signals that were not loaded, ``apply``
returns ``Missing`` instead of a Transition: the caller loads exactly that and
applies the event again on the extended snapshot. The caller serializes events
per run (the engine holds the run's row lock) and persists the actions in one
transaction.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from enum import Enum
from typing import assert_never

from composer_core.errors import (
    InputTooLarge,
    InvalidRequest,
    RunActive,
    RunFinished,
    TemplateError,
)
from composer_core.kinds import ChildKind, ChildRun, WaitKind, kind_of
from composer_core.kinds.map import DEFAULT_MAX_ITEMS, fails_fast
from composer_core.kinds.map import max_parallel as max_parallel_of
from composer_core.model import Node, NodeType, RenderedKeys, RunStatus, TaskState, WorkflowDAG
from composer_core.statemachine._actions import (
    Action,
    BufferSignal,
    CancelItems,
    CancelTasks,
    CompleteTask,
    ConsumeSignal,
    CreateTask,
    DispatchTask,
    FailTask,
    FinishRun,
    MapProgressed,
    ReopenRun,
    ResolveWait,
    RetryTask,
    StartChild,
    StartItem,
    Transition,
)
from composer_core.statemachine._events import (
    Event,
    NodeCompleted,
    NodeFailed,
    RunCancelled,
    RunResumed,
    RunRetried,
    RunStarted,
    SignalReceived,
    TimerFired,
)
from composer_core.statemachine._state import (
    MapProgress,
    MapState,
    Missing,
    NodeState,
    Run,
    Signal,
    _failed,
)
from composer_core.templates import Budget, Json, spending


@dataclass(frozen=True, slots=True)
class InputLimit:
    """The largest a node's input may be rendered to, as compact UTF-8 JSON: a node
    whose input would be larger fails for good as it is rendered, with nothing of it
    stored (docs/architecture.md §6.2). The engine passes its setting's value down."""

    max_bytes: int
    #: The failed node's error code (the engine's INPUT_TOO_LARGE).
    code: str
    #: The failed node's error, for a size in bytes; ``exact`` False: rendering stopped
    #: as soon as the input was certain to be over, and it is at least that large.
    describe: Callable[[int, bool], str]


@dataclass(frozen=True, slots=True)
class Deps:
    #: The time of the decision: the database clock of the event's transaction.
    now: dt.datetime
    new_id: Callable[[], str]
    #: The node input limit (None: none, as in a test).
    input_limit: InputLimit | None = None
    #: The most items a MAP node may take, whatever its max_items (COMPOSER_MAP_MAX_ITEMS).
    map_max_items: int = DEFAULT_MAX_ITEMS


class _Readiness(Enum):
    WAITING = "waiting"  # an incoming edge is unresolved
    RUN = "run"  # all resolved, at least one active
    SKIP = "skip"  # all resolved, none active


class _Needs(Exception):
    """Unwinds a decision that needs data it was not given (never leaves ``apply``)."""

    def __init__(self, missing: Missing) -> None:
        self.missing = missing


class _Draft:
    """The run as the decision goes: the snapshot's values in fresh containers, so
    emitting an action never touches the caller's snapshot. Frozen NodeStates are
    replaced, never changed; ``freeze`` makes the Transition's new Run."""

    __slots__ = (
        "config",
        "input",
        "item_outputs",
        "nodes",
        "outputs",
        "run_id",
        "signals",
        "status",
        "version",
        "workflow_id",
    )

    def __init__(self, run: Run) -> None:
        self.run_id = run.run_id
        self.workflow_id = run.workflow_id
        self.version = run.version
        self.status = run.status
        self.input = run.input
        self.config = run.config
        self.nodes: dict[str, NodeState] = dict(run.nodes)
        self.outputs: dict[str, Json] = dict(run.outputs)
        self.signals: list[Signal] | None = None if run.signals is None else list(run.signals)
        self.item_outputs = run.item_outputs

    @property
    def is_terminal(self) -> bool:
        return self.status.is_terminal

    def active_nodes(self) -> list[str]:
        return [node_id for node_id, n in self.nodes.items() if n.state.is_active]

    def failed_nodes(self) -> list[str]:
        return _failed(self.nodes)

    def evolve(self, action: Action) -> None:
        """Apply one action, as persisting it will change the stored run."""
        nodes = self.nodes
        match action:
            case CreateTask() if action.item is not None:
                self._set_item(
                    action.node_id,
                    action.item,
                    NodeState(action.task_id, action.state, 0, error=action.error),
                )
            case CreateTask() if action.map_progress is not None:
                nodes[action.node_id] = NodeState(
                    action.task_id, action.state, 0, map=MapState(action.map_progress)
                )
            case CreateTask():
                nodes[action.node_id] = NodeState(
                    action.task_id,
                    action.state,
                    0,
                    action.branches,
                    action.awaited_signal,
                    action.error,
                )
            case DispatchTask() | MapProgressed():
                pass
            case StartItem():
                progress = self._map(action.node_id).progress
                self._set_progress(
                    action.node_id,
                    MapProgress(
                        progress.total,
                        action.item + 1,
                        progress.completed,
                        progress.failed,
                        (*progress.in_flight, action.item),
                    ),
                )
            case CompleteTask() | FailTask() if action.item is not None:
                done = isinstance(action, CompleteTask)
                item = self._map(action.node_id).items[action.item]
                self._set_item(
                    action.node_id,
                    action.item,
                    NodeState(
                        item.task_id,
                        TaskState.COMPLETED if done else TaskState.FAILED,
                        item.attempt,
                        error=action.error if isinstance(action, FailTask) else None,
                    ),
                )
                p = self._map(action.node_id).progress
                self._set_progress(
                    action.node_id,
                    MapProgress(
                        p.total,
                        p.next,
                        p.completed + done,
                        p.failed + (not done),
                        tuple(i for i in p.in_flight if i != action.item),
                    ),
                )
            case RetryTask() if action.item is not None:
                item = self._map(action.node_id).items[action.item]
                self._set_item(
                    action.node_id,
                    action.item,
                    NodeState(item.task_id, TaskState.PENDING, action.next_attempt),
                )
            case CancelItems():
                state = self._map(action.node_id)
                for index, item in state.items.items():
                    if item.state.is_active:
                        self._set_item(
                            action.node_id,
                            index,
                            NodeState(
                                item.task_id, TaskState.CANCELLED, item.attempt, error=action.reason
                            ),
                        )
                p = self._map(action.node_id).progress
                self._set_progress(
                    action.node_id, MapProgress(p.total, p.total, p.completed, p.failed, ())
                )
            case CompleteTask():
                old = nodes[action.node_id]
                nodes[action.node_id] = NodeState(
                    old.task_id, TaskState.COMPLETED, old.attempt, old.branches
                )
            case FailTask():
                old = nodes[action.node_id]
                nodes[action.node_id] = NodeState(
                    old.task_id, TaskState.FAILED, old.attempt, old.branches, None, action.error
                )
            case RetryTask():
                old = nodes[action.node_id]
                nodes[action.node_id] = NodeState(
                    old.task_id, TaskState.PENDING, action.next_attempt, old.branches
                )
            case StartChild() if action.item is not None:
                item = self._map(action.node_id).items[action.item]
                self._set_item(
                    action.node_id,
                    action.item,
                    NodeState(item.task_id, TaskState.RUNNING, action.attempt),
                )
            case StartChild():
                old = nodes[action.node_id]
                nodes[action.node_id] = NodeState(
                    old.task_id, TaskState.RUNNING, action.attempt, old.branches
                )
            case ResolveWait():
                old = nodes[action.node_id]
                nodes[action.node_id] = NodeState(
                    old.task_id,
                    action.state,
                    old.attempt,
                    old.branches,
                    None,
                    action.error,
                    old.map,
                )
            case BufferSignal():
                if self.signals is not None:
                    self.signals.append(Signal(action.signal_id, action.name, action.payload))
            case ConsumeSignal():
                if self.signals is not None:
                    self.signals = [s for s in self.signals if s.signal_id != action.signal_id]
            case ReopenRun():
                for node_id in action.reset_nodes:
                    nodes.pop(node_id, None)
                    self.outputs.pop(node_id, None)
                self.version, self.input, self.config = action.version, action.input, action.config
                self.status = RunStatus.RUNNING
            case CancelTasks():
                for node_id, old in nodes.items():
                    if old.state.is_active:
                        nodes[node_id] = NodeState(
                            old.task_id,
                            TaskState.CANCELLED,
                            old.attempt,
                            old.branches,
                            None,
                            action.reason,
                        )
            case FinishRun():
                self.status = action.status
            case _:
                assert_never(action)

    def _map(self, node_id: str) -> MapState:
        state = self.nodes[node_id].map
        assert state is not None  # only a MAP's items are acted on
        return state

    def _set_item(self, node_id: str, index: int, item: NodeState) -> None:
        old = self.nodes[node_id]
        state = self._map(node_id)
        self.nodes[node_id] = replace(
            old, map=MapState(state.progress, {**state.items, index: item})
        )

    def _set_progress(self, node_id: str, progress: MapProgress) -> None:
        old = self.nodes[node_id]
        self.nodes[node_id] = replace(old, map=MapState(progress, self._map(node_id).items))

    def freeze(self) -> Run:
        return Run(
            self.run_id,
            self.workflow_id,
            self.version,
            self.status,
            self.input,
            self.config,
            self.nodes,
            self.outputs,
            None if self.signals is None else tuple(self.signals),
            self.item_outputs,
        )


class Machine:
    """Decides one event for runs of one definition version. Cheap to make; the
    engine makes one per event. Not thread-safe.

    Every template the decision evaluates — node inputs, conditions, the run's
    output — spends from one ``budget`` (templates/_budget.py; a fresh one when none
    is given), and so do the decisions again after a ``Missing``: they redo that
    work. A template past the budget fails its node (or the run, for the output);
    past the budget's pause mark, ``apply`` raises WorkPaused and decides nothing.
    """

    def __init__(self, dag: WorkflowDAG, deps: Deps, *, budget: Budget | None = None) -> None:
        self._dag = dag
        self._deps = deps
        self._now = deps.now
        self._budget = Budget() if budget is None else budget

    def apply(self, run: Run, event: Event) -> Transition | Missing:
        """Decide one event on ``run``.

        Returns the Transition (the actions to persist, in order, and the run
        after them), or Missing when the snapshot lacks outputs or signals the
        decision reads: load them and apply again on ``run.with_data(...)``.
        Raises InvalidRequest, RunFinished or RunActive when the event cannot
        apply (nothing to persist), and WorkPaused when the templates passed the
        budget's pause mark (decide again on a budget without one). Any other
        exception is a bug.
        """
        with spending(self._budget):
            return self._apply(run, event)

    def _apply(self, run: Run, event: Event) -> Transition | Missing:
        self._run = _Draft(run)
        self._actions: list[Action] = []
        self._ignored: str | None = None
        self._delivered = False
        self._bound: dict[str, object] = {}
        self._bound_tasks: dict[str, object] = {}
        self._tasks_root: object | None = None
        #: MAP nodes whose progress this decision moved (stored once, at its end).
        self._touched: set[str] = set()
        #: The outputs of MAP items this decision completed (not in the database yet).
        self._produced: dict[tuple[str, int], Json] = {}
        try:
            self._decide(event)
        except _Needs as needs:
            return needs.missing
        return Transition(
            tuple(self._actions),
            self._run.freeze() if self._ignored is None else run,
            self._ignored,
            self._delivered,
        )

    def _decide(self, event: Event) -> None:
        match event:
            case RunStarted():
                self._on_run_started(event)
            case NodeCompleted():
                self._on_node_completed(event)
            case NodeFailed():
                self._on_node_failed(event)
            case TimerFired():
                self._on_timer_fired(event)
            case SignalReceived():
                self._on_signal_received(event)
            case RunRetried():
                self._on_run_retried(event)
            case RunCancelled():
                self._on_run_cancelled(event)
            case RunResumed():
                self._on_run_resumed()
            case _:
                assert_never(event)
        if self._ignored is None:
            for node_id in sorted(self._touched):
                state = self._run.nodes[node_id]
                if state.map is not None:
                    self._emit(MapProgressed(state.task_id, node_id, state.map.progress))
            self._finish_if_done()

    # -- bookkeeping -------------------------------------------------------

    def _emit(self, action: Action) -> None:
        self._actions.append(action)
        self._run.evolve(action)

    def _ignore(self, reason: str) -> None:
        self._ignored = reason

    # -- events ------------------------------------------------------------

    def _on_run_started(self, event: RunStarted) -> None:
        if self._run.is_terminal:
            raise RunFinished(f"run {self._run.run_id} is {self._run.status}")
        if self._run.nodes:
            raise InvalidRequest(f"run {self._run.run_id} has already started")
        self._begin(self._dag.start_node(event.start_node))

    def _on_node_completed(self, event: NodeCompleted) -> None:
        state = self._run.nodes.get(event.node_id)
        if state is not None and state.map is not None and state.task_id != event.task_id:
            self._on_item_report(event, state.map)
            return
        if (
            state is None
            or not state.matches(event.task_id, event.attempt)
            or not state.state.is_with_worker
        ):
            self._ignore(
                f"stale or duplicate completion of {event.node_id} attempt {event.attempt}"
            )
            return
        self._emit(CompleteTask(event.task_id, event.node_id, event.attempt, event.output))
        if self._run.is_terminal:
            return  # finished meanwhile (a routing failure elsewhere): keep the output, go no further
        self._advance_from(event.node_id, event.output)

    def _on_node_failed(self, event: NodeFailed) -> None:
        state = self._run.nodes.get(event.node_id)
        if state is not None and state.map is not None and state.task_id != event.task_id:
            self._on_item_report(event, state.map)
            return
        if (
            state is None
            or not state.matches(event.task_id, event.attempt)
            or not state.state.is_with_worker
        ):
            self._ignore(f"stale or duplicate failure of {event.node_id} attempt {event.attempt}")
            return
        node = self._dag.node(event.node_id)
        next_attempt = event.attempt + 1
        if (
            node is None
            or event.permanent
            or self._run.is_terminal
            or next_attempt >= (self._dag.max_attempts(node.id) or 1)
        ):
            self._emit(
                FailTask(event.task_id, event.node_id, event.attempt, event.error, event.error_code)
            )
            return
        kind = kind_of(node.type)
        child: ChildRun | None = None
        if isinstance(kind, ChildKind):  # its next attempt is a new child, rendered now
            try:
                child = kind.child(node, self)
            except (InputTooLarge, TemplateError, ValueError) as exc:
                self._emit(
                    FailTask(
                        event.task_id,
                        event.node_id,
                        event.attempt,
                        f"{event.error}; its retry could not start: {exc}",
                        event.error_code,
                    )
                )
                return
        not_before = self._now + dt.timedelta(seconds=node.retry_policy.delay(next_attempt))
        self._emit(
            RetryTask(
                task_id=event.task_id,
                node_id=event.node_id,
                node_type=node.type,
                attempt=event.attempt,
                error=event.error,
                queue=None if child is not None else self._queue(node),
                not_before=not_before,
                error_code=event.error_code,
            )
        )
        if child is not None:
            self._emit(
                StartChild(
                    event.task_id,
                    event.node_id,
                    next_attempt,
                    self._deps.new_id(),
                    child,
                    not_before if not_before > self._now else None,
                )
            )

    def _on_timer_fired(self, event: TimerFired) -> None:
        state = self._run.nodes.get(event.node_id)
        if (
            state is None
            or state.task_id != event.task_id
            or state.state is not TaskState.WAITING
            or self._run.is_terminal
        ):
            self._ignore(f"timer for {event.node_id} is no longer pending")
            return
        if self._run.status is RunStatus.PAUSED:
            # kept: its wake_at stays, and it fires once the run is resumed
            self._ignore(
                f"run {self._run.run_id} is paused: the timer of {event.node_id} fires at its resume"
            )
            return
        node = self._dag.node(event.node_id)
        kind = None if node is None else kind_of(node.type)
        if not isinstance(kind, WaitKind):  # a timer only ever fires for a wait
            self._ignore(f"timer for {event.node_id} fired, but it is no wait node")
            return
        kind.on_timer(event.node_id, event.task_id, state.awaited_signal, self)

    def _on_signal_received(self, event: SignalReceived) -> None:
        if not event.name or not event.name.strip():
            raise InvalidRequest("a signal needs a name")
        if self._run.is_terminal:
            raise RunFinished(
                f"run {self._run.run_id} is {self._run.status}; signal {event.name!r} not delivered"
            )
        # a paused run keeps the signal; its resume gives it to the node that waits
        waiter = None if self._run.status is RunStatus.PAUSED else self._oldest_waiter(event.name)
        if waiter is None:
            self._emit(BufferSignal(self._deps.new_id(), event.name, event.payload))
            return
        state = self._run.nodes[waiter]
        output = _signal_output(event.payload)
        self._emit(ResolveWait(state.task_id, waiter, TaskState.COMPLETED, output))
        self._delivered = True
        self._advance_from(waiter, output)

    def _on_run_retried(self, event: RunRetried) -> None:
        if self._run.status is RunStatus.PAUSED:
            raise RunActive(
                f"run {self._run.run_id} is PAUSED, not finished: resume it, or cancel it "
                "before retrying"
            )
        active = self._run.active_nodes()
        if active:
            raise RunActive(
                f"run {self._run.run_id} has {len(active)} active task(s) ({', '.join(sorted(active))}); "
                "cancel it before retrying"
            )
        restart = self._dag.node(event.from_node)
        if restart is None:
            raise InvalidRequest(
                f"node {event.from_node!r} is not in workflow {self._dag.workflow_id!r} "
                f"version {self._dag.version}"
            )
        reset = {restart.id, *self._dag.descendants(restart.id)}
        # Nodes the target version no longer has cannot be routed: forget them too.
        reset |= {node_id for node_id in self._run.nodes if node_id not in self._dag}
        reset &= self._run.nodes.keys()
        self._emit(
            ReopenRun(
                version=self._dag.version,
                input=self._run.input if event.input is None else event.input,
                config=self._run.config if event.config is None else event.config,
                reset_nodes=tuple(sorted(reset)),
            )
        )
        self._bound.clear()
        self._bound_tasks.clear()
        self._tasks_root = None
        self._begin(restart)

    def _on_run_cancelled(self, event: RunCancelled) -> None:
        if self._run.status is RunStatus.CANCELLED:
            # a cancel sent again (its answer was lost) answers as the first did
            self._ignore(f"run {self._run.run_id} is already CANCELLED")
            return
        if self._run.is_terminal:
            raise RunFinished(f"run {self._run.run_id} is already {self._run.status}")
        reason = event.reason.strip() or "cancelled"
        for node_id, state in list(self._run.nodes.items()):
            if state.map is not None and state.state.is_active:
                self._emit(CancelItems(node_id, reason))
        active = tuple(self._run.nodes[n].task_id for n in self._run.active_nodes())
        self._emit(CancelTasks(reason, active))
        self._emit(FinishRun(RunStatus.CANCELLED, error=reason))

    def _on_run_resumed(self) -> None:
        """Apply what a pause kept: each waiting node, oldest first, takes the oldest
        buffered signal it waits for (as if it had arrived now); the run's end, if
        nothing is left, follows in ``_decide``."""
        if self._run.is_terminal:
            raise RunFinished(f"run {self._run.run_id} is {self._run.status}; nothing to resume")
        waiting = sorted(
            (state.task_id, node_id)
            for node_id, state in self._run.nodes.items()
            if state.state is TaskState.WAITING and state.awaited_signal is not None
        )
        for task_id, node_id in waiting:
            state = self._run.nodes[node_id]
            if state.state is not TaskState.WAITING or state.awaited_signal is None:
                continue  # resolved by a signal an earlier one's successors did not take
            signal = self.buffered(state.awaited_signal)
            node = self._dag.node(node_id)
            if signal is None or node is None:
                continue
            self.consume(signal, node)
            self.wake(node_id, task_id, _signal_output(signal.payload))

    def _finish_if_done(self) -> None:
        """Finish the run once nothing is active: FAILED if a node failed, else SUCCEEDED.
        A paused run does not finish by itself: its resume finishes it."""
        if self._run.is_terminal or self._run.status is RunStatus.PAUSED:
            return
        if self._run.active_nodes():
            return
        failed = self._run.failed_nodes()
        if failed:
            first = self._run.nodes[failed[0]]
            how = "was cancelled" if first.state is TaskState.CANCELLED else "failed"
            more = f" (and {len(failed) - 1} more failed node(s))" if len(failed) > 1 else ""
            self._emit(
                FinishRun(RunStatus.FAILED, error=f"node {failed[0]} {how}: {first.error}{more}")
            )
            return
        template = self._dag.output_template
        if template is None:
            self._emit(FinishRun(RunStatus.SUCCEEDED))
            return
        try:
            self.ensure_outputs(self._dag.output_refs)
            output = template.evaluate(self.activation())
        except TemplateError as exc:
            self._emit(FinishRun(RunStatus.FAILED, error=f"run output: {exc}"))
            return
        self._emit(FinishRun(RunStatus.SUCCEEDED, output=output))

    # -- routing -----------------------------------------------------------

    def _begin(self, node: Node) -> None:
        """Activate ``node`` unconditionally (the start, or a retry's restart node)."""
        self._propagate(self._activate(node))

    def _advance_from(self, node_id: str, output: Json) -> None:
        self._set_output(node_id, output)
        self._propagate(self._dag.successors(node_id))

    def _propagate(self, candidates: Iterable[Node]) -> None:
        """Walk forward, running or skipping each node whose incoming edges are all resolved.

        Skips cascade down untaken branches; control nodes and satisfied waits
        resolve inline and keep walking; worker nodes and real waits stop it.
        """
        queue = list(candidates)
        while queue:
            node = queue.pop(0)
            if node.id in self._run.nodes:
                continue
            readiness = self._readiness(node)
            if readiness is _Readiness.SKIP:
                self._emit(CreateTask(self._deps.new_id(), node.id, node.type, TaskState.SKIPPED))
                queue.extend(self._dag.successors(node.id))
            elif readiness is _Readiness.RUN:
                queue.extend(self._activate(node))

    def _readiness(self, node: Node) -> _Readiness:
        """The one readiness rule.

        An edge is active when its source completed (and, out of a SWITCH, was
        selected); inactive when its source was skipped or the SWITCH chose
        otherwise; unresolved while its source is unreached, active or failed.
        """
        any_active = False
        for edge in self._dag.incoming(node.id):
            source = self._run.nodes.get(edge.source)
            if source is None:
                return _Readiness.WAITING
            if source.state is TaskState.SKIPPED:
                continue
            if source.state is not TaskState.COMPLETED:
                return _Readiness.WAITING
            if source.branches is None or edge.target in source.branches:
                any_active = True
        return _Readiness.RUN if any_active else _Readiness.SKIP

    def _activate(self, node: Node) -> list[Node]:
        """Start a ready node, as its kind does; return the nodes to look at next."""
        return kind_of(node.type).activate(node, self)

    # -- what a kind may do (composer_core.kinds.Decision) ---------------------

    @property
    def now(self) -> dt.datetime:
        return self._now

    @property
    def dag(self) -> WorkflowDAG:
        return self._dag

    def new_id(self) -> str:
        return self._deps.new_id()

    def predecessor_output(self, node: Node) -> Json:
        for edge in self._dag.incoming(node.id):
            source = self._run.nodes.get(edge.source)
            if (
                source is not None
                and source.state is TaskState.COMPLETED
                and edge.source in self._run.outputs
            ) and (source.branches is None or node.id in source.branches):
                return self._run.outputs[edge.source]
        return {}

    def dispatch(self, node: Node, input: Json) -> None:
        """Create a worker node's task with its resolved input and dispatch it.

        The input is resolved once, by its kind, and stored on the task: a retry reuses
        it, and a worker never sees a template.
        """
        keys = None
        line = self._dag.node_line(node.id)
        # the activation (the run's input converted for CEL) only for keys to render
        if line is not None and line.templated:
            try:
                keys = self._dag.render_keys(node.id, self.activation())
            except TemplateError as exc:
                self.fail(node, f"limit key of {node.id} could not be resolved: {exc}")
                return
        task_id = self._deps.new_id()
        self._emit(
            CreateTask(task_id, node.id, node.type, TaskState.PENDING, input=input, keys=keys)
        )
        self._emit(
            DispatchTask(
                task_id=task_id,
                node_id=node.id,
                node_type=node.type,
                queue=self._queue(node),
                not_before=self._now,
            )
        )

    def _queue(self, node: Node) -> str:
        queue = self._dag.queue(node.id)
        if queue is None:  # pragma: no cover - only worker nodes are dispatched
            raise InvalidRequest(f"node {node.id} ({node.type}) has no queue")
        return queue

    def park(
        self,
        node: Node,
        input: Json,
        *,
        task_id: str,
        wake_at: dt.datetime | None,
        awaited_signal: str | None = None,
    ) -> None:
        self._emit(
            CreateTask(
                task_id,
                node.id,
                node.type,
                TaskState.WAITING,
                input=input,
                wake_at=wake_at,
                awaited_signal=awaited_signal,
            )
        )

    def complete(
        self,
        node: Node,
        output: Json,
        *,
        task_id: str | None = None,
        input: Json = None,
        branches: tuple[str, ...] | None = None,
    ) -> list[Node]:
        self._emit(
            CreateTask(
                self._deps.new_id() if task_id is None else task_id,
                node.id,
                node.type,
                TaskState.COMPLETED,
                input=input,
                output=output,
                branches=branches,
            )
        )
        self._set_output(node.id, output)
        return list(self._dag.successors(node.id))

    def wake(self, node_id: str, task_id: str, output: Json) -> None:
        self._emit(ResolveWait(task_id, node_id, TaskState.COMPLETED, output))
        self._advance_from(node_id, output)

    def time_out(self, node_id: str, task_id: str, error: str) -> None:
        self._emit(ResolveWait(task_id, node_id, TaskState.FAILED, error=error))

    def fail(self, node: Node, error: str, code: str | None = None) -> None:
        """A node that cannot even start (bad input, broken condition) is a FAILED task:
        the run fails once nothing else is active, instead of the event being retried forever."""
        self._emit(
            CreateTask(
                self._deps.new_id(),
                node.id,
                node.type,
                TaskState.FAILED,
                error=error,
                error_code=code,
            )
        )

    def start_child(self, node: Node, child: ChildRun) -> None:
        """A sub-workflow node's task, RUNNING from the start: its first attempt's child
        run is started by the engine in the same transaction (StartChild). The task's
        input is the child's."""
        task_id = self._deps.new_id()
        self._emit(CreateTask(task_id, node.id, node.type, TaskState.PENDING, input=child.input))
        self._emit(StartChild(task_id, node.id, 0, self._deps.new_id(), child))

    def fail_too_large(self, node: Node, exc: InputTooLarge) -> None:
        """Its input is over the node input limit: failed for good, and none of it is
        kept (no worker could be given it)."""
        limit = self._deps.input_limit
        assert limit is not None  # only a limit raises it
        self.fail(node, limit.describe(exc.size, exc.exact), limit.code)

    def buffered(self, name: str) -> Signal | None:
        """The oldest buffered signal called ``name`` not yet consumed (none while the
        run is paused: a node that starts to wait then takes it at the resume)."""
        if self._run.status is RunStatus.PAUSED:
            return None
        signals = self._run.signals
        if signals is None:
            raise _Needs(Missing(signals=True))
        for signal in signals:
            if signal.name == name:
                return signal
        return None

    def consume(self, signal: Signal, node: Node) -> None:
        self._emit(ConsumeSignal(signal.signal_id, node.id, signal.name))

    def _oldest_waiter(self, name: str) -> str | None:
        best: tuple[str, str] | None = None
        for node_id, state in self._run.nodes.items():
            waiting = state.state is TaskState.WAITING and state.awaited_signal == name
            if waiting and (best is None or state.task_id < best[0]):
                best = (state.task_id, node_id)
        return None if best is None else best[1]

    # -- MAP nodes (kinds/map.py) ----------------------------------------------

    def map_max_items(self, asked: int) -> int:
        return min(asked, self._deps.map_max_items)

    def start_map(self, node: Node, items: list[Json], *, max_parallel: int) -> list[Node]:
        """The MAP's task WAITING, one task per item (each input rendered now, once),
        the first ``max_parallel`` dispatched; the others wait PENDING for a place."""
        if not items:
            return self.complete(node, [], input={"items": []})
        inner = self._dag.worker_node(node.id)
        assert inner is not None  # validation gave every MAP an inner node
        limit = self._deps.input_limit
        base = self.activation()
        inputs: list[Json] = []
        keys: list[RenderedKeys | None] = []
        for index, item in enumerate(items):
            try:
                inputs.append(
                    self._dag.render_item(
                        node.id,
                        base,
                        item,
                        index,
                        max_bytes=None if limit is None else limit.max_bytes,
                    )
                )
                keys.append(self._dag.render_keys(node.id, base, item, index))
            except InputTooLarge as exc:
                assert limit is not None  # only a limit raises it
                self.fail(node, f"item {index}: {limit.describe(exc.size, exc.exact)}", limit.code)
                return []
            except TemplateError as exc:
                self.fail(node, f"input of {node.id} item {index} could not be resolved: {exc}")
                return []
        first = min(len(items), max_parallel)
        progress = MapProgress(len(items), first, 0, 0, tuple(range(first)))
        self._emit(
            CreateTask(
                self._deps.new_id(),
                node.id,
                node.type,
                TaskState.WAITING,
                input={"items": items},
                map_progress=progress,
            )
        )
        child = self._item_child(node)
        queue = None if child is not None else self._queue(node)
        for index, item_input in enumerate(inputs):
            task_id = self._deps.new_id()
            self._emit(
                CreateTask(
                    task_id,
                    node.id,
                    inner.type,
                    TaskState.PENDING,
                    input=item_input,
                    item=index,
                    waits=index >= first,
                    keys=keys[index],
                )
            )
            if index >= first:
                continue
            if child is not None:
                self._emit(StartChild(task_id, node.id, 0, self._deps.new_id(), child, item=index))
            else:
                assert queue is not None
                self._emit(DispatchTask(task_id, node.id, inner.type, queue, self._now, item=index))
        return []

    def _item_child(self, node: Node) -> ChildRun | None:
        """What each item of a MAP over a SUB_WORKFLOW starts (None: a worker's MAP): the
        engine takes its input and version from the item's stored input."""
        inner = self._dag.worker_node(node.id)
        assert inner is not None
        if not isinstance(kind_of(inner.type), ChildKind):
            return None
        return ChildRun(
            workflow_id=str(inner.spec["workflow"]),
            version=None,
            input=None,
            detached=inner.spec.get("on_parent_cancel") == "abandon",
        )

    def _on_item_report(self, event: NodeCompleted | NodeFailed, state: MapState) -> None:
        """A worker's report on one item of a MAP: complete, retry or fail the item, then
        send the next one, or finish the MAP."""
        node_id = event.node_id
        index = state.find(event.task_id)
        item = None if index is None else state.items.get(index)
        if (
            index is None
            or item is None
            or not item.matches(event.task_id, event.attempt)
            or not item.state.is_with_worker
        ):
            what = "completion" if isinstance(event, NodeCompleted) else "failure"
            self._ignore(f"stale or duplicate {what} of {node_id} item attempt {event.attempt}")
            return
        node = self._dag.node(node_id)
        assert node is not None  # a MAP of the run's own version
        self._touched.add(node_id)
        if isinstance(event, NodeCompleted):
            self._emit(
                CompleteTask(event.task_id, node_id, event.attempt, event.output, item=index)
            )
            self._produced[(node_id, index)] = event.output
        else:
            next_attempt = event.attempt + 1
            policy = self._dag.retry_policy(node_id)
            inner = self._dag.worker_node(node_id)
            assert inner is not None
            attempts = (
                inner.retry.max_attempts
                if inner.retry is not None
                else kind_of(inner.type).default_attempts
            )
            if not event.permanent and next_attempt < attempts:
                child = self._item_child(node)
                not_before = self._now + dt.timedelta(seconds=policy.delay(next_attempt))
                self._emit(
                    RetryTask(
                        task_id=event.task_id,
                        node_id=node_id,
                        node_type=self._item_type(node),
                        attempt=event.attempt,
                        error=event.error,
                        queue=None if child is not None else self._queue(node),
                        not_before=not_before,
                        error_code=event.error_code,
                        item=index,
                    )
                )
                if child is not None:  # the item's next attempt: a new child
                    self._emit(
                        StartChild(
                            event.task_id,
                            node_id,
                            next_attempt,
                            self._deps.new_id(),
                            child,
                            not_before if not_before > self._now else None,
                            item=index,
                        )
                    )
                return
            self._emit(
                FailTask(
                    event.task_id, node_id, event.attempt, event.error, event.error_code, item=index
                )
            )
            self._produced[(node_id, index)] = None
            if fails_fast(node):
                reason = f"item {index} of {node_id} failed"
                self._emit(CancelItems(node_id, reason))
                self._emit(
                    ResolveWait(
                        self._run.nodes[node_id].task_id,
                        node_id,
                        TaskState.FAILED,
                        error=f"item {index} failed: {event.error}",
                    )
                )
                return
        self._map_go_on(node)

    def _item_type(self, node: Node) -> NodeType:
        inner = self._dag.worker_node(node.id)
        assert inner is not None
        return inner.type

    def _map_go_on(self, node: Node) -> None:
        """Send waiting items while the MAP has places; complete it once all finished."""
        state = self._run.nodes[node.id]
        if state.state is not TaskState.WAITING or state.map is None:
            return
        limit = max_parallel_of(node)
        progress = state.map.progress
        child = self._item_child(node)
        while progress.next < progress.total and len(progress.in_flight) < limit:
            waiting = state.map.items.get(progress.next)
            if waiting is None:
                raise _Needs(Missing(items=frozenset({(node.id, progress.next)})))
            index = progress.next
            self._emit(
                StartItem(
                    waiting.task_id,
                    node.id,
                    self._item_type(node),
                    index,
                    None if child is not None else self._queue(node),
                )
            )
            if child is not None:
                self._emit(
                    StartChild(waiting.task_id, node.id, 0, self._deps.new_id(), child, item=index)
                )
            state = self._run.nodes[node.id]
            assert state.map is not None
            progress = state.map.progress
        if progress.finished < progress.total:
            return
        loaded = self._run.item_outputs.get(node.id)
        if loaded is None:
            raise _Needs(Missing(item_outputs=frozenset({node.id})))
        output: list[Json] = [
            self._produced.get((node.id, i), value) for i, value in enumerate(loaded)
        ]
        self._emit(ResolveWait(state.task_id, node.id, TaskState.COMPLETED, output=output))
        self._advance_from(node.id, output)

    # -- templates and outputs -----------------------------------------------

    def resolve_input(self, node: Node) -> Json:
        limit = self._deps.input_limit
        max_bytes = None if limit is None else limit.max_bytes
        if self._dag.constant_input(node.id):  # no template: no activation to convert
            return self._dag.render_input(node.id, {}, max_bytes=max_bytes)
        self.ensure_outputs(self._dag.task_refs(node.id))
        return self._dag.render_input(node.id, self.activation(), max_bytes=max_bytes)

    def _set_output(self, node_id: str, output: Json) -> None:
        self._run.outputs[node_id] = output
        self._bound_tasks.pop(node_id, None)
        self._tasks_root = None

    def ensure_outputs(self, refs: frozenset[str] | None) -> None:
        """Ask for the outputs a template may read that the snapshot lacks (``None``:
        any reached node's)."""
        wanted = self._run.nodes.keys() if refs is None else refs
        missing = frozenset(
            node_id
            for node_id in wanted
            if node_id not in self._run.outputs
            and (state := self._run.nodes.get(node_id)) is not None
            and state.state is TaskState.COMPLETED
        )
        if missing:
            raise _Needs(Missing(outputs=missing))

    def activation(self) -> Mapping[str, object]:
        """The values expressions see, converted for the engine once and reused."""
        engine = self._dag.engine
        bound = self._bound
        if not bound:
            run = self._run
            bound["input"] = engine.to_native(run.input if run.input is not None else {})
            bound["config"] = engine.to_native(run.config if run.config is not None else {})
            bound["run"] = engine.to_native(
                {"id": run.run_id, "workflow_id": run.workflow_id, "version": run.version}
            )
            bound["system"] = engine.to_native({"now": self._now})
        if self._tasks_root is None:
            for node_id, output in self._run.outputs.items():
                if node_id not in self._bound_tasks:
                    self._bound_tasks[node_id] = engine.to_native({"output": output})
            self._tasks_root = engine.map_of(self._bound_tasks)
        bound["tasks"] = self._tasks_root
        return bound


def _signal_output(payload: Json) -> Json:
    return {} if payload is None else payload
