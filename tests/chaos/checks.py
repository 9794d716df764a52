"""After quiescence: what the database, Redis and the ledger say, checked against the
promises (issue 10), each printed as a figure. Any violation fails the suite.

1. every run terminal, with the status (and the tasks) its shape and plan call for;
2. no two executions of one task overlapping while both held a valid lease under
   different owners (a valid lease: between its grant or renewal and the expiry the
   coordinator set, as the worker's ledger recorded them);
3. one task row per (run, node), none created after its run finished, none still active;
   nothing finished before it started (a run's or a task's times in order). Commit-order
   safe: an ending time is the database clock read at the write, after the run lock
   (queries.sql), so an earlier transaction of the run cannot read as later;
4. every signal consumed exactly once, or reported undeliverable;
5. the outbox empty and no stream entry pending for a finished task;
6. how many tasks ran more than once, and why (allowed: at-least-once);
7. no key of a limited workflow (run concurrency) ever had more runs going than its limit;
8. one child run per SUB_WORKFLOW attempt, none lost or doubled, each finished, the node
   ending as its child did;
9. a MAP's items one task each, its output theirs in order;
11. no node concurrency key (chaos-keyed's, rendered per partner) ever had more than
    its max of attempts executing under a valid lease at once; how many attempts its
    key and its rate limit held (both limits exercised); its runs all ended as planned.
"""

from __future__ import annotations

import collections
import datetime as dt
import itertools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import composer_queue
import composer_repo as repo
from tests.chaos.driver import DrivenRun
from tests.chaos.shapes import KEYED_MAX, LIMITED_MAX_RUNS, SCHEDULE_EVERY, SCHEDULE_ID

ACTIVE = {"PENDING", "QUEUED", "RUNNING", "WAITING"}
#: Below this, two intervals touching are clock rounding, not an overlap.
EPSILON = 1e-3


@dataclass
class RunFacts:
    driven: DrivenRun
    run: repo.RunRecord | None
    tasks: list[repo.TaskRecord]
    signals: list[repo.BufferedSignal]
    #: The runs its SUB_WORKFLOW nodes started (chaos-parent's).
    children: list[repo.ChildSummary] = field(default_factory=list)
    #: Its history (chaos-keyed's only: what was held, and why).
    history: list[repo.HistoryEntry] = field(default_factory=list)

    @property
    def node_tasks(self) -> dict[str, repo.TaskRecord]:
        """Each node's own task (a MAP's items left out)."""
        return {t.node_id: t for t in self.tasks if t.item is None}

    @property
    def items(self) -> list[repo.TaskRecord]:
        """A MAP's item tasks, by index."""
        return sorted((t for t in self.tasks if t.item is not None), key=lambda t: t.item or 0)


@dataclass
class StreamFacts:
    outbox: dict[str, int]
    #: (stream, entry id, task id or None when the entry is gone)
    pending: list[tuple[str, str, str | None]]
    entries: int


async def gather_runs(pool: repo.Pool, driven: Iterable[DrivenRun]) -> list[RunFacts]:
    facts = []
    async with pool.acquire() as conn:
        for d in driven:
            if d.run_id is None:
                facts.append(RunFacts(d, None, [], []))
                continue
            try:
                run = await repo.get_run(conn, d.run_id)
            except repo.NotFound:
                facts.append(RunFacts(d, None, [], []))
                continue
            tasks = await repo.get_run_tasks(conn, d.run_id)
            if d.planned.workflow_id == "chaos-map":  # its items are listed apart
                tasks += await repo.get_map_items(conn, d.run_id, "lines", limit=1000)
            signals = await repo.run_signals(conn, d.run_id)
            children = (
                await repo.run_children(conn, d.run_id)
                if d.planned.workflow_id == "chaos-parent"
                else []
            )
            history = []
            if d.planned.workflow_id == "chaos-keyed":
                history = await repo.run_history(conn, d.run_id, limit=1000)
            facts.append(RunFacts(d, run, tasks, signals, children, history))
    return facts


