"""MAP: one worker task per item, at most max_parallel at once, the output the items'
outputs in order; fail_fast vs continue; an item's retry; an empty list; and an event
that loads only the items in flight and the next one (never all)."""

from __future__ import annotations

from typing import Any

import pytest

from composer_core.errors import DefinitionInvalid
from composer_core.model import RunStatus, TaskState
from composer_core.statemachine import (
    CancelItems,
    DispatchTask,
    NodeCompleted,
    NodeFailed,
    StartChild,
    StartItem,
)
from tests.unit.core.harness import Harness, edge, make_dag, node, of_type, task


def mapping(items: Any = "{{input.items}}", **spec: Any) -> Harness:
    inner = spec.pop(
        "inner",
        {"type": "TASK", "queue": "work", "spec": {"v": "{{item}}", "i": "{{index}}"}},
    )
    dag = make_dag(
        [
            node("m", "MAP", {"items": items, "node": inner, **spec}),
            task("after", {"all": "{{tasks.m.output}}"}),
        ],
        [edge("m", "after")],
    )
    return Harness(dag, input={"items": ["a", "b", "c", "d", "e"]})


def in_flight(h: Harness) -> list[int]:
    state = h.run.nodes["m"].map
    assert state is not None
    return list(state.progress.in_flight)


def report(h: Harness, index: int, output: Any = None, *, error: str | None = None) -> Any:
    state = h.run.nodes["m"].map
    assert state is not None
    item = state.items[index]
    if error is None:
        return h.apply(NodeCompleted(item.task_id, "m", item.attempt, output))
    return h.apply(NodeFailed(item.task_id, "m", item.attempt, error))


def test_items_go_at_most_max_parallel_at_once_and_the_output_keeps_item_order() -> None:
    h = mapping(max_parallel=2)
    tr = h.start()
    assert [a.item for a in of_type(tr, DispatchTask)] == [0, 1]
    assert h.state("m") is TaskState.WAITING
    assert h.mem.items[("m", 0)].input == {"v": "a", "i": 0}
    report(h, 1, "B")
    assert in_flight(h) == [0, 2]
    # the stored snapshot holds the items in flight and as many next ones, never all
    state = h.run.nodes["m"].map
    assert state is not None and sorted(state.items) == [0, 2, 3, 4]
    for index in (0, 2, 3, 4):
        tr = report(h, index, index)
        assert len(in_flight(h)) <= 2
    assert h.mem.tasks["m"].output == [0, "B", 2, 3, 4]
    assert h.state("after") is TaskState.PENDING
    assert h.mem.tasks["after"].input == {"all": [0, "B", 2, 3, 4]}


def test_an_item_is_retried_by_the_inner_nodes_policy() -> None:
    h = mapping(
        inner={"type": "TASK", "queue": "work", "spec": {}, "retry": {"max_attempts": 2}},
        max_parallel=5,
    )
    h.start()
    report(h, 2, error="flaky")
    assert h.mem.items[("m", 2)].attempt == 1
    assert h.mem.items[("m", 2)].state is TaskState.PENDING
    for index in range(5):
        report(h, index, index)
    assert h.mem.tasks["m"].output == [0, 1, 2, 3, 4]


def test_fail_fast_cancels_the_items_still_going_and_fails_the_run() -> None:
    h = mapping(
        max_parallel=2, inner={"type": "TASK", "queue": "work", "retry": {"max_attempts": 1}}
    )
    h.start()
    tr = report(h, 0, error="bad line")
    assert of_type(tr, CancelItems)
    assert h.mem.items[("m", 1)].state is TaskState.CANCELLED
    assert h.mem.items[("m", 4)].state is TaskState.CANCELLED  # never sent
    assert h.state("m") is TaskState.FAILED
    assert h.status() is RunStatus.FAILED
    assert "item 0 failed: bad line" in (h.mem.error or "")


def test_continue_finishes_the_others_with_null_for_the_failed_item() -> None:
    h = mapping(
        max_parallel=3,
        on_failure="continue",
        inner={"type": "TASK", "queue": "work", "retry": {"max_attempts": 1}},
    )
    h.start()
    report(h, 1, error="bad line")
    for index in (0, 2, 3, 4):
        report(h, index, index)
    assert h.mem.tasks["m"].output == [0, None, 2, 3, 4]
    assert h.mem.items[("m", 1)].error == "bad line"
    assert h.state("after") is TaskState.PENDING


def test_an_empty_list_completes_at_once() -> None:
    h = mapping(items=[])
    h.start()
    assert h.mem.tasks["m"].output == []
    assert h.state("after") is TaskState.PENDING


