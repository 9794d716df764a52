"""libs/core: Machine.apply, templates and definition builds, with no I/O at all.

Machine.apply is measured twice:
- through MemoryRun, which (like the engine) hands the machine a snapshot with
  no outputs, answers what it asks for, then persists the actions in memory;
- in a raw loop: the same asking and answering, outputs served by a dict,
  nothing persisted.
The gap between them is the shell's cost; the raw figure is the machine's own.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from composer_core.memory import MemoryRun, sequential_ids
from composer_core.model import RunStatus, TaskState, WorkflowDAG, build_dag, parse_definition
from composer_core.statemachine import (
    CreateTask,
    Deps,
    Event,
    Machine,
    Missing,
    NodeCompleted,
    Run,
    RunStarted,
)
from composer_core.templates import CelEngine, Json, compile_condition, compile_value

CHAIN_STEPS = 50
FANOUT = 100
BUDGET_SECONDS = 1.5  # per measurement: repeat until at least this long
NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
RUN_INPUT = {"order_id": "o-1", "n": 3, "flag": True, "items": [{"sku": "a", "qty": 2}] * 5}


def clock() -> dt.datetime:
    return NOW


def chain_definition(steps: int) -> dict[str, Any]:
    """``steps`` TASK nodes in a line, each reading the run input and its predecessor."""
    nodes: list[dict[str, Any]] = []
    for i in range(steps):
        spec: dict[str, Any] = {"order": "{{input.order_id}}", "n": "{{input.n}}"}
        if i:
            spec["prev"] = f"{{{{tasks.s{i - 1}.output.v}}}}"
        nodes.append({"id": f"s{i}", "type": "TASK", "queue": "q", "spec": spec})
    edges = [{"from": f"s{i}", "to": f"s{i + 1}"} for i in range(steps - 1)]
    return {
        "id": "chain",
        "nodes": nodes,
        "edges": edges,
        "output": f"{{{{tasks.s{steps - 1}.output}}}}",
    }


def fanout_definition(width: int) -> dict[str, Any]:
    """A FORK of ``width`` TASK branches and a JOIN."""
    nodes: list[dict[str, Any]] = [{"id": "fork", "type": "FORK"}]
    nodes += [
        {
            "id": f"b{i}",
            "type": "TASK",
            "queue": "q",
            "spec": {"i": i, "order": "{{input.order_id}}"},
        }
        for i in range(width)
    ]
    nodes.append({"id": "join", "type": "JOIN"})
    edges = [{"from": "fork", "to": f"b{i}"} for i in range(width)]
    edges += [{"from": f"b{i}", "to": "join"} for i in range(width)]
    return {"id": "fanout", "nodes": nodes, "edges": edges}


def output_of(node_id: str) -> Json:
    return {"v": len(node_id), "node": node_id}


# -- Machine.apply through MemoryRun ------------------------------------------------------


def one_memory_run(dag: WorkflowDAG, run_id: str) -> int:
    """Start a run and complete every task as it appears; return the number of events."""
    mem = MemoryRun.create(dag, run_id=run_id, input=RUN_INPUT, now=clock, new_id=sequential_ids())
    mem.apply(RunStarted())
    events = 1
    while not mem.run.is_terminal:
        pending = [t for t in mem.tasks.values() if t.state is TaskState.PENDING]
        if not pending:
            raise RuntimeError(f"run stuck: {mem.run.status}")
        for record in pending:
            transition = mem.apply(
                NodeCompleted(
                    record.task_id, record.node_id, record.attempt, output_of(record.node_id)
                )
            )
            if transition.ignored:
                raise RuntimeError(transition.ignored)
            events += 1
    if mem.run.status is not RunStatus.SUCCEEDED:
        raise RuntimeError(f"run ended {mem.run.status}: {mem.error}")
    return events


# -- Machine.apply in a raw loop --------------------------------------------------------------


def one_raw_run(dag: WorkflowDAG, run_id: str) -> int:
    """The engine's loop without a database: a snapshot with no outputs loaded, the
    outputs the machine asks for served from a dict, nothing persisted."""
    run = Run(run_id, dag.workflow_id, dag.version, RunStatus.RUNNING, RUN_INPUT, None)
    data: dict[str, Json] = {}
    machine = Machine(dag, Deps(NOW, sequential_ids()))
    pending: dict[str, str] = {}  # node id → task id

    def apply(event: Event) -> None:
        nonlocal run
        snapshot = run
        while isinstance(result := machine.apply(snapshot, event), Missing):
            snapshot = snapshot.with_data({n: data.get(n) for n in result.outputs}, ())
        if result.ignored:
            raise RuntimeError(result.ignored)
        run = replace(result.run, outputs={})  # as after a reload: no outputs at hand
        for action in result.actions:
            if isinstance(action, CreateTask) and action.state is TaskState.PENDING:
                pending[action.node_id] = action.task_id

    apply(RunStarted())
    events = 1
    while pending:
        node_id, task_id = pending.popitem()
        output = output_of(node_id)
        data[node_id] = output
        apply(NodeCompleted(task_id, node_id, 0, output))
        events += 1
    if run.status is not RunStatus.SUCCEEDED:
        raise RuntimeError(f"raw run ended {run.status}")
    return events


def events_per_second(
    dag: WorkflowDAG, one_run: Callable[[WorkflowDAG, str], int]
) -> tuple[float, int]:
    events = runs = 0
    began = time.perf_counter()
    while runs < 3 or time.perf_counter() - began < BUDGET_SECONDS:
        events += one_run(dag, f"run-{runs}")
        runs += 1
    return events / (time.perf_counter() - began), runs


# -- templates -------------------------------------------------------------------------------


def per_second(fn: Callable[[], object], batch: int = 200) -> float:
    calls = 0
    began = time.perf_counter()
    while calls < batch or time.perf_counter() - began < BUDGET_SECONDS:
        for _ in range(batch):
            fn()
        calls += batch
    return calls / (time.perf_counter() - began)


def template_figures() -> dict[str, float]:
    engine = CelEngine()
    activation = {
        "input": engine.to_native(RUN_INPUT),
        "config": engine.to_native({"region": "eu"}),
        "run": engine.to_native({"id": "r", "workflow_id": "w", "version": 1}),
        "system": engine.to_native({"now": NOW}),
        "tasks": engine.map_of({"a": engine.to_native({"output": {"v": 5, "ok": True}})}),
    }
    lone = compile_value("{{input.n}}", engine)
    interpolated = compile_value(
        "https://shop.example/{{input.order_id}}/items/{{tasks.a.output.v}}", engine
    )
    condition = compile_condition("{{tasks.a.output.v > 3 && input.flag}}", engine)
    spec = compile_value(
        {
            "url": "https://x/{{input.order_id}}",
            "body": {"n": "{{input.n}}", "v": "{{tasks.a.output.v}}"},
        },
        engine,
    )
    assert lone.evaluate(activation) == 3
    assert interpolated.evaluate(activation) == "https://shop.example/o-1/items/5"
    assert condition.evaluate(activation) is True

    counter = iter(range(10**9))
    began = time.perf_counter()
    compiled = 0
    while compiled < 50 or time.perf_counter() - began < BUDGET_SECONDS:
        engine.compile(f"tasks.a.output.v + input.n * {next(counter)} > 3")
        compiled += 1
    compile_us = (time.perf_counter() - began) / compiled * 1e6

    return {
        "template lone evals/s": per_second(lambda: lone.evaluate(activation)),
        "template interpolated evals/s": per_second(lambda: interpolated.evaluate(activation)),
        "template condition evals/s": per_second(lambda: condition.evaluate(activation)),
        "template 3-expression spec evals/s": per_second(lambda: spec.evaluate(activation)),
        "bind run input (to_native) /s": per_second(lambda: engine.to_native(RUN_INPUT)),
        "compile µs per expression": compile_us,
    }


# -- definitions -------------------------------------------------------------------------------


def build_figures() -> dict[str, float]:
    import json

    document = json.dumps(chain_definition(100))
    spec = parse_definition(document)
    build_dag(spec)  # warm the grammar
    timings: dict[str, list[float]] = {"parse": [], "build": []}
    began = time.perf_counter()
    while len(timings["build"]) < 5 or time.perf_counter() - began < BUDGET_SECONDS:
        t0 = time.perf_counter()
        spec = parse_definition(document)
        t1 = time.perf_counter()
        build_dag(spec)
        t2 = time.perf_counter()
        timings["parse"].append(t1 - t0)
        timings["build"].append(t2 - t1)
    parse_ms = min(timings["parse"]) * 1e3
    build_ms = min(timings["build"]) * 1e3
    return {
        "100-node definition parse ms (best)": parse_ms,
        "100-node definition validate+build ms (best)": build_ms,
        "100-node definition total ms (best)": parse_ms + build_ms,
    }


async def main() -> dict[str, float]:
    chain = build_dag(parse_definition(chain_definition(CHAIN_STEPS)))
    fanout = build_dag(parse_definition(fanout_definition(FANOUT)))
    figures: dict[str, float] = {}

    mem_chain, _ = events_per_second(chain, one_memory_run)
    raw_chain, _ = events_per_second(chain, one_raw_run)
    mem_fan, _ = events_per_second(fanout, one_memory_run)
    raw_fan, _ = events_per_second(fanout, one_raw_run)
    figures["chain50 MemoryRun events/s"] = mem_chain
    figures["chain50 raw Machine events/s"] = raw_chain
    figures["chain50 MemoryRun runs/s"] = mem_chain / (CHAIN_STEPS + 1)
    figures["chain50 raw / MemoryRun"] = raw_chain / mem_chain
    figures["fork100+join MemoryRun events/s"] = mem_fan
    figures["fork100+join raw Machine events/s"] = raw_fan
    figures["fork100+join raw / MemoryRun"] = raw_fan / mem_fan
    figures["chain50 raw µs/event"] = 1e6 / raw_chain
    figures["fork100+join raw µs/event"] = 1e6 / raw_fan

    templates = template_figures()
    figures.update(templates)
    figures["lone / condition eval speed"] = (
        templates["template lone evals/s"] / templates["template condition evals/s"]
    )
    figures.update(build_figures())
    return figures