async def gather_streams(pool: repo.Pool, queue: composer_queue.Queue, prefix: str) -> StreamFacts:
    async with pool.acquire() as conn:
        outbox: dict[str, int] = dict((await repo.outbox_size(conn)).items())
    pending: list[tuple[str, str, str | None]] = []
    entries = 0
    for stream in await queue.streams(prefix):
        entries += await queue.length(stream)
        # A stream no worker read since the last flush has no group: nothing pending.
        for p in await queue.pending(stream, count=10_000):
            found = await queue.entries(stream, start=p.entry_id, end=p.entry_id)
            task_id = found[0].fields.get("task_id") if found else None
            pending.append((stream, p.entry_id, task_id))
    return StreamFacts(outbox, pending, entries)


@dataclass
class Report:
    lines: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)

    def figure(self, name: str, value: Any, *, ok: bool = True, note: str = "") -> None:
        self.figures[name] = value
        mark = "ok " if ok else "BAD"
        self.lines.append(f"  [{mark}] {name}: {value}{f'  ({note})' if note else ''}")

    def violation(self, text: str) -> None:
        self.violations.append(text)

    def render(self) -> str:
        out = list(self.lines)
        if self.violations:
            out.append(f"  {len(self.violations)} violation(s):")
            out.extend(f"    - {v}" for v in self.violations[:40])
            if len(self.violations) > 40:
                out.append(f"    … and {len(self.violations) - 40} more")
        return "\n".join(out)


# -- the ledger ---------------------------------------------------------------------


@dataclass
class Execution:
    x: str
    task: str
    run: str
    node: str
    attempt: int
    owner: str
    start: float
    end: float | None = None
    outcome: str | None = None
    #: The report's fate: True accepted, False stale, None gave up; absent: never reported.
    reported: bool | None = None
    was_reported: bool = False
    valid: list[tuple[float, float]] = field(default_factory=list)


def executions(records: list[dict[str, Any]]) -> list[Execution]:
    """Each handler execution, with the stretches of it during which it held a valid lease."""
    by_x: dict[str, Execution] = {}
    leases: dict[tuple[str, int, str], list[tuple[float, float]]] = collections.defaultdict(list)
    reports: dict[tuple[str, int, str], bool | None] = {}
    for r in records:
        kind = r["k"]
        if kind == "start":
            by_x[r["x"]] = Execution(
                r["x"], r["task"], r["run"], r["node"], r["attempt"], r["owner"], r["t"]
            )
        elif kind == "end" and r["x"] in by_x:
            by_x[r["x"]].end = r["t"]
            by_x[r["x"]].outcome = r["outcome"]
        elif kind == "lease" or (kind == "renew" and r.get("ok")):
            # Valid from the request (the database's clock read it no earlier) to the
            # expiry the coordinator set.
            leases[(r["task"], r["attempt"], r["owner"])].append((r["t0"], r["exp"]))
        elif kind == "report":
            reports[(r["task"], r["attempt"], r["owner"])] = r["accepted"]
    found = []
    for e in by_x.values():
        key = (e.task, e.attempt, e.owner)
        if key in reports:
            e.was_reported, e.reported = True, reports[key]
        end = e.end if e.end is not None else math.inf
        e.valid = _merge(
            (max(e.start, a), min(end, b)) for a, b in leases[key] if min(end, b) > max(e.start, a)
        )
        found.append(e)
    return sorted(found, key=lambda e: e.start)


def _merge(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for a, b in sorted(intervals):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def _overlap(x: list[tuple[float, float]], y: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(b, d) - max(a, c)) for a, b in x for c, d in y)


