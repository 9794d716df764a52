"""SUB_WORKFLOW in the machine: a reached node's task is RUNNING with its child's id
decided in the same decision (StartChild); the child's end stands in for a report;
a retry of the node starts a new child, with a new id (the engine's part — inserting
and starting the child — is tested with PostgreSQL in tests/integration/e2e)."""

from __future__ import annotations

import pytest

from composer_core.errors import DefinitionInvalid
from composer_core.kinds import ChildRun
from composer_core.model import RunStatus, TaskState
from composer_core.statemachine import FinishRun, RetryTask, StartChild
from tests.unit.core.harness import Harness, edge, make_dag, node, of_type, task

CHILD = {
    "workflow": "fulfil-line",
    "input": {"sku": "{{input.sku}}", "n": "{{tasks.a.output.n}}"},
}


def harness(spec: dict[str, object] | None = None, **extra: object) -> Harness:
    return Harness(
        make_dag(
            [task("a"), node("c", "SUB_WORKFLOW", spec or CHILD, **extra), task("b")],
            [edge("a", "c"), edge("c", "b")],
            output={"child": "{{tasks.c.output}}"},
        ),
        input={"sku": "X-1"},
    )


def test_a_reached_node_starts_one_child_with_its_input_rendered() -> None:
    h = harness()
    h.start()
    tr = h.complete("a", {"n": 3})
    (start,) = of_type(tr, StartChild)
    assert start.attempt == 0
    assert start.child == ChildRun("fulfil-line", None, {"sku": "X-1", "n": 3}, detached=False)
    assert start.not_before is None
    assert h.state("c") is TaskState.RUNNING
    assert h.mem.tasks["c"].input == {"sku": "X-1", "n": 3}
    assert start.child_run_id not in (start.task_id,)


def test_the_child_s_output_completes_the_node_and_the_run_goes_on() -> None:
    h = harness()
    h.start()
    h.complete("a", {"n": 3})
    h.complete("c", {"shipped": True})
    h.complete("b")
    assert h.status() is RunStatus.SUCCEEDED
    assert h.mem.output == {"child": {"shipped": True}}


def test_a_child_s_failure_fails_the_node_when_it_has_no_retry() -> None:
    h = harness()
    h.start()
    h.complete("a", {"n": 1})
    tr = h.fail("c", "child run r1 FAILED: out of stock")
    (finish,) = of_type(tr, FinishRun)
    assert finish.status is RunStatus.FAILED
    assert "child run r1 FAILED: out of stock" in (finish.error or "")


def test_a_retry_of_the_node_starts_a_new_child_after_its_delay() -> None:
    h = harness(retry={"max_attempts": 2, "initial_seconds": 5})
    h.start()
    first = of_type(h.complete("a", {"n": 1}), StartChild)[0]
    tr = h.fail("c", "child failed")
    (retry,) = of_type(tr, RetryTask)
    assert retry.queue is None  # no queue: its next attempt is a new child
    (again,) = of_type(tr, StartChild)
    assert again.attempt == 1
    assert again.child_run_id != first.child_run_id
    assert again.child == first.child
    assert again.not_before == retry.not_before
    assert h.state("c") is TaskState.RUNNING
    assert h.complete("c", {"ok": 1}).ignored is None
    assert len(h.mem.children) == 2


def test_abandon_and_a_pinned_version_reach_the_child() -> None:
    h = harness({"workflow": "w2", "version": 4, "on_parent_cancel": "abandon"})
    h.start()
    (start,) = of_type(h.complete("a", {"n": 1}), StartChild)
    assert start.child == ChildRun("w2", 4, {}, detached=True)


def test_a_template_that_fails_fails_the_node_and_starts_no_child() -> None:
    h = harness({"workflow": "w2", "input": "{{tasks.a.output.missing}}"})
    h.start()
    tr = h.complete("a", {"n": 1})
    assert not of_type(tr, StartChild)
    assert h.state("c") is TaskState.FAILED


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ({}, "nodes[1].spec.workflow: required for SUB_WORKFLOW"),
        ({"workflow": "no spaces"}, "nodes[1].spec.workflow: 'no spaces' is not a workflow id"),
        ({"workflow": "w", "version": 0}, "nodes[1].spec.version: must be a version number"),
        (
            {"workflow": "w", "on_parent_cancel": "terminate"},
            "nodes[1].spec.on_parent_cancel: must be one of 'cancel', 'abandon'",
        ),
    ],
)
def test_a_bad_spec_is_refused_at_publish(spec: dict[str, object], problem: str) -> None:
    with pytest.raises(DefinitionInvalid) as raised:
        make_dag([task("a"), node("c", "SUB_WORKFLOW", spec or {"x": 1})], [edge("a", "c")])
    assert any(p.startswith(problem) for p in str(raised.value).splitlines()) or problem in str(
        raised.value
    )
