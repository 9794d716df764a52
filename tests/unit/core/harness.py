"""Helpers that let a state-machine test read like a story.

``Harness`` wraps MemoryRun (the in-memory shell) with a fixed, movable clock
and ids t0001, t0002, … and offers one method per kind of event, addressing
tasks by node id.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any, TypeVar

from composer_core.memory import MemoryRun, sequential_ids
from composer_core.model import RunStatus, TaskState, WorkflowDAG, build_dag, parse_definition
from composer_core.statemachine import (
    CreateTask,
    DispatchTask,
    Event,
    NodeCompleted,
    NodeFailed,
    Run,
    RunCancelled,
    RunRetried,
    RunStarted,
    SignalReceived,
    TimerFired,
    Transition,
)

T0 = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)


def task(node_id: str, spec: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {"id": node_id, "type": "TASK", "queue": "work", "spec": spec or {}, **extra}


def node(
    node_id: str, node_type: str, spec: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    return {"id": node_id, "type": node_type, **({"spec": spec} if spec else {}), **extra}


def edge(source: str, target: str, condition: str | None = None) -> dict[str, Any]:
    out = {"from": source, "to": target}
    if condition is not None:
        out["condition"] = condition
    return out


def make_dag(
    nodes: Sequence[dict[str, Any]],
    edges: Sequence[dict[str, Any]] = (),
    *,
    version: int = 1,
    workflow_id: str = "wf",
    **top: Any,
) -> WorkflowDAG:
    spec = parse_definition({"id": workflow_id, "nodes": list(nodes), "edges": list(edges), **top})
    return build_dag(spec, version=version)


class Harness:
    def __init__(self, dag: WorkflowDAG, input: Any = None, config: Any = None) -> None:
        self.now = T0
        self.mem = MemoryRun.create(
            dag,
            input=input if input is not None else {},
            config=config,
            now=self.clock,
            new_id=sequential_ids(),
        )

    def clock(self) -> dt.datetime:
        return self.now

    @property
    def run(self) -> Run:
        return self.mem.run

    def status(self) -> RunStatus:
        """The run's status (a call, so that mypy does not narrow it across events)."""
        return self.mem.run.status

    def state(self, node_id: str) -> TaskState | None:
        n = self.mem.run.nodes.get(node_id)
        return None if n is None else n.state

    def states(self) -> dict[str, str]:
        return {k: v.state.value for k, v in sorted(self.mem.run.nodes.items())}

    def apply(self, event: Event, dag: WorkflowDAG | None = None) -> Transition:
        return self.mem.apply(event, dag=dag)

    def start(self, start_node: str | None = None) -> Transition:
        return self.apply(RunStarted(start_node))

    def complete(self, node_id: str, output: Any = None) -> Transition:
        n = self.mem.run.nodes[node_id]
        return self.apply(
            NodeCompleted(n.task_id, node_id, n.attempt, {} if output is None else output)
        )

    def fail(self, node_id: str, error: str = "boom", *, permanent: bool = False) -> Transition:
        n = self.mem.run.nodes[node_id]
        return self.apply(NodeFailed(n.task_id, node_id, n.attempt, error, permanent=permanent))

    def fire(self, node_id: str) -> Transition:
        return self.apply(TimerFired(self.mem.run.nodes[node_id].task_id, node_id))

    def signal(self, name: str, payload: Any = None) -> Transition:
        return self.apply(SignalReceived(name, payload))

    def cancel(self, reason: str = "") -> Transition:
        return self.apply(RunCancelled(reason))

    def retry(
        self,
        from_node: str,
        *,
        input: Any = None,
        config: Any = None,
        dag: WorkflowDAG | None = None,
    ) -> Transition:
        return self.apply(RunRetried(from_node, input, config), dag=dag)


def dispatched(tr: Transition) -> list[str]:
    return [a.node_id for a in tr.actions if isinstance(a, DispatchTask)]


def created(tr: Transition, state: TaskState) -> list[str]:
    return [a.node_id for a in tr.actions if isinstance(a, CreateTask) and a.state is state]


A = TypeVar("A")


def dispatched_input(tr: Transition) -> Any:
    """The input stored (CreateTask) for the first task the transition dispatched."""
    [first, *_] = of_type(tr, DispatchTask)
    [created] = [c for c in of_type(tr, CreateTask) if c.task_id == first.task_id]
    return created.input


def of_type(tr: Transition, kind: type[A]) -> list[A]:
    return [a for a in tr.actions if isinstance(a, kind)]