def why_again(previous: Execution) -> str:
    """Why the execution after ``previous`` (of the same task) happened."""
    if previous.end is None:
        return "its worker was killed mid-run (no end in the ledger)"
    if previous.outcome == "flaky":
        return "the handler failed (planned flake); retried by the node's policy"
    if previous.outcome == "cancelled":
        return "the lease was lost mid-run; the handler was cancelled"
    if previous.outcome == "ok":
        if not previous.was_reported:
            return "it finished, but its worker died before the report got through"
        if previous.reported is False:
            return "it finished after losing its lease (frozen worker); its report was rejected"
        if previous.reported is None:
            return "it finished, but its worker gave up reporting (shutdown)"
        return "AFTER AN ACCEPTED REPORT"
    return f"after a {previous.outcome} outcome"


# -- the checks ---------------------------------------------------------------------


def check(facts: list[RunFacts], records: list[dict[str, Any]], streams_now: StreamFacts) -> Report:
    report = Report()
    execs = executions(records)
    by_task: dict[str, list[Execution]] = collections.defaultdict(list)
    by_run_node: dict[tuple[str, str], list[Execution]] = collections.defaultdict(list)
    for e in execs:
        by_task[e.task].append(e)
        by_run_node[(e.run, e.node)].append(e)
    _check_runs(report, facts, by_run_node)
    _check_overlaps(report, by_task)
    _check_task_rows(report, facts)
    _check_time_order(report, facts)
    _check_signals(report, facts)
    _check_streams(report, facts, streams_now)
    _check_run_limits(report, facts)
    _check_children(report, facts)
    _check_maps(report, facts)
    _check_node_keys(report, facts, execs)
    _reexecutions(report, by_task, len(execs))
    return report


def _check_children(report: Report, facts: list[RunFacts]) -> None:
    """8. Sub-workflows: exactly one child run per attempt of a SUB_WORKFLOW node (none
    lost, none doubled, whatever was killed), every child finished, and the node's end
    the child's."""
    parents = [f for f in facts if f.run is not None and f.run.workflow_id == "chaos-parent"]
    children = doubled = lost = unfinished = wrong = 0
    for f in parents:
        assert f.run is not None
        node = f.node_tasks.get("child")
        by_attempt = collections.Counter(c.attempt for c in f.children)
        children += len(f.children)
        for attempt, n in by_attempt.items():
            if n > 1:
                doubled += 1
                report.violation(f"run {f.run.run_id}: attempt {attempt} of child has {n} children")
        if node is not None and node.state.value != "PENDING":
            for attempt in range(node.attempt + 1):
                if by_attempt[attempt] == 0:
                    lost += 1
                    report.violation(
                        f"run {f.run.run_id}: attempt {attempt} of child has no child run"
                    )
        for c in f.children:
            if not c.status.is_terminal:
                unfinished += 1
                report.violation(f"child run {c.run_id} of {f.run.run_id} is still {c.status}")
        last = max(f.children, key=lambda c: c.attempt, default=None)
        if node is not None and last is not None and node.state.value in ("COMPLETED", "FAILED"):
            ok = (node.state.value == "COMPLETED") == (last.status.value == "SUCCEEDED")
            if not ok:
                wrong += 1
                report.violation(
                    f"run {f.run.run_id}: child is {node.state.value} but its child run "
                    f"{last.run_id} is {last.status.value}"
                )
    report.figure("8. sub-workflow parents / child runs", f"{len(parents)} / {children}")
    report.figure("8. node attempts with more than one child", doubled, ok=doubled == 0)
    report.figure("8. node attempts with no child", lost, ok=lost == 0)
    report.figure("8. child runs not finished", unfinished, ok=unfinished == 0)
    report.figure("8. nodes whose end is not their child's", wrong, ok=wrong == 0)


