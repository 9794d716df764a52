"""The ledger checks on hand-written ledgers: a zombie past its lease is no double
execution, two valid leases at once are, and each re-execution gets its reason. The
row checks on hand-written rows: nothing finishes before it starts, and a task created
after its run finished is reported."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import composer_repo as repo
from composer_core.model import NodeType, RunStatus, TaskState
from tests.chaos.checks import (
    Report,
    RunFacts,
    _check_children,
    _check_node_keys,
    _check_run_limits,
    _check_task_rows,
    _check_time_order,
    _overlap,
    executions,
    out_of_order,
    why_again,
)
from tests.chaos.driver import DrivenRun
from tests.chaos.shapes import KEYED_MAX, Expect, Planned

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def run(
    x: str, owner: str, attempt: int, start: float, end: float | None, outcome: str = "ok"
) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = [
        {"k": "start", "x": x, "task": "t", "run": "r", "node": "n", "attempt": attempt,
         "owner": owner, "t": start},
    ]  # fmt: skip
    if end is not None:
        records.append({"k": "end", "x": x, "t": end, "outcome": outcome})
    return records


def lease(owner: str, attempt: int, t0: float, exp: float, kind: str = "lease") -> dict[str, Any]:
    return {"k": kind, "task": "t", "attempt": attempt, "owner": owner, "t0": t0, "exp": exp,
            "ok": True}  # fmt: skip


def report(owner: str, attempt: int, accepted: bool | None) -> dict[str, Any]:
    return {"k": "report", "task": "t", "attempt": attempt, "owner": owner, "accepted": accepted}


def test_a_frozen_worker_running_past_its_lease_is_not_a_double_execution() -> None:
    records = [
        lease("a", 0, 0.0, 3.0),
        *run("x1", "a", 0, 0.1, 9.0),  # frozen from 1 to 8: its lease ran out at 3
        report("a", 0, False),
        lease("b", 1, 3.5, 6.5),
        *run("x2", "b", 1, 3.6, 4.0),
        report("b", 1, True),
    ]

    first, second = executions(records)

    assert first.valid == [(0.1, 3.0)]
    assert second.valid == [(3.6, 4.0)]
    assert _overlap(first.valid, second.valid) == 0
    assert "report was rejected" in why_again(first)


def test_two_valid_leases_at_once_are_a_double_execution() -> None:
    records = [
        lease("a", 0, 0.0, 3.0),
        lease("a", 0, 1.0, 4.0, kind="renew"),
        *run("x1", "a", 0, 0.1, 5.0),
        lease("b", 0, 3.0, 6.0),  # taken over while a's renewal still held
        *run("x2", "b", 0, 3.1, 3.5),
    ]

    first, second = executions(records)

    assert first.valid == [(0.1, 4.0)]
    assert abs(_overlap(first.valid, second.valid) - 0.4) < 1e-9


def test_each_re_execution_is_explained() -> None:
    records = [
        lease("a", 0, 0.0, 3.0),
        *run("x1", "a", 0, 0.1, None),  # killed
        lease("b", 1, 4.0, 7.0),
        *run("x2", "b", 1, 4.1, 4.5, outcome="flaky"),
        lease("b", 2, 5.0, 8.0),
        *run("x3", "b", 2, 5.1, 5.2, outcome="cancelled"),
        lease("c", 3, 9.0, 12.0),
        *run("x4", "c", 3, 9.1, 9.2),
        report("c", 3, True),
    ]

    reasons = [why_again(e) for e in executions(records)]

    assert "killed" in reasons[0]
    assert "planned flake" in reasons[1]
    assert "cancelled" in reasons[2]
    assert reasons[3] == "AFTER AN ACCEPTED REPORT"


# -- the rows -------------------------------------------------------------------------


def at(seconds: float | None) -> dt.datetime | None:
    return None if seconds is None else T0 + dt.timedelta(seconds=seconds)


def run_facts(
    completed: float | None, *tasks: tuple[str, float, float | None, float | None]
) -> RunFacts:
    """A finished run created at T0 and its tasks as (node, created, started, finished)."""
    run = repo.RunRecord(
        run_id="r", workflow_id="wf", version=1, status=RunStatus.SUCCEEDED, input=None,
        config=None, output=None, error=None, idempotency_key=None, created_at=T0,
        updated_at=T0, completed_at=at(completed),
    )  # fmt: skip
    rows = [
        repo.TaskRecord(
            task_id=f"t-{node}",
            node_id=node,
            node_type=NodeType.HTTP,
            state=TaskState.COMPLETED,
            attempt=0,
            input=None,
            output=None,
            error=None,
            error_code=None,
            branches=None,
            wake_at=None,
            awaited_signal=None,
            queue="http",
            lease_owner=None,
            lease_expires_at=None,
            created_at=T0 + dt.timedelta(seconds=c),
            updated_at=T0,
            started_at=at(s),
            finished_at=at(f),
        )
        for node, c, s, f in tasks
    ]
    driven = DrivenRun("k", Planned("wf", {}, Expect("SUCCEEDED")), run_id="r")
    return RunFacts(driven, run, rows, [])


def test_times_in_order_pass() -> None:
    facts = run_facts(5.0, ("a", 0.0, 1.0, 2.0), ("b", 2.0, 2.0, 2.0), ("w", 3.0, None, 4.0))

    assert out_of_order(facts) == []


def test_a_task_that_finished_before_it_started_is_reported() -> None:
    facts = run_facts(5.0, ("a", 0.0, 1.5, 1.0))

    assert out_of_order(facts) == ["task a finished 0.500s early"]


def test_a_task_started_before_it_was_created_is_reported() -> None:
    facts = run_facts(5.0, ("a", 1.0, 0.75, None))

    assert out_of_order(facts) == ["task a started 0.250s early"]


def test_a_run_that_completed_before_it_was_created_is_a_violation() -> None:
    report = Report()

    _check_time_order(report, [run_facts(-0.057)])

    assert report.figures["3. times out of order (finished before started)"] == 1
    assert report.violations == ["run r: run completed 0.057s early"]


def test_a_task_created_after_its_run_finished_is_a_violation() -> None:
    report = Report()

    _check_task_rows(report, [run_facts(5.0, ("a", 0.0, 1.0, 2.0), ("z", 5.057, None, 5.1))])

    assert report.figures["3. tasks created after their run finished"] == 1
    assert report.violations == ["run r: task z created 0.057s after the run finished"]


def limited_run(customer: str, created: float, completed: float) -> RunFacts:
    facts = run_facts(completed, ("a", created, created, completed))
    assert facts.run is not None
    run = dataclasses.replace(facts.run, workflow_id="chaos-limited")
    driven = DrivenRun(
        "k", Planned("chaos-limited", {"customer": customer}, Expect("SUCCEEDED")), run_id="r"
    )
    return RunFacts(driven, run, facts.tasks, [])


def test_a_limited_key_with_one_run_too_many_at_once_is_a_violation() -> None:
    report = Report()
    # acme: two at once, then a third only as the first ends (the slot handed on);
    # globex: three at once for a second
    facts = [
        limited_run("acme", 0.0, 2.0),
        limited_run("acme", 1.0, 4.0),
        limited_run("acme", 2.0, 5.0),
        limited_run("globex", 0.0, 3.0),
        limited_run("globex", 0.5, 3.0),
        limited_run("globex", 2.0, 4.0),
    ]

    _check_run_limits(report, facts)

    assert report.figures["7. most runs of a limited key at once"] == {"acme": 2, "globex": 3}
    assert report.violations == ["key 'globex' of chaos-limited had 3 runs going at once"]


def child(attempt: int, status: RunStatus, run_id: str) -> repo.ChildSummary:
    return repo.ChildSummary(
        run_id, "chaos-chain", 1, status, "child", "t-child", attempt, False, T0, at(1.0)
    )


def test_a_sub_workflow_attempt_with_two_children_or_none_is_a_violation() -> None:
    facts = run_facts(5.0, ("child", 0.0, 0.5, 2.0))
    assert facts.run is not None
    parent = RunFacts(
        DrivenRun("k", Planned("chaos-parent", {}, Expect("SUCCEEDED")), run_id="r"),
        dataclasses.replace(facts.run, workflow_id="chaos-parent"),
        [dataclasses.replace(facts.tasks[0], attempt=2)],
        [],
        [child(0, RunStatus.FAILED, "c0"), child(0, RunStatus.FAILED, "c0b"),
         child(2, RunStatus.SUCCEEDED, "c2")],
    )  # fmt: skip
    report = Report()

    _check_children(report, [parent])

    assert report.figures["8. node attempts with more than one child"] == 1
    assert report.figures["8. node attempts with no child"] == 1  # attempt 1's
    assert report.figures["8. nodes whose end is not their child's"] == 0


def keyed_run(run_id: str, partner: str) -> RunFacts:
    facts = run_facts(9.0, ("a", 0.0, 0.1, 1.0), ("b", 1.0, 1.1, 2.0))
    assert facts.run is not None
    run = dataclasses.replace(facts.run, run_id=run_id, workflow_id="chaos-keyed")
    driven = DrivenRun(
        run_id,
        Planned("chaos-keyed", {"partner": partner}, Expect("SUCCEEDED")),
        run_id=run_id,
    )
    return RunFacts(driven, run, facts.tasks, [])


def execution(
    x: str, run_id: str, owner: str, start: float, end: float, lease_end: float
) -> list[dict[str, Any]]:
    task = f"task-{x}"
    return [
        {"k": "lease", "task": task, "attempt": 0, "owner": owner, "t0": start - 0.01,
         "exp": lease_end, "ok": True},
        {"k": "start", "x": x, "task": task, "run": run_id, "node": "a", "attempt": 0,
         "owner": owner, "t": start},
        {"k": "end", "x": x, "t": end, "outcome": "ok"},
    ]  # fmt: skip


def test_a_node_key_with_one_attempt_too_many_executing_is_a_violation() -> None:
    over = KEYED_MAX + 1
    facts = [keyed_run("r1", "p1"), keyed_run("r2", "p1")]
    facts += [keyed_run(f"q{i}", "p2") for i in range(over)]
    records = [
        # p1: a frozen worker runs on past its lease (ends at 2): the next goes after it,
        # which is no second attempt in flight
        *execution("x1", "r1", "w1", 0.0, 9.0, 2.0),
        *execution("x2", "r2", "w2", 2.5, 5.0, 30.0),
        # p2: one more than its max under valid leases, for a second
        *(
            record
            for i in range(over)
            for record in execution(f"y{i}", f"q{i}", f"w{i}", i * 0.1, 3.0, 30.0)
        ),
    ]
    report = Report()

    _check_node_keys(report, facts, executions(records))

    assert report.figures["11. most attempts of a node key executing at once"] == {
        "partner-p1": 1,
        "partner-p2": over,
    }
    assert report.violations == [
        f"node key 'partner-p2' of chaos-keyed had {over} attempts executing at once"
    ]
    assert report.figures["11. chaos-keyed runs / not ended as planned"] == f"{2 + over} / 0"
