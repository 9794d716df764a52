"""Golden histories: stored event sequences replayed through the machine.

Each file in tests/unit/histories/ holds a definition, a run input and a list
of steps; each step is an event and the actions it must produce, written as
short readable lines. They double as documentation of how a run unfolds.
Record a new history with ``python -m tests.unit.core.test_histories FILE``
(it fills in ``expect`` from the current machine); then read every line
before committing it — the point is that a person checked it.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any, assert_never

import pytest

from composer_core.errors import EventRejected
from composer_core.model import build_dag, parse_definition
from composer_core.statemachine import (
    Action,
    BufferSignal,
    CancelItems,
    CancelTasks,
    CompleteTask,
    ConsumeSignal,
    CreateTask,
    DispatchTask,
    Event,
    FailTask,
    FinishRun,
    MapProgressed,
    NodeCompleted,
    NodeFailed,
    ReopenRun,
    ResolveWait,
    RetryTask,
    RunCancelled,
    RunRetried,
    RunStarted,
    SignalReceived,
    StartChild,
    StartItem,
    TimerFired,
)
from tests.unit.core.harness import Harness

HISTORIES = Path(__file__).parent.parent / "histories"


def line(action: Action, now: dt.datetime) -> str:
    match action:
        case CreateTask():
            branches = f" branches={list(action.branches)}" if action.branches is not None else ""
            return f"create {action.node_id} {action.state}{branches}"
        case DispatchTask():
            delay = (action.not_before - now).total_seconds()
            return f"dispatch {action.node_id} to {action.queue} in {delay:g}s"
        case CompleteTask():
            return f"complete {action.node_id}"
        case FailTask():
            return f"fail {action.node_id}: {action.error}"
        case RetryTask():
            delay = (action.not_before - now).total_seconds()
            return (
                f"retry {action.node_id} after attempt {action.attempt}: "
                f"attempt {action.next_attempt} to {action.queue} in {delay:g}s"
            )
        case StartChild():
            return f"start child of {action.child.workflow_id} for {action.node_id}"
        case ResolveWait():
            return f"resolve {action.node_id} {action.state}"
        case BufferSignal():
            return f"buffer {action.name}"
        case ConsumeSignal():
            return f"consume signal for {action.node_id}"
        case ReopenRun():
            return f"reopen v{action.version} reset {list(action.reset_nodes)}"
        case CancelTasks():
            return f"cancel {len(action.task_ids)} task(s): {action.reason}"
        case FinishRun():
            error = f": {action.error}" if action.error else ""
            output = (
                f" output={json.dumps(action.output, sort_keys=True)}"
                if action.output is not None
                else ""
            )
            return f"finish {action.status}{error}{output}"
        case StartItem():
            return f"dispatch {action.node_id} item {action.item} to {action.queue}"
        case CancelItems():
            return f"cancel the items of {action.node_id}: {action.reason}"
        case MapProgressed():
            return f"progress {action.node_id} {action.progress.finished}/{action.progress.total}"
        case _:
            assert_never(action)


def event_of(step: dict[str, Any], h: Harness) -> Event:
    kind = step["event"]
    node_id: str = step.get("node", "")
    current = h.run.nodes.get(node_id)
    match kind:
        case "RunStarted":
            return RunStarted(step.get("start_node"))
        case "NodeCompleted":
            assert current is not None, f"{node_id} not reached"
            return NodeCompleted(
                current.task_id,
                node_id,
                step.get("attempt", current.attempt),
                step.get("output", {}),
            )
        case "NodeFailed":
            assert current is not None, f"{node_id} not reached"
            return NodeFailed(
                current.task_id,
                node_id,
                step.get("attempt", current.attempt),
                step["error"],
                permanent=step.get("permanent", False),
            )
        case "TimerFired":
            assert current is not None, f"{node_id} not reached"
            return TimerFired(current.task_id, node_id)
        case "SignalReceived":
            return SignalReceived(step["name"], step.get("payload"))
        case "RunCancelled":
            return RunCancelled(step.get("reason", ""))
        case "RunRetried":
            return RunRetried(step["from_node"], step.get("input"), step.get("config"))
    raise AssertionError(f"unknown event {kind!r}")


def replay(history: dict[str, Any]) -> list[dict[str, Any]]:
    """Play a history's events and return its steps with what actually happened."""
    h = Harness(build_dag(parse_definition(history["definition"])), input=history.get("input", {}))
    played = []
    for step in history["steps"]:
        h.now += dt.timedelta(seconds=step.get("advance_seconds", 0))
        result = {k: v for k, v in step.items() if k not in ("expect", "ignored", "rejected")}
        try:
            tr = h.apply(event_of(step, h))
        except EventRejected as exc:
            result["rejected"] = type(exc).__name__
        else:
            if tr.ignored:
                result["ignored"] = True
            else:
                result["expect"] = [line(a, h.now) for a in tr.actions]
        played.append(result)
    return played


@pytest.mark.parametrize("path", sorted(HISTORIES.glob("*.json")), ids=lambda p: p.stem)
def test_history_replays(path: Path) -> None:
    history = json.loads(path.read_bytes())
    played = replay(history)
    for i, (want, got) in enumerate(zip(history["steps"], played, strict=True)):
        expected = {k: v for k, v in want.items() if k in ("expect", "ignored", "rejected")}
        actual = {k: v for k, v in got.items() if k in ("expect", "ignored", "rejected")}
        assert actual == expected, f"{path.name} step {i} ({want['event']} {want.get('node', '')})"


def test_there_are_histories() -> None:
    assert len(list(HISTORIES.glob("*.json"))) >= 3


if __name__ == "__main__":  # record: fill in what the machine does now
    for name in sys.argv[1:]:
        file = Path(name)
        data = json.loads(file.read_text())
        data["steps"] = replay(data)
        file.write_text(json.dumps(data, indent=2) + "\n")
        print(f"recorded {file}: read it before you commit it")