def _check_maps(report: Report, facts: list[RunFacts]) -> None:
    """9. Maps: a succeeded MAP has one COMPLETED item task per item and its output is
    the list of their outputs, in item order."""
    maps = [f for f in facts if f.run is not None and f.run.workflow_id == "chaos-map"]
    bad = items = 0
    for f in maps:
        assert f.run is not None
        own = f.node_tasks.get("lines")
        if own is None or own.state.value != "COMPLETED":
            continue
        expected = len(f.driven.planned.input["items"])
        got = f.items
        items += len(got)
        problems = []
        if [t.item for t in got] != list(range(expected)):
            problems.append(f"items {[t.item for t in got]} for {expected}")
        if any(t.state.value != "COMPLETED" for t in got):
            problems.append("an item is not COMPLETED")
        if not isinstance(own.output, list) or len(own.output) != expected:
            problems.append(f"output is not a list of {expected}")
        elif own.output != [t.output for t in got]:
            problems.append("output is not the items' outputs in order")
        if problems:
            bad += 1
            report.violation(f"run {f.run.run_id} (chaos-map): {'; '.join(problems)}")
    report.figure("9. map runs / item tasks", f"{len(maps)} / {items}")
    report.figure("9. maps whose items or output are wrong", bad, ok=bad == 0)


def _check_run_limits(report: Report, facts: list[RunFacts]) -> None:
    """7. Run concurrency (docs/architecture.md §4.13): no key ever had more than its
    limit of runs going. A run goes from its first task's creation (the database
    clock of the transaction that started it, after the one that handed it its slot
    committed) to its completion (the clock of the transaction that freed its slot)."""
    spans: dict[str, list[tuple[dt.datetime, dt.datetime]]] = collections.defaultdict(list)
    for f in facts:
        if f.run is None or f.run.workflow_id != "chaos-limited" or f.run.completed_at is None:
            continue
        created = [t.created_at for t in f.tasks]
        if created:
            spans[str(f.driven.planned.input["customer"])].append(
                (min(created), f.run.completed_at)
            )
    most = _most_at_once(spans)
    over = {k: n for k, n in most.items() if n > LIMITED_MAX_RUNS}
    for key, n in over.items():
        report.violation(f"key {key!r} of chaos-limited had {n} runs going at once")
    report.figure(
        "7. most runs of a limited key at once",
        dict(sorted(most.items())),
        ok=not over,
        note=f"limit {LIMITED_MAX_RUNS}",
    )


def _most_at_once(spans: Mapping[str, list[tuple[Any, Any]]]) -> dict[str, int]:
    """For each key, the most of its (start, end) intervals that overlap at one instant;
    an end goes before a start at the same instant (the place was handed on at the end)."""
    most: dict[str, int] = {}
    for key, intervals in spans.items():
        current = 0
        for _, step in sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals]):
            current += step
            most[key] = max(most.get(key, 0), current)
    return most


def _check_node_keys(report: Report, facts: list[RunFacts], execs: list[Execution]) -> None:
    """11. Node concurrency (docs/architecture.md §4.12): no key of chaos-keyed's nodes
    (global, rendered from the run's partner, shared by both nodes) ever had more than
    its max of attempts executing at once. An execution counts while it held a valid
    lease (check 2's stretches): a frozen worker running past its lease is no longer in
    flight (its attempt failed and its place went on), which is what the limit counts.
    Then how many attempts the key and the rate limit held, and that every run of the
    shape ended as planned (nothing lost: check 1 says so too, per run)."""
    partner_of = {
        f.run.run_id: str(f.driven.planned.input["partner"])
        for f in facts
        if f.run is not None and f.run.workflow_id == "chaos-keyed"
    }
    spans: dict[str, list[tuple[float, float]]] = collections.defaultdict(list)
    for e in execs:
        partner = partner_of.get(e.run)
        if partner is not None:
            spans[f"partner-{partner}"].extend(e.valid)
    most = _most_at_once(spans)
    over = {k: n for k, n in most.items() if n > KEYED_MAX}
    for key, n in over.items():
        report.violation(f"node key {key!r} of chaos-keyed had {n} attempts executing at once")
    report.figure(
        "11. most attempts of a node key executing at once",
        dict(sorted(most.items())),
        ok=not over,
        note=f"max {KEYED_MAX}",
    )
    held = collections.Counter(
        "rate" if "rate limit" in str((h.detail or {}).get("reason", "")) else "key"
        for f in facts
        for h in f.history
        if h.kind == "task.held" and isinstance(h.detail, dict)
    )
    report.figure(
        "11. chaos-keyed attempts held for their key / for the rate limit",
        f"{held['key']} / {held['rate']}",
    )
    keyed = [f for f in facts if f.driven.planned.workflow_id == "chaos-keyed"]
    lost = [
        f.driven.run_id or f.driven.key
        for f in keyed
        if f.run is None
        or f.run.status.value != "SUCCEEDED"
        or {n: t.state.value for n, t in f.node_tasks.items()}
        != {"a": "COMPLETED", "b": "COMPLETED"}
    ]
    for run_id in lost:
        report.violation(f"chaos-keyed run {run_id} did not end with both nodes COMPLETED")
    report.figure(
        "11. chaos-keyed runs / not ended as planned", f"{len(keyed)} / {len(lost)}", ok=not lost
    )


