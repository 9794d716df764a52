"""Run a workflow definition through the state machine in memory, printing each transition.

No database, no Redis, no workers: a virtual clock jumps to the next due
timer or retry, and simulated workers answer each dispatched task (PYTHON
code really runs). It shows what the engine decides, event by event.

    python examples/simulate.py examples/order-fulfilment.yaml [--input in.json] [--out-of-stock]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any, assert_never

from composer_core.memory import MemoryRun, sequential_ids
from composer_core.model import NodeType, TaskState, build_dag, parse_definition
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
    RunStarted,
    SignalReceived,
    StartChild,
    StartItem,
    TimerFired,
)

_COLOURS = {
    "COMPLETED": 32,
    "SUCCEEDED": 32,
    "FAILED": 31,
    "SKIPPED": 90,
    "WAITING": 33,
    "PENDING": 36,
}


class Clock:
    def __init__(self) -> None:
        self.start = dt.datetime(2026, 1, 1, 9, 0, tzinfo=dt.UTC)
        self.now = self.start

    def __call__(self) -> dt.datetime:
        return self.now

    def elapsed(self) -> str:
        return f"+{(self.now - self.start).total_seconds():7.1f}s"


def paint(text: str) -> str:
    code = _COLOURS.get(text)
    return f"\033[{code}m{text}\033[0m" if code and sys.stdout.isatty() else text


def describe(action: Action) -> str:
    match action:
        case CreateTask():
            extra = f" branches={list(action.branches)}" if action.branches is not None else ""
            if action.wake_at:
                extra += f" wake_at={action.wake_at:%H:%M:%S}"
            if action.awaited_signal:
                extra += f" awaiting={action.awaited_signal!r}"
            if action.error:
                extra += f" error={action.error!r}"
            return f"create  {action.node_id} ({action.node_type}) {paint(action.state)}{extra}"
        case DispatchTask():
            return f"dispatch {action.node_id} → queue {action.queue!r}"
        case CompleteTask():
            return f"complete {action.node_id} → {json.dumps(action.output)}"
        case FailTask():
            return f"fail    {action.node_id}: {action.error}"
        case RetryTask():
            return (
                f"retry   {action.node_id} after attempt {action.attempt} failed: {action.error}; "
                f"attempt {action.next_attempt} → queue {action.queue!r} at {action.not_before:%H:%M:%S}"
            )
        case StartChild():
            return (
                f"start   child run of {action.child.workflow_id!r} for {action.node_id} "
                f"attempt {action.attempt}"
            )
        case ResolveWait():
            return f"resolve {action.node_id} {paint(action.state)} {json.dumps(action.output)}"
        case BufferSignal():
            return f"buffer  signal {action.name!r}"
        case ConsumeSignal():
            return f"consume signal for {action.node_id}"
        case ReopenRun():
            return f"reopen  run from {list(action.reset_nodes)}"
        case CancelTasks():
            return f"cancel  {len(action.task_ids)} task(s): {action.reason}"
        case FinishRun():
            detail = json.dumps(action.output) if action.error is None else action.error
            return f"finish  run {paint(action.status)}: {detail}"
        case StartItem():
            return f"dispatch {action.node_id} item {action.item} → queue {action.queue!r}"
        case CancelItems():
            return f"cancel  the unfinished items of {action.node_id}: {action.reason}"
        case MapProgressed():
            p = action.progress
            return f"progress {action.node_id} {p.finished} / {p.total}"
        case _:
            assert_never(action)


def work(
    node_type: NodeType, node_id: str, attempt: int, spec: Any, args: argparse.Namespace
) -> Any:
    """What a worker would answer; raises to simulate a failed attempt."""
    if node_type is NodeType.PYTHON:
        namespace: dict[str, Any] = {}
        exec(
            spec["code"], namespace
        )  # the simulator runs the user's snippet, as the python worker will
        return namespace["main"](spec.get("input", {}))
    if node_type is NodeType.HTTP:
        body: dict[str, Any] = {"ok": True}
        if str(spec.get("url", "")).endswith("/reserve"):
            body = {"id": "R-7", "in_stock": not args.out_of_stock}
        return {"status": 200, "headers": {"content-type": "application/json"}, "body": body}
    if node_id == "charge" and attempt == 0:
        raise RuntimeError("card processor timed out")
    return {"ok": True, "received": spec}


def simulate(args: argparse.Namespace, definition: str, run_input: Any) -> int:
    dag = build_dag(parse_definition(definition))
    clock = Clock()
    mem = MemoryRun.create(dag, input=run_input, now=clock, new_id=sequential_ids())
    print(f"workflow {dag.workflow_id!r}: {len(dag.nodes)} nodes; input {json.dumps(run_input)}\n")

    def step(event: Event) -> None:
        transition = mem.apply(event)
        print(
            f"{clock.elapsed()}  {type(event).__name__}"
            + (f" ({transition.ignored})" if transition.ignored else "")
        )
        for action in transition.actions:
            print(f"{'':12}{describe(action)}")

    step(RunStarted())
    signalled = False
    while not mem.run.is_terminal:
        due = [t for t in mem.tasks.values() if t.state is TaskState.PENDING]
        if due:
            task = min(due, key=lambda t: (t.not_before or clock.now, t.task_id))
            clock.now = max(clock.now, task.not_before or clock.now)
            node = dag.node(task.node_id)
            assert node is not None
            try:
                output = work(node.type, node.id, task.attempt, task.input, args)
            except Exception as exc:
                step(NodeFailed(task.task_id, task.node_id, task.attempt, str(exc)))
            else:
                step(NodeCompleted(task.task_id, task.node_id, task.attempt, output))
            continue
        waiting = [t for t in mem.tasks.values() if t.state is TaskState.WAITING]
        awaiting_signal = [t for t in waiting if mem.run.nodes[t.node_id].awaited_signal]
        if awaiting_signal and not signalled:
            clock.now += dt.timedelta(minutes=3)
            signalled = True
            name = mem.run.nodes[awaiting_signal[0].node_id].awaited_signal or ""
            step(SignalReceived(name, {"paid": run_input.get("amount")}))
            continue
        timed = [t for t in waiting if t.wake_at is not None]
        if not timed:
            print("nothing left to drive: the run waits for a signal")
            return 1
        task = min(timed, key=lambda t: (t.wake_at, t.task_id))
        clock.now = max(clock.now, task.wake_at or clock.now)
        step(TimerFired(task.task_id, task.node_id))
    print(
        f"\nrun {mem.run.status}: output {json.dumps(mem.output)}"
        + (f", error {mem.error}" if mem.error else "")
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("definition", help="workflow YAML or JSON")
    parser.add_argument(
        "--input", help="run input JSON file (default: <definition>.input.json if present)"
    )
    parser.add_argument(
        "--out-of-stock", action="store_true", help="take the wait-for-payment branch"
    )
    args = parser.parse_args()
    if args.input is None:
        default = Path(args.definition).with_suffix(".input.json")
        args.input = str(default) if default.exists() else None
    definition = Path(args.definition).read_text()
    run_input = json.loads(Path(args.input).read_text()) if args.input else {}
    return simulate(args, definition, run_input)


if __name__ == "__main__":
    sys.exit(main())
