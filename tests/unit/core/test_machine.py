"""Every routing rule of the state machine (docs/architecture.md §3).

Each test drives a run through MemoryRun, which gives the machine a snapshot
with no outputs or signals loaded and answers what it asks for, as the engine
does after a reload.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from composer_core.errors import InvalidRequest, RunActive, RunFinished
from composer_core.memory import sequential_ids
from composer_core.model import NodeType, RunStatus, TaskState
from composer_core.statemachine import (
    CompleteTask,
    Deps,
    DispatchTask,
    FailTask,
    FinishRun,
    Machine,
    Missing,
    NodeCompleted,
    NodeFailed,
    RetryTask,
    RunStarted,
    Transition,
)
from tests.unit.core.harness import (
    Harness,
    created,
    dispatched,
    dispatched_input,
    edge,
    make_dag,
    node,
    of_type,
    task,
)


def test_fork_join_waits_for_multi_node_branches() -> None:
    # f → a1 → a2 ─┐
    #   → b1 ──────┴→ join
    h = Harness(
        make_dag(
            [node("f", "FORK"), task("a1"), task("a2"), task("b1"), task("join")],
            [
                edge("f", "a1"),
                edge("a1", "a2"),
                edge("f", "b1"),
                edge("a2", "join"),
                edge("b1", "join"),
            ],
        )
    )
    tr = h.start()
    assert created(tr, TaskState.COMPLETED) == ["f"]
    assert dispatched(tr) == ["a1", "b1"]
    assert dispatched(h.complete("a1")) == ["a2"]
    assert dispatched(h.complete("b1")) == []  # join still waits for a2
    assert dispatched(h.complete("a2")) == ["join"]
    tr = h.complete("join")
    assert of_type(tr, FinishRun) == [FinishRun(RunStatus.SUCCEEDED)]


def test_join_node_type_behaves_like_any_merge() -> None:
    h = Harness(
        make_dag(
            [node("f", "FORK"), task("a"), task("b"), node("j", "JOIN"), task("after")],
            [edge("f", "a"), edge("f", "b"), edge("a", "j"), edge("b", "j"), edge("j", "after")],
        )
    )
    h.start()
    h.complete("b", {"x": 1})
    assert h.state("j") is None
    tr = h.complete("a")
    assert created(tr, TaskState.COMPLETED) == ["j"]
    assert dispatched(tr) == ["after"]


def test_switch_skips_untaken_branch_and_reconverges() -> None:
    # p → s ─(n > 1)→ hi ─────────┐
    #       ─(n <= 1)→ lo → lo2 ──┴→ merge
    h = Harness(
        make_dag(
            [task("p"), node("s", "SWITCH"), task("hi"), task("lo"), task("lo2"), task("merge")],
            [
                edge("p", "s"),
                edge("s", "hi", "{{tasks.p.output.n > 1}}"),
                edge("s", "lo", "{{tasks.p.output.n <= 1}}"),
                edge("lo", "lo2"),
                edge("hi", "merge"),
                edge("lo2", "merge"),
            ],
        )
    )
    h.start()
    tr = h.complete("p", {"n": 5})
    assert created(tr, TaskState.COMPLETED) == ["s"]
    assert dispatched(tr) == ["hi"]
    assert created(tr, TaskState.SKIPPED) == ["lo", "lo2"]
    assert h.run.nodes["s"].branches == ("hi",)
    assert dispatched(h.complete("hi")) == ["merge"]


def test_switch_passes_its_predecessors_output_on() -> None:
    h = Harness(
        make_dag(
            [task("p"), node("s", "SWITCH"), task("x", {"v": "{{tasks.s.output.v}}"})],
            [edge("p", "s"), edge("s", "x")],
        )
    )
    h.start()
    tr = h.complete("p", {"v": 7})
    assert len(of_type(tr, DispatchTask)) == 1
    assert dispatched_input(tr) == {"v": 7}
    assert h.mem.tasks["s"].output == {"v": 7}


def test_switch_selecting_nothing_skips_everything_below_and_succeeds() -> None:
    h = Harness(
        make_dag(
            [task("p"), node("s", "SWITCH"), task("a"), task("b"), task("c")],
            [
                edge("p", "s"),
                edge("s", "a", "{{false}}"),
                edge("s", "b", "{{input.go}}"),
                edge("a", "c"),
                edge("b", "c"),
            ],
        ),
        input={"go": False},
    )
    h.start()
    tr = h.complete("p")
    assert created(tr, TaskState.SKIPPED) == ["a", "b", "c"]
    assert h.run.nodes["s"].branches == ()
    assert of_type(tr, FinishRun) == [FinishRun(RunStatus.SUCCEEDED)]


def test_unconditional_edge_out_of_switch_is_always_taken() -> None:
    h = Harness(
        make_dag(
            [node("s", "SWITCH"), task("always"), task("never")],
            [edge("s", "always"), edge("s", "never", "{{1 == 2}}")],
        )
    )
    tr = h.start()
    assert dispatched(tr) == ["always"]
    assert created(tr, TaskState.SKIPPED) == ["never"]


def test_join_uses_recorded_switch_decision() -> None:
    h = Harness(
        make_dag(
            [node("f", "FORK"), node("s", "SWITCH"), task("slow"), task("x"), task("j")],
            [
                edge("f", "s"),
                edge("f", "slow"),
                edge("s", "x", "{{input.flag}}"),
                edge("x", "j"),
                edge("slow", "j"),
            ],
        ),
        input={"flag": True},
    )
    assert dispatched(h.start()) == ["slow", "x"]
    h.mem.run = dataclasses.replace(h.mem.run, input={"flag": False})  # deselects x if re-evaluated
    assert dispatched(h.complete("slow")) == []
    assert dispatched(h.complete("x")) == ["j"]


def test_switch_decision_reading_the_clock_is_made_once() -> None:
    h = Harness(
        make_dag(
            [
                node("f", "FORK"),
                node("s", "SWITCH"),
                task("early"),
                task("late"),
                task("slow"),
                task("j"),
            ],
            [
                edge("f", "s"),
                edge("f", "slow"),
                edge("s", "early", "{{system.now < timestamp('2026-01-01T13:00:00Z')}}"),
                edge("s", "late", "{{system.now >= timestamp('2026-01-01T13:00:00Z')}}"),
                edge("early", "j"),
                edge("late", "j"),
                edge("slow", "j"),
            ],
        )
    )
    assert dispatched(h.start()) == ["slow", "early"]
    h.now += dt.timedelta(hours=2)
    h.complete("early")
    assert dispatched(h.complete("slow")) == ["j"]
    assert h.state("late") is TaskState.SKIPPED


def test_outputs_are_loaded_only_when_referenced() -> None:
    h = Harness(
        make_dag(
            [task("a"), task("b"), task("c", {"url": "{{tasks.a.output.url}}"})],
            [edge("a", "b"), edge("b", "c")],
        )
    )
    h.start()
    h.complete("a", {"url": "http://x"})
    h.mem.loads.clear()
    tr = h.complete("b", {"huge": "x" * 10_000})
    assert h.mem.loads == [["a"]]
    assert len(of_type(tr, DispatchTask)) == 1
    assert dispatched_input(tr) == {"url": "http://x"}


def test_dynamic_task_index_loads_every_reached_output() -> None:
    h = Harness(
        make_dag(
            [task("a"), task("b"), task("c", {"v": "{{tasks[input.pick].output.v}}"})],
            [edge("a", "b"), edge("b", "c")],
        ),
        input={"pick": "a"},
    )
    h.start()
    h.complete("a", {"v": 1})
    h.mem.loads.clear()
    tr = h.complete("b", {"v": 2})
    assert h.mem.loads == [["a"]]  # b's own output is already at hand
    assert dispatched_input(tr) == {"v": 1}


def test_stale_and_duplicate_reports_are_ignored() -> None:
    h = Harness(make_dag([task("a"), task("b")], [edge("a", "b")]))
    h.start()
    task_id = h.run.nodes["a"].task_id

    tr = h.apply(NodeCompleted(task_id, "a", 3, {}))
    assert tr.ignored and not tr.actions
    tr = h.apply(NodeCompleted("other", "a", 0, {}))
    assert tr.ignored and not tr.actions
    tr = h.apply(NodeCompleted(task_id, "b", 0, {}))  # a node not reached yet
    assert tr.ignored and not tr.actions
    h.complete("a")
    before = h.states()
    tr = h.apply(NodeCompleted(task_id, "a", 0, {"again": True}))
    assert tr.ignored and not tr.actions
    tr = h.apply(NodeFailed(task_id, "a", 0, "late failure"))
    assert tr.ignored and not tr.actions
    assert h.states() == before
    assert h.mem.tasks["a"].output == {}


def test_failed_attempt_is_retried_with_exponential_backoff() -> None:
    policy = {"max_attempts": 3, "initial_seconds": 2, "multiplier": 3, "max_seconds": 100}
    h = Harness(make_dag([task("a", retry=policy)]))
    h.start()
    task_id = h.run.nodes["a"].task_id

    tr = h.fail("a", "timeout")
    assert tr.actions == (
        RetryTask(
            task_id,
            "a",
            NodeType.TASK,
            0,
            "timeout",
            queue="work",
            not_before=h.now + dt.timedelta(seconds=2),
        ),
    )
    assert (h.run.nodes["a"].task_id, h.run.nodes["a"].attempt) == (task_id, 1)  # a new attempt

    (retry,) = of_type(h.fail("a", "timeout"), RetryTask)
    assert (retry.next_attempt, retry.not_before) == (2, h.now + dt.timedelta(seconds=6))

    tr = h.fail("a", "timeout again")
    assert of_type(tr, FailTask) == [FailTask(task_id, "a", 2, "timeout again")]
    assert of_type(tr, FinishRun) == [
        FinishRun(RunStatus.FAILED, error="node a failed: timeout again")
    ]


def test_report_of_a_superseded_attempt_is_stale() -> None:
    h = Harness(make_dag([task("a")]))
    h.start()
    task_id = h.run.nodes["a"].task_id
    h.fail("a")
    tr = h.apply(NodeCompleted(task_id, "a", 0, {"late": True}))
    assert tr.ignored
    tr = h.complete("a", {"ok": True})
    assert of_type(tr, CompleteTask) == [CompleteTask(task_id, "a", 1, {"ok": True})]


def test_permanent_failure_is_not_retried() -> None:
    h = Harness(make_dag([task("a", retry={"max_attempts": 5})]))
    h.start()
    tr = h.fail("a", "card declined", permanent=True)
    assert [f.error for f in of_type(tr, FailTask)] == ["card declined"]
    assert not of_type(tr, RetryTask)
    assert h.status() is RunStatus.FAILED


def test_nothing_downstream_of_a_failure_runs_and_run_waits_for_other_branches() -> None:
    h = Harness(
        make_dag(
            [
                node("f", "FORK"),
                task("a", retry={"max_attempts": 1}),
                task("b"),
                task("after_a"),
                task("j"),
            ],
            [
                edge("f", "a"),
                edge("f", "b"),
                edge("a", "after_a"),
                edge("after_a", "j"),
                edge("b", "j"),
            ],
        )
    )
    h.start()
    tr = h.fail("a", "bad")
    assert not dispatched(tr)
    assert h.status() is RunStatus.RUNNING  # b is still with a worker
    tr = h.complete("b")
    assert not dispatched(tr)
    assert of_type(tr, FinishRun) == [FinishRun(RunStatus.FAILED, error="node a failed: bad")]
    assert h.state("after_a") is None and h.state("j") is None


def test_condition_that_cannot_be_evaluated_fails_the_switch_and_the_run() -> None:
    h = Harness(
        make_dag(
            [task("p"), node("s", "SWITCH"), task("x")],
            [edge("p", "s"), edge("s", "x", "{{tasks.p.output.missing.deeper}}")],
        )
    )
    h.start()
    tr = h.complete("p", {})
    assert created(tr, TaskState.FAILED) == ["s"]
    (finish,) = of_type(tr, FinishRun)
    assert finish.status is RunStatus.FAILED
    assert (
        finish.error is not None
        and "condition of edge s → x" in finish.error
        and "has()" in finish.error
    )


def test_input_that_cannot_be_resolved_fails_the_node() -> None:
    h = Harness(
        make_dag([task("a"), task("b", {"n": "{{tasks.a.output.n + 1}}"})], [edge("a", "b")])
    )
    h.start()
    tr = h.complete("a", {"n": "seven"})
    assert created(tr, TaskState.FAILED) == ["b"]
    assert not dispatched(tr)
    assert (
        h.mem.tasks["b"].error is not None
        and "operator + cannot be applied" in h.mem.tasks["b"].error
    )
    assert h.status() is RunStatus.FAILED


def test_missing_outputs_are_asked_for_and_the_snapshot_is_never_changed() -> None:
    dag = make_dag(
        [task("a"), task("b"), task("c", {"v": "{{tasks.a.output}}"})],
        [edge("a", "b"), edge("b", "c")],
    )
    h = Harness(dag)
    h.start()
    h.complete("a", {"v": 1})
    snapshot = h.run
    nodes = dict(snapshot.nodes)
    event = NodeCompleted(snapshot.nodes["b"].task_id, "b", 0, {})
    machine = Machine(dag, Deps(h.now, sequential_ids("x")))

    assert machine.apply(snapshot, event) == Missing(outputs=frozenset({"a"}))
    assert snapshot.nodes == nodes and not snapshot.outputs  # nothing decided, nothing changed

    tr = machine.apply(snapshot.with_data({"a": {"v": 1}}), event)
    assert isinstance(tr, Transition)
    assert dispatched(tr) == ["c"] and dispatched_input(tr) == {"v": {"v": 1}}
    assert tr.run.nodes["b"].state is TaskState.COMPLETED and tr.run.nodes["c"]
    assert snapshot.nodes == nodes  # the new run is a new value


def test_buffered_signals_are_asked_for_only_when_a_wait_for_event_parks() -> None:
    dag = make_dag([task("a"), node("w", "WAIT_FOR_EVENT", {"event": "paid"})], [edge("a", "w")])
    h = Harness(dag)
    h.start()
    h.signal("paid", {"n": 1})
    assert h.mem.signal_loads == 0  # nothing waited: buffered without reading the buffer
    machine = Machine(dag, Deps(h.now, sequential_ids("x")))
    event = NodeCompleted(h.run.nodes["a"].task_id, "a", 0, {})
    assert machine.apply(h.run, event) == Missing(signals=True)

    h.complete("a")
    assert h.mem.signal_loads == 1
    assert h.state("w") is TaskState.COMPLETED and h.status() is RunStatus.SUCCEEDED


def test_dispatch_carries_queue_type_timeout_and_resolved_input() -> None:
    h = Harness(
        make_dag(
            [
                {
                    "id": "get",
                    "type": "HTTP",
                    "spec": {"url": "{{input.base}}/items/{{input.id}}"},
                    "timeout_seconds": 9,
                },
                {
                    "id": "py",
                    "type": "PYTHON",
                    "spec": {
                        "code": "def main(input):\n    return {'x': f'{{input}}'}\n",
                        "input": {"n": "{{input.id}}"},
                    },
                },
                task("own", {"id": "{{input.id}}"}, queue="billing"),
            ],
            [edge("get", "py"), edge("py", "own")],
        ),
        input={"base": "https://api.example.com", "id": 42},
    )
    tr = h.start()
    (d,) = of_type(tr, DispatchTask)
    assert (d.queue, d.node_type, dispatched_input(tr)) == (
        "http",
        "HTTP",
        {"url": "https://api.example.com/items/42"},
    )
    tr = h.complete("get")
    (d,) = of_type(tr, DispatchTask)
    assert d.queue == "python"
    assert dispatched_input(tr) == {
        "code": "def main(input):\n    return {'x': f'{{input}}'}\n",
        "input": {"n": 42},
    }
    tr = h.complete("py")
    (d,) = of_type(tr, DispatchTask)
    assert (d.queue, dispatched_input(tr)) == ("billing", {"id": 42})


def test_config_and_run_roots_are_visible_to_templates() -> None:
    h = Harness(
        make_dag(
            [task("a", {"env": "{{config.env}}", "run": "{{run.id}}", "wf": "{{run.workflow_id}}"})]
        ),
        config={"env": "prod"},
    )
    assert dispatched_input(h.start()) == {"env": "prod", "run": "run-1", "wf": "wf"}


def test_run_output_template_is_evaluated_when_the_run_succeeds() -> None:
    h = Harness(
        make_dag(
            [task("a"), task("b")],
            [edge("a", "b")],
            output={"total": "{{tasks.a.output.n + tasks.b.output.n}}"},
        )
    )
    h.start()
    h.complete("a", {"n": 2})
    tr = h.complete("b", {"n": 3})
    assert of_type(tr, FinishRun) == [FinishRun(RunStatus.SUCCEEDED, output={"total": 5})]


def test_run_output_that_cannot_be_evaluated_fails_the_run() -> None:
    h = Harness(make_dag([task("a")], output="{{tasks.a.output.missing}}"))
    h.start()
    (finish,) = of_type(h.complete("a", {}), FinishRun)
    assert (
        finish.status is RunStatus.FAILED
        and finish.error is not None
        and finish.error.startswith("run output:")
    )


def test_start_node_override_and_double_start() -> None:
    h = Harness(make_dag([task("a"), task("b")], [edge("a", "b")]))
    assert dispatched(h.start("b")) == ["b"]
    with pytest.raises(InvalidRequest, match="already started"):
        h.start()
    with pytest.raises(InvalidRequest, match="start node 'nope'"):
        Harness(make_dag([task("a")])).start("nope")


def test_control_only_workflow_succeeds_at_start() -> None:
    h = Harness(make_dag([node("f", "FORK"), node("j", "JOIN")], [edge("f", "j")]))
    tr = h.start()
    assert created(tr, TaskState.COMPLETED) == ["f", "j"]
    assert h.status() is RunStatus.SUCCEEDED


# -- waits -----------------------------------------------------------------


def test_wait_parks_until_its_timer_fires() -> None:
    h = Harness(
        make_dag([node("w", "WAIT", {"duration_seconds": 30}), task("after")], [edge("w", "after")])
    )
    tr = h.start()
    assert created(tr, TaskState.WAITING) == ["w"]
    assert h.mem.tasks["w"].wake_at == h.now + dt.timedelta(seconds=30)
    assert h.status() is RunStatus.RUNNING
    h.now += dt.timedelta(seconds=30)
    tr = h.fire("w")
    assert h.mem.tasks["w"].output == {"woke_at": "2026-01-01T12:00:30Z"}
    assert dispatched(tr) == ["after"]
    assert (h.fire("w")).ignored  # a second firing changes nothing


@pytest.mark.parametrize(
    "spec",
    [
        {"duration_seconds": 0},
        {"until": "2025-12-31T00:00:00Z"},
        {"duration_seconds": "{{input.delay}}"},
    ],
    ids=["zero", "past", "templated-zero"],
)
def test_wait_already_due_completes_inline(spec: dict[str, object]) -> None:
    h = Harness(
        make_dag([node("w", "WAIT", spec), task("after")], [edge("w", "after")]), input={"delay": 0}
    )
    tr = h.start()
    assert created(tr, TaskState.COMPLETED) == ["w"]
    assert dispatched(tr) == ["after"]


def test_wait_until_and_templated_duration() -> None:
    h = Harness(make_dag([node("w", "WAIT", {"until": "2026-01-01T14:00:00+01:00"})]))
    h.start()
    assert h.mem.tasks["w"].wake_at == dt.datetime(2026, 1, 1, 13, 0, tzinfo=dt.UTC)
    h = Harness(
        make_dag([node("w", "WAIT", {"duration_seconds": "{{input.d}}"})]), input={"d": "1.5"}
    )
    h.start()
    assert h.mem.tasks["w"].wake_at == h.now + dt.timedelta(seconds=1.5)


def test_wait_with_bad_resolved_duration_fails_the_node() -> None:
    h = Harness(
        make_dag([node("w", "WAIT", {"duration_seconds": "{{input.d}}"})]), input={"d": "soon"}
    )
    tr = h.start()
    assert created(tr, TaskState.FAILED) == ["w"]
    assert "duration_seconds" in (h.mem.tasks["w"].error or "")


def test_signal_resolves_a_waiting_node_with_its_payload() -> None:
    h = Harness(
        make_dag(
            [
                node("w", "WAIT_FOR_EVENT", {"event": "paid"}),
                task("ship", {"amount": "{{tasks.w.output.amount}}"}),
            ],
            [edge("w", "ship")],
        )
    )
    h.start()
    assert h.run.nodes["w"].awaited_signal == "paid"
    assert h.mem.tasks["w"].wake_at is None  # no timeout
    tr = h.signal("paid", {"amount": 12})
    assert tr.signal_delivered
    assert dispatched_input(tr) == {"amount": 12}
    assert h.mem.tasks["w"].output == {"amount": 12}


def test_signal_without_payload_outputs_empty_map() -> None:
    h = Harness(make_dag([node("w", "WAIT_FOR_EVENT", {"event": "go"})]))
    h.start()
    h.signal("go")
    assert h.mem.tasks["w"].output == {}
    assert h.status() is RunStatus.SUCCEEDED


def test_wait_for_event_times_out_and_fails_the_run() -> None:
    h = Harness(
        make_dag(
            [node("w", "WAIT_FOR_EVENT", {"event": "paid", "timeout_seconds": 60}), task("after")],
            [edge("w", "after")],
        )
    )
    h.start()
    assert h.mem.tasks["w"].wake_at == h.now + dt.timedelta(seconds=60)
    tr = h.fire("w")
    assert not dispatched(tr)
    (finish,) = of_type(tr, FinishRun)
    assert finish.status is RunStatus.FAILED
    assert finish.error == "node w failed: timed out waiting for event 'paid'"
    assert (h.fire("w")).ignored


def test_early_signal_is_buffered_and_consumed_when_the_node_is_reached() -> None:
    h = Harness(
        make_dag(
            [task("a"), node("w", "WAIT_FOR_EVENT", {"event": "paid"}), task("b")],
            [edge("a", "w"), edge("w", "b")],
        )
    )
    h.start()
    tr = h.signal("paid", {"n": 1})
    assert not tr.signal_delivered
    assert [s.name for s, consumed in h.mem.signals if not consumed] == ["paid"]
    tr = h.complete("a")
    assert created(tr, TaskState.COMPLETED) == ["w"]
    assert dispatched(tr) == ["b"]
    assert h.mem.tasks["w"].output == {"n": 1}
    assert all(consumed for _, consumed in h.mem.signals)


def test_buffered_signals_are_consumed_oldest_first_once_each() -> None:
    h = Harness(
        make_dag(
            [
                task("a"),
                node("f", "FORK"),
                node("w1", "WAIT_FOR_EVENT", {"event": "e"}),
                node("w2", "WAIT_FOR_EVENT", {"event": "e"}),
                node("w3", "WAIT_FOR_EVENT", {"event": "e"}),
            ],
            [edge("a", "f"), edge("f", "w1"), edge("f", "w2"), edge("f", "w3")],
        )
    )
    h.start()
    h.signal("e", {"n": 1})
    h.signal("e", {"n": 2})
    h.complete("a")
    assert (h.mem.tasks["w1"].output, h.mem.tasks["w2"].output) == ({"n": 1}, {"n": 2})
    assert h.state("w3") is TaskState.WAITING  # two signals, two consumers
    tr = h.signal("e", {"n": 3})
    assert tr.signal_delivered and h.mem.tasks["w3"].output == {"n": 3}


def test_signal_goes_to_the_oldest_waiter() -> None:
    h = Harness(
        make_dag(
            [
                node("f", "FORK"),
                node("w1", "WAIT_FOR_EVENT", {"event": "e"}),
                node("w2", "WAIT_FOR_EVENT", {"event": "e"}),
            ],
            [edge("f", "w2"), edge("f", "w1")],  # w2 parks first, so it is the oldest
        )
    )
    h.start()
    h.signal("e", {"to": "first"})
    assert h.state("w2") is TaskState.COMPLETED and h.state("w1") is TaskState.WAITING


def test_signal_rules() -> None:
    h = Harness(make_dag([task("a")]))
    h.start()
    with pytest.raises(InvalidRequest):
        h.signal("  ")
    h.complete("a")
    with pytest.raises(RunFinished):
        h.signal("late")


# -- cancel and retry --------------------------------------------------------


def test_cancel_stops_active_tasks_and_ignores_late_reports() -> None:
    h = Harness(
        make_dag(
            [node("f", "FORK"), task("a"), node("w", "WAIT", {"duration_seconds": 60}), task("b")],
            [edge("f", "a"), edge("f", "w"), edge("a", "b")],
        )
    )
    h.start()
    tr = h.cancel("customer asked")
    assert of_type(tr, FinishRun) == [FinishRun(RunStatus.CANCELLED, error="customer asked")]
    # CANCELLED, not FAILED: a cancelled task or wait did not fail
    assert h.states() == {"a": "CANCELLED", "f": "COMPLETED", "w": "CANCELLED"}
    assert h.mem.tasks["a"].state is TaskState.CANCELLED
    assert h.mem.tasks["a"].error == "customer asked"
    a = h.run.nodes["a"]
    assert (h.apply(NodeCompleted(a.task_id, "a", 0, {}))).ignored
    assert (h.fire("w")).ignored
    again = h.cancel("asked twice")  # a cancel sent again answers as the first did
    assert again.ignored and not again.actions


def test_a_cancelled_node_a_retry_does_not_reset_keeps_the_run_from_succeeding() -> None:
    h = Harness(
        make_dag(
            [node("f", "FORK"), task("a"), node("w", "WAIT", {"duration_seconds": 60})],
            [edge("f", "a"), edge("f", "w")],
        )
    )
    h.start()
    h.cancel("stop")
    h.retry("a")
    h.complete("a")
    assert h.states() == {"a": "COMPLETED", "f": "COMPLETED", "w": "CANCELLED"}
    assert h.status() is RunStatus.FAILED  # w never ran: no success
    assert h.mem.error == "node w was cancelled: stop"


def test_a_finished_run_cannot_be_cancelled() -> None:
    h = Harness(make_dag([task("a")]))
    h.start()
    h.complete("a", {})
    assert h.run.status is RunStatus.SUCCEEDED
    with pytest.raises(RunFinished, match="already SUCCEEDED"):
        h.cancel()


def test_retry_is_refused_while_tasks_are_active() -> None:
    h = Harness(make_dag([task("a")]))
    h.start()
    with pytest.raises(RunActive, match="cancel it before retrying"):
        h.retry("a")


def test_retry_from_node_resets_it_and_its_descendants() -> None:
    h = Harness(
        make_dag(
            [task("a"), task("b", retry={"max_attempts": 1}), task("c"), task("d")],
            [edge("a", "b"), edge("b", "c"), edge("a", "d")],
        )
    )
    h.start()
    h.complete("a", {"v": 1})
    h.complete("d")
    h.fail("b", "flaky")
    assert h.status() is RunStatus.FAILED
    old_b = h.run.nodes["b"].task_id

    tr = h.retry("b")
    assert dispatched(tr) == ["b"]
    assert h.status() is RunStatus.RUNNING
    assert h.run.nodes["b"].task_id != old_b and h.run.nodes["b"].attempt == 0
    assert h.state("a") is TaskState.COMPLETED and h.state("d") is TaskState.COMPLETED  # untouched
    assert dispatched(h.complete("b")) == ["c"]
    h.complete("c")
    assert h.status() is RunStatus.SUCCEEDED and h.mem.error is None


def test_retry_with_new_input_uses_it() -> None:
    h = Harness(
        make_dag([task("a", {"n": "{{input.n}}"}, retry={"max_attempts": 1})]), input={"n": 1}
    )
    h.start()
    h.fail("a")
    tr = h.retry("a", input={"n": 2})
    assert dispatched_input(tr) == {"n": 2}
    assert h.run.input == {"n": 2}


def test_retry_of_a_cancelled_run_and_unknown_node() -> None:
    h = Harness(make_dag([task("a")]))
    h.start()
    h.cancel()
    with pytest.raises(InvalidRequest, match="node 'zz'"):
        h.retry("zz")
    assert dispatched(h.retry("a")) == ["a"]


def test_retry_moves_the_run_to_another_version() -> None:
    v1 = make_dag(
        [task("a"), task("b", retry={"max_attempts": 1}), task("old")],
        [edge("a", "b"), edge("a", "old")],
    )
    v2 = make_dag(
        [task("a"), task("b", {"fixed": True}), task("new")],
        [edge("a", "b"), edge("b", "new")],
        version=2,
    )
    h = Harness(v1)
    h.start()
    h.complete("a")
    h.complete("old")
    h.fail("b")
    tr = h.retry("b", dag=v2)
    assert h.run.version == 2
    assert "old" not in h.run.nodes  # v2 has no such node
    assert dispatched_input(tr) == {"fixed": True}
    assert dispatched(h.complete("b")) == ["new"]
    h.complete("new")
    assert h.status() is RunStatus.SUCCEEDED


def test_events_on_a_fresh_run_that_name_no_task_are_ignored() -> None:
    h = Harness(make_dag([task("a")]))
    for event in (NodeCompleted("x", "a", 0, {}), NodeFailed("x", "a", 0, "e")):
        assert (h.apply(event)).ignored
    assert dispatched(h.apply(RunStarted())) == ["a"]
