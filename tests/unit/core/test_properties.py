"""Property-based tests: random acyclic graphs driven by random event orders.

Hypothesis builds graphs mixing TASK, FORK, SWITCH, JOIN, WAIT and
WAIT_FOR_EVENT nodes and plays completions, failures (retryable and
permanent), stale and duplicate reports, timer firings, signals (awaited or
not, early or late), cancels and retries in any order. After every event the
invariants below must hold; at the end the run is driven until nothing is
left to do and must be terminal.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from composer_core.errors import EventRejected
from composer_core.model import NodeType, RunStatus, TaskState, WorkflowDAG
from composer_core.statemachine import (
    CreateTask,
    DispatchTask,
    Event,
    FinishRun,
    NodeCompleted,
    NodeFailed,
    RetryTask,
    RunCancelled,
    RunRetried,
    RunStarted,
    SignalReceived,
    TimerFired,
    Transition,
)
from tests.unit.core.harness import Harness, make_dag

EVENTS = ("e1", "e2")
FLAGS = 4


@st.composite
def workflows(draw: st.DrawFn) -> tuple[WorkflowDAG, dict[str, Any]]:
    n = draw(st.integers(min_value=2, max_value=9))
    kinds = draw(
        st.lists(
            st.sampled_from(
                ["TASK", "TASK", "TASK", "FORK", "SWITCH", "JOIN", "WAIT", "WAIT_FOR_EVENT"]
            ),
            min_size=n,
            max_size=n,
        )
    )
    parents: dict[int, list[int]] = {}
    for j in range(1, n):
        parents[j] = draw(
            st.lists(st.integers(0, j - 1), min_size=1, max_size=min(3, j), unique=True)
        )
    has_children = {p for ps in parents.values() for p in ps}
    nodes: list[dict[str, Any]] = []
    for i, kind in enumerate(kinds):
        if kind == "SWITCH" and i not in has_children:
            kind = "TASK"
        node: dict[str, Any] = {"id": f"n{i}", "type": kind}
        if kind == "TASK":
            node["queue"] = "q"
            node["spec"] = {"n": "{{input.n}}"}
            node["retry"] = {"max_attempts": draw(st.integers(1, 3)), "initial_seconds": 1}
        elif kind == "WAIT":
            node["spec"] = {"duration_seconds": draw(st.sampled_from([0, 10, 60]))}
        elif kind == "WAIT_FOR_EVENT":
            spec: dict[str, Any] = {"event": draw(st.sampled_from(EVENTS))}
            if draw(st.booleans()):
                spec["timeout_seconds"] = 30
            node["spec"] = spec
        nodes.append(node)
    edges: list[dict[str, Any]] = []
    for j, ps in parents.items():
        for p in ps:
            e: dict[str, Any] = {"from": f"n{p}", "to": f"n{j}"}
            if (
                kinds[p] == "SWITCH"
                and nodes[p]["type"] == "SWITCH"
                and draw(st.integers(0, 3)) > 0
            ):
                flag = draw(st.integers(0, FLAGS - 1))
                e["condition"] = (
                    f"{{{{input.f{flag}}}}}" if draw(st.booleans()) else f"{{{{!input.f{flag}}}}}"
                )
            edges.append(e)
    run_input = {"n": 1, **{f"f{k}": draw(st.booleans()) for k in range(FLAGS)}}
    return make_dag(nodes, edges), run_input


class Checker:
    """Runs events and checks the invariants after each one."""

    def __init__(self, dag: WorkflowDAG, run_input: dict[str, Any]) -> None:
        self.dag = dag
        self.h = Harness(dag, input=run_input)
        self.begun: set[str] = {dag.start_node().id}
        self.reports: list[Event] = []  # every report sent, to replay as duplicates or stale ones
        self.cancelled = False

    def apply(self, event: Event) -> Transition | None:
        h = self.h
        was_terminal = h.run.is_terminal
        before = (
            h.states(),
            {k: (v.task_id, v.attempt) for k, v in h.run.nodes.items()},
            h.run.status,
        )
        try:
            tr = h.apply(event)
        except EventRejected:
            assert (
                h.states(),
                {k: (v.task_id, v.attempt) for k, v in h.run.nodes.items()},
                h.run.status,
            ) == before
            return None
        if isinstance(event, NodeCompleted | NodeFailed):
            self.reports.append(event)
        if tr.ignored is not None:
            assert not tr.actions, "an ignored event must change nothing"
            assert (
                h.states(),
                {k: (v.task_id, v.attempt) for k, v in h.run.nodes.items()},
                h.run.status,
            ) == before
        if was_terminal and not isinstance(event, RunRetried):
            assert not tr.actions, f"{event} changed a terminal run"
        if isinstance(event, RunRetried):
            self.begun = {n for n in self.begun if n in h.run.nodes} | {event.from_node}
        if isinstance(event, RunCancelled):
            self.cancelled = True
        if isinstance(event, RunRetried):
            self.cancelled = False
        self.check_transition(tr)
        self.check_snapshot()
        return tr

    def check_transition(self, tr: Transition) -> None:
        finished = False
        for action in tr.actions:
            if finished:
                assert not isinstance(action, CreateTask | DispatchTask), (
                    f"{action} after the run finished"
                )
            if isinstance(action, FinishRun):
                finished = True
            if isinstance(action, DispatchTask | RetryTask):
                state = self.h.run.nodes[action.node_id]
                attempt = action.next_attempt if isinstance(action, RetryTask) else 0
                assert state.task_id == action.task_id and state.attempt == attempt
                assert self.dag.node(action.node_id).type.is_worker  # type: ignore[union-attr]
        # The snapshot the machine built is what persisting its actions stored.
        stored = {n: (t.task_id, t.state, t.attempt) for n, t in self.h.mem.tasks.items()}
        assert stored == {n: (s.task_id, s.state, s.attempt) for n, s in tr.run.nodes.items()}

    def check_snapshot(self) -> None:
        run = self.h.run
        for node_id, state in run.nodes.items():
            if node_id in self.begun:
                continue
            resolved, active = True, False
            for e in self.dag.incoming(node_id):
                source = run.nodes.get(e.source)
                if source is None or source.state not in (TaskState.COMPLETED, TaskState.SKIPPED):
                    resolved = False
                elif source.state is TaskState.COMPLETED and (
                    source.branches is None or node_id in source.branches
                ):
                    active = True
            assert resolved, f"{node_id} was reached before all its incoming edges were resolved"
            if state.state is TaskState.SKIPPED:
                assert not active, f"{node_id} skipped though an incoming edge is active"
            else:
                assert active, f"{node_id} ran though no incoming edge is active"
        for node_id, state in run.nodes.items():
            if self.dag.is_type(node_id, NodeType.SWITCH) and state.state is TaskState.COMPLETED:
                assert state.branches is not None, "a completed SWITCH records its decision"
        if run.is_terminal:
            assert not run.active_nodes(), "a terminal run has no active task"
            failed = run.failed_nodes()
            if run.status is RunStatus.SUCCEEDED:
                assert not failed
            elif run.status is RunStatus.CANCELLED:
                assert self.cancelled
            else:
                assert failed, "a FAILED run names a failed node"
        else:
            assert run.active_nodes(), "a running run has something active"

    def finish(self) -> None:
        """Report everything dispatched, fire every timer, answer every wait: the run must end."""
        h = self.h
        for _ in range(200):
            run = h.run
            if run.is_terminal:
                return
            with_worker = [n for n, s in run.nodes.items() if s.state.is_with_worker]
            waiting = [n for n, s in run.nodes.items() if s.state is TaskState.WAITING]
            if with_worker:
                s = run.nodes[with_worker[0]]
                self.apply(NodeCompleted(s.task_id, with_worker[0], s.attempt, {"v": 1}))
            elif waiting:
                s = run.nodes[waiting[0]]
                if s.awaited_signal:
                    self.apply(SignalReceived(s.awaited_signal, {"late": True}))
                else:
                    self.apply(TimerFired(s.task_id, waiting[0]))
            else:
                raise AssertionError(f"run {run.status} has nothing active: {h.states()}")
        raise AssertionError("run did not finish")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(wf=workflows(), data=st.data())
def test_random_runs_keep_every_invariant(
    wf: tuple[WorkflowDAG, dict[str, Any]], data: st.DataObject
) -> None:
    dag, run_input = wf
    c = Checker(dag, run_input)
    h = c.h
    c.apply(RunStarted())
    if data.draw(st.booleans(), label="early signal"):
        c.apply(SignalReceived(data.draw(st.sampled_from(EVENTS)), {"early": True}))

    for _ in range(data.draw(st.integers(0, 30), label="steps")):
        run = h.run
        with_worker = sorted(n for n, s in run.nodes.items() if s.state.is_with_worker)
        waiting = sorted(n for n, s in run.nodes.items() if s.state is TaskState.WAITING)
        choices = ["signal", "stale"]
        if with_worker:
            choices += ["complete", "complete", "complete", "fail"]
        if waiting:
            choices += ["timer", "timer"]
        if c.reports:
            choices.append("duplicate")
        if not run.is_terminal:
            choices.append("cancel")
        if run.is_terminal:
            choices += ["retry", "retry"]
        choice = data.draw(st.sampled_from(choices), label="event")
        h.now += dt.timedelta(seconds=data.draw(st.integers(0, 40), label="clock"))

        if choice == "complete":
            node_id = data.draw(st.sampled_from(with_worker))
            s = run.nodes[node_id]
            c.apply(
                NodeCompleted(s.task_id, node_id, s.attempt, {"v": data.draw(st.integers(0, 9))})
            )
        elif choice == "fail":
            node_id = data.draw(st.sampled_from(with_worker))
            s = run.nodes[node_id]
            c.apply(
                NodeFailed(
                    s.task_id, node_id, s.attempt, "boom", permanent=data.draw(st.booleans())
                )
            )
        elif choice == "timer":
            node_id = data.draw(st.sampled_from(waiting))
            c.apply(TimerFired(run.nodes[node_id].task_id, node_id))
        elif choice == "signal":
            c.apply(SignalReceived(data.draw(st.sampled_from([*EVENTS, "nobody"])), {"s": 1}))
        elif choice == "stale":
            reached = sorted(run.nodes)
            if reached:
                node_id = data.draw(st.sampled_from(reached))
                s = run.nodes[node_id]
                tr = c.apply(
                    NodeCompleted(
                        s.task_id, node_id, s.attempt + 1 + data.draw(st.integers(0, 2)), {}
                    )
                )
                assert tr is not None and tr.ignored
                tr = c.apply(TimerFired("not-a-task", node_id))
                assert tr is not None and (tr.ignored or run.is_terminal)
        elif choice == "duplicate":
            old = data.draw(st.sampled_from(c.reports))
            current = run.nodes.get(old.node_id)  # type: ignore[union-attr]
            still_current = (
                current is not None
                and current.matches(old.task_id, old.attempt)  # type: ignore[union-attr]
                and current.state.is_with_worker
            )
            tr = c.apply(old)
            if not still_current:
                assert tr is not None and tr.ignored, (
                    "a replayed report for a finished attempt is stale"
                )
        elif choice == "cancel":
            c.apply(RunCancelled("stop"))
        elif choice == "retry":
            target = data.draw(st.sampled_from([n.id for n in dag.nodes]))
            c.apply(RunRetried(target))

    c.finish()
    assert h.run.is_terminal
