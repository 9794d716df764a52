"""The machine on a PAUSED run (docs/architecture.md §4.13): reports are recorded and
routed, but a timer is kept, a signal is buffered, the run does not finish by itself
and cannot be retried; RunResumed gives kept signals to their nodes and finishes it."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from composer_core.errors import RunActive
from composer_core.model import RunStatus, TaskState
from composer_core.statemachine import ConsumeSignal, FinishRun, RunResumed
from tests.unit.core.harness import Harness, dispatched, edge, make_dag, node, of_type, task


def pause(h: Harness) -> None:
    """What Engine.pause writes: the status (the machine has no action for it)."""
    h.mem.run = dataclasses.replace(h.mem.run, status=RunStatus.PAUSED)


def resume(h: Harness) -> None:
    h.mem.run = dataclasses.replace(h.mem.run, status=RunStatus.RUNNING)
    h.apply(RunResumed())


def test_a_report_is_recorded_and_routed_but_the_run_does_not_finish_while_paused() -> None:
    h = Harness(make_dag([task("a"), task("b")], [edge("a", "b")]))
    h.start()
    pause(h)
    tr = h.complete("a", {"x": 1})
    assert h.state("a") is TaskState.COMPLETED
    assert dispatched(tr) == ["b"]  # decided: the engine holds its dispatch until the resume
    tr = h.complete("b")
    assert not of_type(tr, FinishRun)
    assert h.status() is RunStatus.PAUSED
    resume(h)
    assert h.status() is RunStatus.SUCCEEDED


def test_a_timer_is_kept_while_paused() -> None:
    h = Harness(make_dag([node("w", "WAIT", {"duration_seconds": 5})]))
    h.start()
    pause(h)
    h.now += dt.timedelta(seconds=10)
    tr = h.fire("w")
    assert tr.ignored is not None and "paused" in tr.ignored
    assert h.state("w") is TaskState.WAITING
    resume(h)
    h.fire("w")
    assert h.status() is RunStatus.SUCCEEDED


def test_a_signal_is_buffered_while_paused_and_taken_at_resume() -> None:
    h = Harness(
        make_dag(
            [
                node("w", "WAIT_FOR_EVENT", {"event": "go"}),
                task("after", {"n": "{{tasks.w.output.n}}"}),
            ],
            [edge("w", "after")],
        )
    )
    h.start()
    pause(h)
    tr = h.signal("go", {"n": 3})
    assert not tr.signal_delivered
    assert h.state("w") is TaskState.WAITING
    resume(h)
    assert h.state("w") is TaskState.COMPLETED
    assert h.mem.tasks["w"].output == {"n": 3}
    assert h.state("after") is TaskState.PENDING


def test_a_node_that_starts_waiting_while_paused_takes_its_signal_at_resume() -> None:
    h = Harness(
        make_dag([task("a"), node("w", "WAIT_FOR_EVENT", {"event": "go"})], [edge("a", "w")])
    )
    h.start()
    pause(h)
    h.signal("go", {"ok": True})
    h.complete("a")
    assert h.state("w") is TaskState.WAITING  # the kept signal waits for the resume
    resume(h)
    assert h.mem.tasks["w"].output == {"ok": True}
    assert h.status() is RunStatus.SUCCEEDED


def test_resume_takes_the_oldest_buffered_signal_per_waiting_node() -> None:
    h = Harness(make_dag([node("w", "WAIT_FOR_EVENT", {"event": "go"})]))
    h.start()
    pause(h)
    h.signal("go", {"n": 1})
    h.signal("go", {"n": 2})
    h.mem.run = dataclasses.replace(h.mem.run, status=RunStatus.RUNNING)
    tr = h.apply(RunResumed())
    assert len(of_type(tr, ConsumeSignal)) == 1
    assert h.mem.tasks["w"].output == {"n": 1}


def test_a_paused_run_is_cancelled_but_not_retried() -> None:
    h = Harness(make_dag([task("a")]))
    h.start()
    pause(h)
    with pytest.raises(RunActive, match="PAUSED"):
        h.retry("a")
    h.cancel("stop")
    assert h.status() is RunStatus.CANCELLED
    assert h.state("a") is TaskState.CANCELLED
