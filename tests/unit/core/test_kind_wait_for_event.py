"""WAIT_FOR_EVENT's timeout: ``on_timeout: fail`` (the default) fails the node,
``continue`` completes it with ``{"timed_out": true}`` so a SWITCH can branch on it
(the signal and fail paths are in test_machine.py)."""

from __future__ import annotations

from composer_core.model import RunStatus, TaskState
from composer_core.statemachine import FinishRun
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

TIMED_OUT = "{{has(tasks.w.output.timed_out)}}"
ANSWERED = "{{!has(tasks.w.output.timed_out)}}"


def branching(on_timeout: str | None) -> Harness:
    """w (WAIT_FOR_EVENT ``paid``, 60 s) → s (SWITCH) → ``late`` if it timed out,
    ``paid`` if the signal came."""
    spec: dict[str, object] = {"event": "paid", "timeout_seconds": 60}
    if on_timeout is not None:
        spec["on_timeout"] = on_timeout
    return Harness(
        make_dag(
            [
                node("w", "WAIT_FOR_EVENT", spec),
                node("s", "SWITCH"),
                task("late", {"why": "{{tasks.w.output}}"}),
                task("paid", {"amount": "{{tasks.w.output.amount}}"}),
            ],
            [edge("w", "s"), edge("s", "late", TIMED_OUT), edge("s", "paid", ANSWERED)],
        )
    )


def test_continue_completes_the_node_with_timed_out_and_the_switch_takes_that_branch() -> None:
    h = branching("continue")
    h.start()
    tr = h.fire("w")
    assert h.mem.tasks["w"].state is TaskState.COMPLETED
    assert h.mem.tasks["w"].output == {"timed_out": True}
    assert created(tr, TaskState.COMPLETED) == ["s"]
    assert dispatched(tr) == ["late"]
    assert dispatched_input(tr) == {"why": {"timed_out": True}}
    assert created(tr, TaskState.SKIPPED) == ["paid"]
    h.complete("late")
    assert h.status() is RunStatus.SUCCEEDED
    assert h.fire("w").ignored  # a second firing changes nothing


def test_a_signal_before_the_timeout_takes_the_other_branch_under_continue() -> None:
    h = branching("continue")
    h.start()
    tr = h.signal("paid", {"amount": 12})
    assert tr.signal_delivered
    assert dispatched(tr) == ["paid"]
    assert dispatched_input(tr) == {"amount": 12}
    assert h.fire("w").ignored  # the timer that comes after is stale


def test_the_default_and_fail_still_fail_the_node_and_the_run() -> None:
    for on_timeout in (None, "fail"):
        h = branching(on_timeout)
        h.start()
        tr = h.fire("w")
        assert h.mem.tasks["w"].state is TaskState.FAILED
        assert not dispatched(tr)
        (finish,) = of_type(tr, FinishRun)
        assert finish.status is RunStatus.FAILED
        assert finish.error == "node w failed: timed out waiting for event 'paid'"
