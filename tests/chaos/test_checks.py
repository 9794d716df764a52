"""The ledger checks on hand-written ledgers: a zombie past its lease is no double
execution, two valid leases at once are, and each re-execution gets its reason."""

from __future__ import annotations

from typing import Any

from tests.chaos.checks import _overlap, executions, why_again


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
