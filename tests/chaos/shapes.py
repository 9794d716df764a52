"""The workflows the chaos suite runs, and what each run must end as.

Every worker node is a TASK on the chaos queue, served by the ledgered no-op
handler (tests/chaos/worker.py); the run's input carries a ``plan`` that
tells each node how long to take and whether to fail (retryably for its first
attempts, or for good). Retry policies allow many more attempts than a plan
fails, because faults cost attempts too (an expired lease is a failed
attempt): a run planned to succeed must succeed whatever the faults did.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from typing import Any

from tests.chaos.cluster import QUEUE

RETRY = {"max_attempts": 12, "initial_seconds": 0.2, "multiplier": 2, "max_seconds": 1}
FORK_WIDTH = 20
EVENT = "go"


def _task(node_id: str) -> dict[str, Any]:
    return {
        "id": node_id,
        "type": "TASK",
        "queue": QUEUE,
        "spec": {"plan": "{{input.plan}}"},
        "timeout_seconds": 30,
        "retry": RETRY,
    }


def _chain(*ids: str) -> list[dict[str, str]]:
    return [{"from": a, "to": b} for a, b in itertools.pairwise(ids)]


BRANCHES = [f"b{i:02d}" for i in range(FORK_WIDTH)]
#: chaos-limited: at most this many runs of one customer at once (run concurrency),
#: over this few customers, so keys fill and runs wait for slots under the faults.
LIMITED_MAX_RUNS = 2
CUSTOMERS = ("acme", "globex", "initech", "umbrella")

#: chaos-keyed: each node's attempts go through a global concurrency key rendered from
#: the run's partner (at most this many executing at once per partner, shared by both
#: nodes) and a rate limit shared by every run (check 11).
KEYED_MAX = 1
PARTNERS = ("p1", "p2", "p3")
KEYED_RATE = {"key": "chaos-rate", "limit": 6, "per_seconds": 1}

#: A schedule of its own, fired by the timer through every fault (check 10: each fire
#: time from the first to the last started once).
SCHEDULE_ID = "chaos-every2"
SCHEDULE_EVERY = 2

WORKFLOWS: dict[str, dict[str, Any]] = {
    "chaos-scheduled": {
        "id": "chaos-scheduled",
        "schedules": [{"id": SCHEDULE_ID, "every_seconds": SCHEDULE_EVERY, "overlap": "allow_all"}],
        "nodes": [{"id": "nap", "type": "WAIT", "spec": {"duration_seconds": 0.1}}],
    },
    "chaos-chain": {
        "id": "chaos-chain",
        "nodes": [_task(n) for n in ("a", "b", "c", "d")],
        "edges": _chain("a", "b", "c", "d"),
    },
    "chaos-limited": {
        "id": "chaos-limited",
        "concurrency": {"key": "{{input.customer}}", "max_runs": LIMITED_MAX_RUNS},
        "priority": "{{input.priority}}",
        "nodes": [_task(n) for n in ("a", "b")],
        "edges": _chain("a", "b"),
    },
    "chaos-keyed": {
        "id": "chaos-keyed",
        "nodes": [
            _task(n)
            | {
                "concurrency": {
                    "key": "partner-{{input.partner}}",
                    "max": KEYED_MAX,
                    "scope": "global",
                },
                "rate_limit": KEYED_RATE,
            }
            for n in ("a", "b")
        ],
        "edges": _chain("a", "b"),
    },
    # a SUB_WORKFLOW: a child run of chaos-chain per attempt, its plan the parent's
    "chaos-parent": {
        "id": "chaos-parent",
        "nodes": [
            _task("a"),
            {
                "id": "child",
                "type": "SUB_WORKFLOW",
                "spec": {"workflow": "chaos-chain", "input": {"plan": "{{input.child_plan}}"}},
            },
            _task("z"),
        ],
        "edges": _chain("a", "child", "z"),
    },
    # a MAP: one TASK per item, each item its own plan, at most 4 at once
    "chaos-map": {
        "id": "chaos-map",
        "nodes": [
            _task("a"),
            {
                "id": "lines",
                "type": "MAP",
                "spec": {
                    "items": "{{input.items}}",
                    "max_parallel": 4,
                    "node": {
                        "type": "TASK",
                        "queue": QUEUE,
                        "spec": {"plan": {"lines": "{{item}}"}},
                        "timeout_seconds": 30,
                        "retry": RETRY,
                    },
                },
            },
            _task("z"),
        ],
        "edges": _chain("a", "lines", "z"),
    },
    "chaos-fork": {
        "id": "chaos-fork",
        "nodes": [
            _task("a"),
            {"id": "fan", "type": "FORK"},
            *[_task(b) for b in BRANCHES],
            {"id": "gather", "type": "JOIN"},
            _task("z"),
        ],
        "edges": [
            {"from": "a", "to": "fan"},
            *[{"from": "fan", "to": b} for b in BRANCHES],
            *[{"from": b, "to": "gather"} for b in BRANCHES],
            {"from": "gather", "to": "z"},
        ],
    },
    "chaos-switch": {
        "id": "chaos-switch",
        "nodes": [
            _task("a"),
            {"id": "route", "type": "SWITCH"},
            _task("left"),
            _task("right"),
            _task("z"),
        ],
        "edges": [
            {"from": "a", "to": "route"},
            {"from": "route", "to": "left", "condition": "{{input.route == 'left'}}"},
            {"from": "route", "to": "right", "condition": "{{input.route != 'left'}}"},
            {"from": "left", "to": "z"},
            {"from": "right", "to": "z"},
        ],
    },
    "chaos-wait": {
        "id": "chaos-wait",
        "nodes": [
            _task("a"),
            {"id": "nap", "type": "WAIT", "spec": {"duration_seconds": "{{input.nap}}"}},
            _task("z"),
        ],
        "edges": _chain("a", "nap", "z"),
    },
    "chaos-event": {
        "id": "chaos-event",
        "nodes": [
            _task("a"),
            _task("b"),
            {
                "id": "ev",
                "type": "WAIT_FOR_EVENT",
                "spec": {"event": EVENT, "timeout_seconds": 900},
            },
            _task("z"),
        ],
        "edges": _chain("a", "b", "ev", "z"),
    },
    "chaos-mixed": {
        "id": "chaos-mixed",
        "nodes": [
            _task("a"),
            {"id": "route", "type": "SWITCH"},
            {"id": "nap", "type": "WAIT", "spec": {"duration_seconds": "{{input.nap}}"}},
            {
                "id": "ev",
                "type": "WAIT_FOR_EVENT",
                "spec": {"event": EVENT, "timeout_seconds": 900},
            },
            _task("z"),
        ],
        "edges": [
            {"from": "a", "to": "route"},
            {"from": "route", "to": "nap", "condition": "{{input.route == 'nap'}}"},
            {"from": "route", "to": "ev", "condition": "{{input.route != 'nap'}}"},
            {"from": "nap", "to": "z"},
            {"from": "ev", "to": "z"},
        ],
    },
}


@dataclass
class Expect:
    """What a run must end as."""

    status: str
    #: Nodes whose task must be COMPLETED.
    completed: list[str] = field(default_factory=list)
    #: Nodes whose task must be FAILED.
    failed: list[str] = field(default_factory=list)
    #: Nodes that must never execute (a branch not taken, a node after a failure).
    not_run: list[str] = field(default_factory=list)
    #: A WAIT node and its seconds: it must not end before its time.
    nap: tuple[str, float] | None = None
    #: The WAIT_FOR_EVENT node that must take this run's signal.
    event_node: str | None = None


@dataclass
class Planned:
    workflow_id: str
    input: dict[str, Any]
    expect: Expect


def _behaviour(rng: random.Random, *, flaky: float = 0.15) -> dict[str, Any]:
    long = rng.random() < 0.1
    step: dict[str, Any] = {
        "sleep": round(rng.uniform(1.0, 2.5) if long else rng.uniform(0.02, 0.2), 3)
    }
    if rng.random() < flaky:
        step["fail_first"] = rng.randint(1, 3)
    return step


def plan_run(rng: random.Random) -> Planned:
    """One run of a random shape, with a random plan, and what it must end as."""
    kind = rng.choices(
        [
            "chain",
            "fork",
            "switch",
            "wait",
            "event",
            "mixed",
            "doomed-chain",
            "doomed-fork",
            "limited",
            "parent",
            "doomed-parent",
            "map",
            "keyed",
        ],
        weights=[20, 12, 15, 13, 15, 13, 6, 6, 12, 10, 4, 10, 12],
    )[0]
    if kind == "keyed":
        plan = {n: _behaviour(rng) for n in ("a", "b")}
        return Planned(
            "chaos-keyed",
            {"plan": plan, "partner": rng.choice(PARTNERS)},
            Expect("SUCCEEDED", completed=["a", "b"]),
        )
    if kind in ("parent", "doomed-parent"):
        plan = {n: _behaviour(rng) for n in ("a", "z")}
        child_plan = {n: _behaviour(rng) for n in ("a", "b", "c", "d")}
        if kind == "parent":
            return Planned(
                "chaos-parent",
                {"plan": plan, "child_plan": child_plan},
                Expect("SUCCEEDED", completed=["a", "child", "z"]),
            )
        bad = rng.choice(list(child_plan))
        child_plan[bad] = child_plan[bad] | {"permanent": True}
        return Planned(
            "chaos-parent",
            {"plan": plan, "child_plan": child_plan},
            Expect("FAILED", completed=["a"], failed=["child"], not_run=["z"]),
        )
    if kind == "map":
        plan = {n: _behaviour(rng) for n in ("a", "z")}
        items = [_behaviour(rng, flaky=0.1) for _ in range(rng.randint(3, 12))]
        return Planned(
            "chaos-map",
            {"plan": plan, "items": items},
            Expect("SUCCEEDED", completed=["a", "lines", "z"]),
        )
    if kind == "limited":
        plan = {n: _behaviour(rng) for n in ("a", "b")}
        customer = rng.choice(CUSTOMERS)
        return Planned(
            "chaos-limited",
            {"plan": plan, "customer": customer, "priority": rng.randint(1, 5)},
            Expect("SUCCEEDED", completed=["a", "b"]),
        )
    if kind in ("chain", "doomed-chain"):
        nodes = ["a", "b", "c", "d"]
        plan = {n: _behaviour(rng) for n in nodes}
        if kind == "chain":
            return Planned("chaos-chain", {"plan": plan}, Expect("SUCCEEDED", completed=nodes))
        bad = rng.choice(nodes)
        plan[bad] = plan[bad] | {"permanent": True}
        later = nodes[nodes.index(bad) + 1 :]
        return Planned(
            "chaos-chain",
            {"plan": plan},
            Expect("FAILED", completed=nodes[: nodes.index(bad)], failed=[bad], not_run=later),
        )
    if kind in ("fork", "doomed-fork"):
        nodes = ["a", *BRANCHES, "z"]
        plan = {n: _behaviour(rng, flaky=0.05) for n in nodes}
        if kind == "fork":
            return Planned("chaos-fork", {"plan": plan}, Expect("SUCCEEDED", completed=nodes))
        bad = rng.choice(BRANCHES)
        plan[bad] = plan[bad] | {"permanent": True}
        # Its siblings may be cancelled mid-flight: only a, the bad branch and z are certain.
        return Planned(
            "chaos-fork",
            {"plan": plan},
            Expect("FAILED", completed=["a"], failed=[bad], not_run=["z"]),
        )
    if kind == "switch":
        route = rng.choice(["left", "right"])
        other = "right" if route == "left" else "left"
        plan = {n: _behaviour(rng) for n in ("a", route, "z")}
        return Planned(
            "chaos-switch",
            {"plan": plan, "route": route},
            Expect("SUCCEEDED", completed=["a", route, "z"], not_run=[other]),
        )
    if kind == "wait":
        nap = round(rng.uniform(1.0, 3.0), 2)
        plan = {n: _behaviour(rng) for n in ("a", "z")}
        return Planned(
            "chaos-wait",
            {"plan": plan, "nap": nap},
            Expect("SUCCEEDED", completed=["a", "nap", "z"], nap=("nap", nap)),
        )
    if kind == "event":
        plan = {n: _behaviour(rng) for n in ("a", "b", "z")}
        return Planned(
            "chaos-event",
            {"plan": plan},
            Expect("SUCCEEDED", completed=["a", "b", "ev", "z"], event_node="ev"),
        )
    route = rng.choice(["nap", "ev"])
    nap = round(rng.uniform(1.0, 3.0), 2)
    plan = {n: _behaviour(rng) for n in ("a", "z")}
    if route == "nap":
        expect = Expect("SUCCEEDED", completed=["a", "nap", "z"], not_run=["ev"], nap=("nap", nap))
    else:
        expect = Expect("SUCCEEDED", completed=["a", "ev", "z"], not_run=["nap"], event_node="ev")
    return Planned("chaos-mixed", {"plan": plan, "route": route, "nap": nap}, expect)