def _check_runs(
    report: Report, facts: list[RunFacts], ledger: dict[tuple[str, str], list[Execution]]
) -> None:
    lost = stuck = wrong = 0
    statuses: collections.Counter[str] = collections.Counter()
    for f in facts:
        expect = f.driven.planned.expect
        if f.run is None:
            lost += 1
            report.violation(f"run {f.driven.key} ({f.driven.planned.workflow_id}) was lost")
            continue
        status = f.run.status.value
        statuses[status] += 1
        if status in ("PENDING", "RUNNING"):
            stuck += 1
            active = [(t.node_id, t.state.value, t.attempt) for t in f.tasks if t.state in ACTIVE]
            report.violation(
                f"run {f.run.run_id} ({f.run.workflow_id}) is stuck {status}: {active}"
            )
            continue
        problems = []
        if status != expect.status:
            problems.append(f"ended {status}, expected {expect.status} ({f.run.error})")
        tasks = f.node_tasks
        for node in expect.completed:
            if node not in tasks or tasks[node].state.value != "COMPLETED":
                problems.append(
                    f"{node} is {tasks[node].state.value if node in tasks else 'absent'}"
                )
        for node in expect.failed:
            if node not in tasks or tasks[node].state.value != "FAILED":
                problems.append(f"{node} should have failed")
        for node in expect.not_run:
            if node in tasks and tasks[node].state.value not in ("SKIPPED", "FAILED"):
                problems.append(f"{node} should not have run but is {tasks[node].state.value}")
            if ledger.get((f.run.run_id, node)):
                problems.append(f"{node} should not have run but executed")
        if expect.nap is not None:
            node, seconds = expect.nap
            t = tasks.get(node)
            if t is not None and t.finished_at is not None:
                slept = (t.finished_at - t.created_at).total_seconds()
                if slept < seconds - 0.01:
                    problems.append(f"{node} woke after {slept:.2f}s of its {seconds}s")
        if problems:
            wrong += 1
            report.violation(f"run {f.run.run_id} ({f.run.workflow_id}): {'; '.join(problems)}")
    report.figure("runs", len(facts))
    report.figure("final statuses", dict(statuses))
    report.figure("1. lost runs", lost, ok=lost == 0)
    report.figure("1. stuck runs", stuck, ok=stuck == 0)
    report.figure("1. runs not as their shape and plan call for", wrong, ok=wrong == 0)


def _check_overlaps(report: Report, by_task: dict[str, list[Execution]]) -> None:
    unfenced = [e for runs in by_task.values() for e in runs if not e.valid]
    for e in unfenced[:10]:
        report.violation(
            f"task {e.task} ({e.node} of run {e.run}) attempt {e.attempt} ran under {e.owner} "
            "with no valid lease at any moment"
        )
    report.figure("2. executions without a valid lease", len(unfenced), ok=not unfenced)
    doubles = 0
    for task, runs in by_task.items():
        for i, a in enumerate(runs):
            for b in runs[i + 1 :]:
                if a.owner == b.owner:
                    continue
                shared = _overlap(a.valid, b.valid)
                if shared > EPSILON:
                    doubles += 1
                    report.violation(
                        f"task {task} ({a.node} of run {a.run}) ran concurrently for {shared:.3f}s "
                        f"under two valid leases: {a.owner} attempt {a.attempt} and "
                        f"{b.owner} attempt {b.attempt}"
                    )
    report.figure("2. concurrent double executions", doubles, ok=doubles == 0)