def test_items_that_are_no_list_or_too_many_fail_the_node_saying_why() -> None:
    h = mapping(items="{{input}}")
    h.start()
    assert "must resolve to a list" in (h.mem.tasks["m"].error or "")
    h = mapping(max_items=3)
    h.start()
    assert "has 5 items; at most 3" in (h.mem.tasks["m"].error or "")


def test_a_cancel_stops_every_item_sent_or_waiting() -> None:
    h = mapping(max_parallel=2)
    h.start()
    h.cancel("enough")
    assert {r.state for r in h.mem.items.values()} == {TaskState.CANCELLED}
    assert h.status() is RunStatus.CANCELLED


def test_a_stale_item_report_is_ignored() -> None:
    h = mapping(max_parallel=2)
    h.start()
    state = h.run.nodes["m"].map
    assert state is not None
    first = state.items[0]
    report(h, 0, "x")
    assert h.apply(NodeCompleted(first.task_id, "m", first.attempt, "y")).ignored


def test_the_next_item_is_sent_as_one_finishes() -> None:
    h = mapping(max_parallel=1)
    h.start()
    tr = report(h, 0, 0)
    assert [a.item for a in of_type(tr, StartItem)] == [1]


@pytest.mark.parametrize(
    ("inner", "where"),
    [
        ({"type": "SWITCH"}, "spec.node.type"),
        ({"type": "TASK"}, "spec.node.queue"),
        ({"type": "HTTP", "spec": {"url": "http://x", "bogus": 1}}, "spec.node.spec.bogus"),
        ({"type": "TASK", "queue": "w", "spec": {"x": "{{nope}}"}}, "spec.node.spec.x"),
        ({"type": "SUB_WORKFLOW", "spec": {}}, "spec.node.spec.workflow"),
        ({"type": "SUB_WORKFLOW", "spec": {"workflow": "a b"}}, "spec.node.spec.workflow"),
        ({"type": "SUB_WORKFLOW", "queue": "w", "spec": {"workflow": "c"}}, "spec.node.queue"),
        (
            {"type": "SUB_WORKFLOW", "spec": {"workflow": "c", "on_parent_cancel": "x"}},
            "spec.node.spec.on_parent_cancel",
        ),
        ({"type": "SUB_WORKFLOW", "spec": {"workflow": "c", "bogus": 1}}, "spec.node.spec.bogus"),
    ],
)
def test_a_bad_inner_node_is_refused_with_its_path(inner: dict[str, Any], where: str) -> None:
    with pytest.raises(DefinitionInvalid) as exc:
        mapping(inner=inner)
    assert any(p.path.endswith(where) for p in exc.value.problems), exc.value.problems


CHILD_INNER = {
    "type": "SUB_WORKFLOW",
    "spec": {"workflow": "line", "input": {"v": "{{item}}", "i": "{{index}}"}},
}


def test_a_sub_workflow_item_starts_one_child_per_attempt_at_most_max_parallel() -> None:
    h = mapping(max_parallel=2, inner={**CHILD_INNER, "retry": {"max_attempts": 2}})
    tr = h.start()
    assert not of_type(tr, DispatchTask)  # no worker: children
    first = of_type(tr, StartChild)
    assert [(c.item, c.attempt, c.child.workflow_id) for c in first] == [
        (0, 0, "line"),
        (1, 0, "line"),
    ]
    assert h.mem.items[("m", 0)].input == {"workflow": "line", "input": {"v": "a", "i": 0}}
    tr = report(h, 1, "B")
    assert [(a.item, a.queue) for a in of_type(tr, StartItem)] == [(2, None)]
    assert [c.item for c in of_type(tr, StartChild)] == [2]
    tr = report(h, 0, error="child run x FAILED")  # its retry: a new child
    (again,) = of_type(tr, StartChild)
    assert (again.item, again.attempt) == (0, 1)
    assert again.child_run_id != first[0].child_run_id
    for index, output in ((0, "A"), (2, "C"), (3, "D"), (4, "E")):
        report(h, index, output)
    assert h.mem.tasks["m"].output == ["A", "B", "C", "D", "E"]


def test_a_sub_workflow_item_has_no_retry_unless_given_one() -> None:
    h = mapping(max_parallel=5, inner=CHILD_INNER, on_failure="continue")
    h.start()
    tr = report(h, 0, error="child run x FAILED")
    assert not of_type(tr, StartChild)
    assert h.mem.items[("m", 0)].state is TaskState.FAILED