def _check_task_rows(report: Report, facts: list[RunFacts]) -> None:
    duplicates = late = active = 0
    rows = 0
    for f in facts:
        if f.run is None:
            continue
        rows += len(f.tasks)
        seen = collections.Counter((t.node_id, t.item) for t in f.tasks)
        for (node, item), n in seen.items():
            if n > 1:
                duplicates += 1
                what = node if item is None else f"item {item} of {node}"
                report.violation(f"run {f.run.run_id} has {n} tasks for {what}")
        done = f.run.completed_at
        if done is None:
            continue
        for t in f.tasks:
            if t.created_at > done:
                late += 1
                report.violation(
                    f"run {f.run.run_id}: task {t.node_id} created {(t.created_at - done).total_seconds():.3f}s after the run finished"
                )
            if t.state.value in ACTIVE:
                active += 1
                report.violation(
                    f"run {f.run.run_id} finished {f.run.status.value} with task {t.node_id} still {t.state.value}"
                )
    report.figure("task rows", rows)
    report.figure("3. duplicate task rows", duplicates, ok=duplicates == 0)
    report.figure("3. tasks created after their run finished", late, ok=late == 0)
    report.figure("3. tasks still active in a finished run", active, ok=active == 0)


def out_of_order(f: RunFacts) -> list[str]:
    """Each time of the run and its tasks that comes before one it must follow."""
    found: list[str] = []

    def after(what: str, earlier: dt.datetime | None, later: dt.datetime | None) -> None:
        if earlier is not None and later is not None and later < earlier:
            found.append(f"{what} {(earlier - later).total_seconds():.3f}s early")

    if f.run is not None:
        after("run completed", f.run.created_at, f.run.completed_at)
    for t in f.tasks:
        after(f"task {t.node_id} started", t.created_at, t.started_at)
        after(f"task {t.node_id} finished", t.created_at, t.finished_at)
        after(f"task {t.node_id} finished", t.started_at, t.finished_at)
    return found


def _check_time_order(report: Report, facts: list[RunFacts]) -> None:
    bad = 0
    for f in facts:
        for problem in out_of_order(f):
            bad += 1
            report.violation(f"run {f.run.run_id if f.run else f.driven.key}: {problem}")
    report.figure("3. times out of order (finished before started)", bad, ok=bad == 0)


def _check_signals(report: Report, facts: list[RunFacts]) -> None:
    outcomes: collections.Counter[str] = collections.Counter()
    bad = 0
    resent = 0
    for f in facts:
        if f.run is None:
            continue
        sent = {s.signal_id: s for s in f.driven.signals}
        taken: collections.Counter[str] = collections.Counter()
        for t in f.tasks:
            if t.node_type.value == "WAIT_FOR_EVENT" and isinstance(t.output, dict):
                sig = t.output.get("sig")
                if isinstance(sig, str):
                    taken[sig] += 1
        buffered: dict[str, list[repo.BufferedSignal]] = collections.defaultdict(list)
        for b in f.signals:
            sig = b.payload.get("sig") if isinstance(b.payload, dict) else None
            buffered[str(sig)].append(b)
        for sig in set(taken) | set(buffered):
            if sig not in sent:
                bad += 1
                report.violation(f"run {f.run.run_id}: signal {sig} was never sent")
        for sig, s in sent.items():
            resent += s.resends
            n_taken, rows = taken[sig], buffered.get(sig, [])
            if s.outcome == "refused":
                outcomes["refused: the run was over (undeliverable)"] += 1
                if n_taken or rows:
                    bad += 1
                    report.violation(f"run {f.run.run_id}: refused signal {sig} was kept")
                continue
            if s.outcome not in ("delivered", "buffered"):
                bad += 1
                report.violation(f"run {f.run.run_id}: signal {sig}: {s.outcome}")
                continue
            if n_taken == 1 and len(rows) <= 1 and all(r.consumed_at for r in rows):
                outcomes[f"consumed exactly once ({s.outcome} on arrival)"] += 1
            elif n_taken == 0 and len(rows) == 1 and rows[0].consumed_at is None:
                outcomes["buffered, never consumed: the run ended first (undeliverable)"] += 1
            elif n_taken == 0 and not rows:
                bad += 1
                report.violation(f"run {f.run.run_id}: signal {sig} ({s.outcome}) was lost")
            else:
                bad += 1
                report.violation(
                    f"run {f.run.run_id}: signal {sig} ({s.outcome}) taken {n_taken} time(s), "
                    f"buffered {len(rows)} time(s)"
                )
    report.figure("signals sent", sum(len(f.driven.signals) for f in facts))
    report.figure("signal outcomes", dict(outcomes))
    report.figure("signals sent again after an unknown outcome (had not landed)", resent)
    report.figure("4. signals lost, duplicated or phantom", bad, ok=bad == 0)


def _check_streams(report: Report, facts: list[RunFacts], s: StreamFacts) -> None:
    finished = {t.task_id for f in facts for t in f.tasks if t.state.value not in ACTIVE}
    outbox = sum(s.outbox.values())
    stale = [p for p in s.pending if p[2] is None or p[2] in finished]
    report.figure("5. outbox rows left", outbox, ok=outbox == 0)
    report.figure("5. stream entries pending for finished tasks", len(stale), ok=not stale)
    report.figure("stream entries left (any state)", s.entries)
    for stream, entry_id, task_id in stale[:10]:
        report.violation(f"{stream} {entry_id} is pending for finished task {task_id}")
    if outbox:
        report.violation(f"the outbox still holds {s.outbox}")


def _reexecutions(report: Report, by_task: dict[str, list[Execution]], total: int) -> None:
    reasons: collections.Counter[str] = collections.Counter()
    for runs in by_task.values():
        for previous in runs[:-1]:
            reasons[why_again(previous)] += 1
    again = sum(1 for runs in by_task.values() if len(runs) > 1)
    report.figure("executions in the ledger", total)
    report.figure("tasks executed", len(by_task))
    report.figure("6. tasks that ran more than once", again)
    for reason, n in reasons.most_common():
        report.figure(f"6.   re-executions: {reason}", n, ok="ACCEPTED" not in reason)
        if "ACCEPTED" in reason:
            report.violation(f"{n} task(s) ran again after a report that was accepted")


def utc(ts: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(ts, dt.UTC)


async def check_schedule(pool: repo.Pool, report: Report) -> None:
    """Check 10: the chaos schedule (paused first) started each of its fire times from
    the first to the last exactly once, whatever was killed meanwhile."""
    async with repo.connection(pool) as conn:
        await conn.execute("UPDATE schedules SET paused = true WHERE id = $1", SCHEDULE_ID)
        rows = await conn.fetch(
            "SELECT scheduled_for FROM workflow_runs WHERE schedule_id = $1 ORDER BY scheduled_for",
            SCHEDULE_ID,
        )
    times = [r[0] for r in rows]
    step = dt.timedelta(seconds=SCHEDULE_EVERY)
    doubled = sum(1 for a, b in itertools.pairwise(times) if a == b)
    distinct = sorted(set(times))
    missing = sum(round((b - a) / step) - 1 for a, b in itertools.pairwise(distinct))
    ok = bool(times) and not doubled and not missing
    report.figure(
        "schedule fires (every 2 s): started, doubled, missing",
        f"{len(times)}, {doubled}, {missing}",
        ok=ok,
    )
    if not times:
        report.violation(f"schedule {SCHEDULE_ID} started no run")
    if doubled or missing:
        report.violation(
            f"schedule {SCHEDULE_ID}: {doubled} fire time(s) started twice, {missing} missing"
        )
