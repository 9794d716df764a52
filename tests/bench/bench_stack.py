"""The whole stack as processes: throughput, latency and cost, beside the hardware ceiling.

Starts every service as ``make run`` does (tests/bench/_procs.py: one replica
each, one process each, on free ports, a scratch database and a private Redis
prefix) plus no-op SDK worker processes, waits for /readyz, and runs, through
the public REST API:

- **idle** 10 runs of the W1 chain one at a time: the step gap of an idle stack;
- **w1** 200 runs of a 10-step chain of no-op TASK nodes, started at once:
  steps/s, runs/s, the step gap (a task's report committed → the next task's
  handler starts: the next handler's start as the worker records it minus the
  task's finished_at, which is the report transaction's now(), so the gap
  includes that commit) split into report → lease (the next task's started_at)
  and lease → handler, and run latency (created_at → completed_at);
- **ceiling** the same number of engine-like transactions (lock a row, read,
  insert two rows, update one, commit) from a plain asyncpg loop at the
  coordinator's pool size, on the same database (tests/bench/_sql.py);
  commits_per_step is W1's xact_commit delta (pg_stat_database) ÷ steps, and
  ceiling_ratio = w1 steps/s ÷ (ceiling tx/s ÷ commits per step);
- **w2** 20 runs of FORK → 100 no-op TASKs → JOIN: tasks/s and join latency
  (the last branch's report → the JOIN's completion);
- **w4** 1,000 runs of one 1-second WAIT: firing lag (completion - due);
- **w3** 5,000 starts of a 1-node workflow by 32 concurrent clients through
  POST /v1/runs: starts/s and start latency. Its TASK goes to a queue no worker
  serves, so W3 measures starting (the start transaction and the dispatch to
  Redis), not running; it goes last, leaving those runs active.

Counting commits: PostgreSQL flushes a backend's statistics lazily (a busy one
at most once a second, an idle one about 10 s after it goes idle), so
xact_commit is read only after the services have been idle for ``SETTLE``
seconds, before and after W1. What the idle services' own polling commits
meanwhile (measured over a quiet window first) and the benchmark's own
completion polls (counted exactly) are subtracted. The pg_stat reads run on a
connection to another database, so they never count.

Cost (over W1): CPU seconds per 1,000 steps for each process, for the
PostgreSQL backends of the scratch database and for the Redis server (server
wide: other users of that Redis count too), from /proc/<pid>/stat; peak RSS
(VmHWM) per process at the end. ``foreign_cores_w1`` is the CPU the rest of
the machine used meanwhile (other test suites): the load these figures were
taken under.

``--profile`` runs W1 once more at the end with py-spy attached to the
coordinator, the outbox-enqueuer, the api-gateway and a worker, and
summarises where each spent its CPU (tests/bench/_profile.py); those figures
are kept apart (``profile_*``) since sampling perturbs the run.

Options (``python -m tests.bench stack [options]``, or ``make bench BENCH_ARGS=…``):
``--only w1,ceiling`` (the ceiling needs w1), ``--scale 0.1`` (every size
times 0.1, for a quick run), ``--workers N``, ``--worker-concurrency N``,
``--replicas outbox-enqueuer=2``, ``--env COMPOSER_X=value`` (a setting for
every service), ``--profile``.

Uses COMPOSER_TEST_DATABASE_URL / COMPOSER_TEST_REDIS_URL (default the local servers).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import itertools
import os
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

import composer_queue
import composer_repo as repo
from tests.bench import _sql, options
from tests.bench._procs import (
    API_TOKEN,
    ProcessStack,
    Profiler,
    cpu_seconds,
    machine_busy_seconds,
    py_spy,
)
from tests.bench._profile import render, summarise
from tests.integration.databases import new_database_name

#: The runner copies this module's figures to the top level of the results JSON.
HEADLINE = True
ADMIN_URL = os.environ.get(
    "COMPOSER_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
REDIS_URL = os.environ.get("COMPOSER_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
WORKLOADS = ("idle", "w1", "ceiling", "w2", "w4", "w3")
#: Seconds of quiet before reading pg_stat_database (idle backends flush after ~10 s).
SETTLE = 11.5
CEILING_CONCURRENCY = 16  # the coordinator's pool size, the engine's concurrency at the database
CHAIN_STEPS = 10
FANOUT = 100


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tests.bench stack")
    p.add_argument("--only", default=",".join(WORKLOADS), help=f"of {', '.join(WORKLOADS)}")
    p.add_argument("--scale", type=float, default=1.0, help="every size times this")
    p.add_argument("--workers", type=int, default=1, help="no-op worker processes")
    p.add_argument("--worker-concurrency", type=int, default=64)
    p.add_argument(
        "--replicas", action="append", default=[], metavar="SERVICE=N", help="repeatable"
    )
    p.add_argument(
        "--env", action="append", default=[], metavar="COMPOSER_X=V", help="a service setting"
    )
    p.add_argument("--profile", action="store_true", help="profile a second W1 with py-spy")
    args = p.parse_args(argv)
    args.only = [w.strip() for w in args.only.split(",") if w.strip()]
    unknown = set(args.only) - set(WORKLOADS)
    if unknown:
        p.error(f"unknown workload(s) {', '.join(sorted(unknown))}")
    if "ceiling" in args.only and "w1" not in args.only:
        args.only.insert(0, "w1")
    args.replicas = {k: int(v) for k, _, v in (r.partition("=") for r in args.replicas)}
    args.env = dict(e.partition("=")[::2] for e in args.env)
    return args


def loadavg() -> list[float]:
    return [float(v) for v in Path("/proc/loadavg").read_text().split()[:3]]


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def chain(steps: int) -> dict[str, Any]:
    ids = [f"s{i}" for i in range(steps)]
    return {
        "id": "bench-chain",
        "nodes": [{"id": i, "type": "TASK", "queue": "bench", "spec": {}} for i in ids],
        "edges": [{"from": a, "to": b} for a, b in itertools.pairwise(ids)],
    }


def fanout(width: int) -> dict[str, Any]:
    branches = [f"b{i}" for i in range(width)]
    return {
        "id": "bench-fanout",
        "nodes": [
            {"id": "fork", "type": "FORK"},
            *({"id": b, "type": "TASK", "queue": "bench", "spec": {}} for b in branches),
            {"id": "join", "type": "JOIN"},
        ],
        "edges": [
            *({"from": "fork", "to": b} for b in branches),
            *({"from": b, "to": "join"} for b in branches),
        ],
    }


ONE_NODE = {
    "id": "bench-one",
    "nodes": [{"id": "only", "type": "TASK", "queue": "bench-unserved", "spec": {}}],
}
ONE_WAIT = {
    "id": "bench-wait",
    "nodes": [{"id": "nap", "type": "WAIT", "spec": {"duration_seconds": 1}}],
}


@dataclass
class Bench:
    args: argparse.Namespace
    stack: ProcessStack
    http: aiohttp.ClientSession
    mon: Any  # a repo connection to the scratch database (its queries are counted)
    stats: _sql.Stats
    redis_pid: int
    polls: int = 0
    figures: dict[str, float] = field(default_factory=dict)

    def n(self, size: int) -> int:
        return max(1, round(size * float(self.args.scale)))

    # -- the API -----------------------------------------------------------------

    async def deploy(self, definition: dict[str, Any]) -> None:
        async with self.http.post(
            f"{self.stack.api_url}/v1/workflows", params={"deploy": "true"}, json=definition
        ) as r:
            if r.status >= 300:
                raise RuntimeError(f"deploying {definition['id']}: {r.status} {await r.text()}")

    async def start(self, workflow_id: str) -> tuple[str, float]:
        """Start a run; returns its id and the call's latency in seconds."""
        t0 = time.perf_counter()
        async with self.http.post(
            f"{self.stack.api_url}/v1/runs", json={"workflow_id": workflow_id, "input": {}}
        ) as r:
            body = await r.json()
            if r.status != 201:
                raise RuntimeError(f"starting {workflow_id}: {r.status} {body}")
        return str(body["run_id"]), time.perf_counter() - t0

    async def start_many(self, workflow_id: str, n: int, clients: int) -> list[tuple[str, float]]:
        slots = asyncio.Semaphore(clients)

        async def one() -> tuple[str, float]:
            async with slots:
                return await self.start(workflow_id)

        return list(await asyncio.gather(*(one() for _ in range(n))))

    # -- waiting and reading -------------------------------------------------------

    async def all_done(self, since: dt.datetime, timeout: float) -> None:
        """Poll until no run created since ``since`` is active (run ids are UUIDv7s:
        W3's runs, which stay active, are older). Each poll is one counted transaction."""
        start, end = since - dt.timedelta(milliseconds=5), since + dt.timedelta(days=1)
        deadline = time.monotonic() + timeout
        while True:
            self.polls += 1
            if await repo.count_active_runs(self.mon, start=start, end=end) == 0:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"runs still active after {timeout:.0f} s")
            self.check_alive()
            await asyncio.sleep(0.05)

    async def metric(self, service: str, name: str) -> float:
        """The sum of a metric's samples (every label set) on a service's /metrics."""
        port = self.stack.admin_ports[service]
        async with self.http.get(f"http://127.0.0.1:{port}/metrics") as r:
            text = await r.text()
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name) and line[len(name) : len(name) + 1] in (" ", "{"):
                total += float(line.rsplit(" ", 1)[1])
        return total

    async def outbox_lag(self) -> tuple[float, float]:
        """(seconds, dispatches) published so far: composer_outbox_lag_seconds' sum and count."""
        return (
            await self.metric("outbox-enqueuer", "composer_outbox_lag_seconds_sum"),
            await self.metric("outbox-enqueuer", "composer_outbox_lag_seconds_count"),
        )

    def check_alive(self) -> None:
        for p in self.stack.procs:
            if p.process is not None and p.process.returncode is not None:
                raise RuntimeError(f"{p.name} exited with {p.process.returncode}: see {p.log_path}")

    async def runs(self, run_ids: list[str]) -> list[tuple[repo.RunRecord, list[repo.TaskRecord]]]:
        out = []
        for run_id in run_ids:
            out.append(
                (await repo.get_run(self.mon, run_id), await repo.get_run_tasks(self.mon, run_id))
            )
        return out

    def handler_starts(self) -> dict[str, float]:
        starts: dict[str, float] = {}
        for i in range(self.stack.workers):
            path = self.stack.records_path(i)
            if path.exists():
                for line in path.read_text().splitlines():
                    task_id, _, at = line.partition("\t")
                    starts.setdefault(task_id, float(at))  # the first start of an attempt
        return starts

    async def settled_commits(self) -> int:
        await asyncio.sleep(SETTLE)
        return await self.stats.commits()

    # -- cost ------------------------------------------------------------------------

    async def cpu_snapshot(self) -> dict[str, float]:
        snap = self.stack.cpu()
        pg = await self.stats.backend_pids()
        snap |= {f"pg:{pid}": cpu_seconds(pid) for pid in pg}
        snap["redis"] = cpu_seconds(self.redis_pid)
        snap["bench"] = cpu_seconds(os.getpid())
        snap["machine"] = machine_busy_seconds()
        return snap


async def w1(
    b: Bench, label: str = "w1", *, runs: int | None = None, one_at_a_time: bool = False
) -> tuple[float, dict[str, float], dict[str, float]]:
    """Returns the elapsed seconds and the CPU snapshots before and after.

    ``one_at_a_time``: each run starts when the one before has finished (the
    step gap of an idle stack)."""
    runs = runs or b.n(200)
    steps = runs * CHAIN_STEPS
    cpu0 = await b.cpu_snapshot()
    since = dt.datetime.now(dt.UTC)
    t0 = time.time()
    if one_at_a_time:
        started = []
        for _ in range(runs):
            started.append(await b.start("bench-chain"))
            await b.all_done(since, timeout=60)
    else:
        started = await b.start_many("bench-chain", runs, clients=runs)
        await b.all_done(since, timeout=600)
    cpu1 = await b.cpu_snapshot()
    details = await b.runs([r for r, _ in started])
    last = max(r.completed_at for r, _ in details if r.completed_at is not None)
    elapsed = last.timestamp() - t0
    handler = b.handler_starts()
    gaps, to_lease, to_handler, latency = [], [], [], []
    for run, tasks in details:
        assert run.completed_at is not None, run
        latency.append((run.completed_at - run.created_at).total_seconds() * 1000)
        by_node = {t.node_id: t for t in tasks}
        for i in range(CHAIN_STEPS - 1):
            prev, nxt = by_node[f"s{i}"], by_node[f"s{i + 1}"]
            if prev.finished_at is None or nxt.started_at is None or nxt.task_id not in handler:
                continue
            done = prev.finished_at.timestamp()
            gaps.append((handler[nxt.task_id] - done) * 1000)
            to_lease.append((nxt.started_at.timestamp() - done) * 1000)
            to_handler.append((handler[nxt.task_id] - nxt.started_at.timestamp()) * 1000)
    b.figures |= {
        f"{label}_runs": float(runs),
        f"{label}_steps": float(steps),
        f"{label}_elapsed_s": elapsed,
        f"{label}_steps_per_s": steps / elapsed,
        f"{label}_runs_per_s": runs / elapsed,
        f"{label}_step_gap_p50_ms": percentile(gaps, 0.50),
        f"{label}_step_gap_p95_ms": percentile(gaps, 0.95),
        f"{label}_step_gap_p99_ms": percentile(gaps, 0.99),
        f"{label}_gap_report_to_lease_p50_ms": percentile(to_lease, 0.50),
        f"{label}_gap_lease_to_handler_p50_ms": percentile(to_handler, 0.50),
        f"{label}_run_latency_p50_ms": percentile(latency, 0.50),
        f"{label}_run_latency_p99_ms": percentile(latency, 0.99),
    }
    return elapsed, cpu0, cpu1


def cost(
    b: Bench, steps: int, cpu0: dict[str, float], cpu1: dict[str, float], seconds: float
) -> None:
    """CPU seconds per 1,000 steps by process (services, PostgreSQL backends, Redis)."""
    per_k = 1000.0 / steps
    delta = {k: max(0.0, v - cpu0.get(k, 0.0)) for k, v in cpu1.items() if k != "machine"}
    postgres = sum(v for k, v in delta.items() if k.startswith("pg:"))
    services = {k: v for k, v in delta.items() if not k.startswith("pg:")}
    services.pop("redis")
    bench_client = services.pop("bench")
    for name, seconds_used in services.items():
        b.figures[f"cpu_{name.replace('-', '_')}_s_per_1k_steps"] = seconds_used * per_k
    ours = sum(delta.values())
    b.figures |= {
        "cpu_services_s_per_1k_steps": sum(services.values()) * per_k,
        "cpu_postgres_s_per_1k_steps": postgres * per_k,
        "cpu_redis_s_per_1k_steps": delta["redis"] * per_k,
        "cpu_total_s_per_1k_steps": (ours - bench_client) * per_k,
        "cpu_bench_client_s_per_1k_steps": bench_client * per_k,
    }
    machine = cpu1["machine"] - cpu0["machine"]
    b.figures["machine_busy_cores_w1"] = machine / seconds
    b.figures["foreign_cores_w1"] = max(0.0, machine - ours) / seconds


async def idle(b: Bench) -> None:
    """The step gap when idle: 10 chains, one at a time."""
    lag0, n0 = await b.outbox_lag()
    await w1(b, label="idle", runs=b.n(10), one_at_a_time=True)
    lag1, n1 = await b.outbox_lag()
    for key in list(b.figures):
        if key.startswith("idle_") and not ("gap" in key or "latency" in key):
            del b.figures[key]
    # the report's commit → its dispatch in Redis, part of report → lease
    b.figures["idle_outbox_lag_mean_ms"] = (lag1 - lag0) / max(1.0, n1 - n0) * 1000


async def w1_with_commits(b: Bench) -> None:
    # the idle services' own polling, to subtract from the W1 window
    quiet0 = await b.settled_commits()
    q0 = time.monotonic()
    await asyncio.sleep(5.0)
    quiet1 = await b.stats.commits()
    background = (quiet1 - quiet0) / (time.monotonic() - q0)
    polls0 = b.polls
    c0 = await b.settled_commits()
    window0 = time.monotonic()
    elapsed, cpu0, cpu1 = await w1(b)
    c1 = await b.settled_commits()
    window = time.monotonic() - window0
    steps = b.figures["w1_steps"]
    engine_commits = (c1 - c0) - (b.polls - polls0) - background * window
    b.figures |= {
        "w1_commits": float(engine_commits),
        "commits_per_step": engine_commits / steps,
        "background_commits_per_s": background,
    }
    cost(b, int(steps), cpu0, cpu1, elapsed)


async def ceiling(b: Bench, url: str) -> None:
    transactions = max(1, round(b.figures.get("w1_commits", b.n(200) * CHAIN_STEPS * 3)))
    tx_per_s = await _sql.ceiling(
        url, transactions=transactions, concurrency=CEILING_CONCURRENCY, rows=b.n(200)
    )
    commits = b.figures.get("commits_per_step", float("nan"))
    b.figures |= {
        "ceiling_transactions": float(transactions),
        "ceiling_concurrency": float(CEILING_CONCURRENCY),
        "ceiling_tx_per_s": tx_per_s,
        "ceiling_steps_per_s": tx_per_s / commits,
        "ceiling_ratio": b.figures["w1_steps_per_s"] / (tx_per_s / commits),
    }


async def w2(b: Bench) -> None:
    runs = b.n(20)
    since = dt.datetime.now(dt.UTC)
    t0 = time.time()
    started = await b.start_many("bench-fanout", runs, clients=runs)
    await b.all_done(since, timeout=600)
    details = await b.runs([r for r, _ in started])
    last = max(r.completed_at for r, _ in details if r.completed_at is not None)
    elapsed = last.timestamp() - t0
    joins = []
    for _, tasks in details:
        by_node = {t.node_id: t for t in tasks}
        branch_done = max(
            t.finished_at for t in tasks if t.node_id.startswith("b") and t.finished_at
        )
        join = by_node["join"].finished_at
        assert join is not None
        joins.append((join - branch_done).total_seconds() * 1000)
    b.figures |= {
        "w2_runs": float(runs),
        "w2_tasks": float(runs * FANOUT),
        "w2_elapsed_s": elapsed,
        "w2_tasks_per_s": runs * FANOUT / elapsed,
        "w2_join_latency_p50_ms": percentile(joins, 0.5),
        "w2_join_latency_max_ms": max(joins),
    }


async def w3(b: Bench) -> None:
    n = b.n(5000)
    t0 = time.perf_counter()
    started = await b.start_many("bench-one", n, clients=32)
    elapsed = time.perf_counter() - t0
    latency = [s * 1000 for _, s in started]
    b.figures |= {
        "w3_starts": float(n),
        "w3_clients": 32.0,
        "w3_starts_per_s": n / elapsed,
        "w3_start_latency_p50_ms": percentile(latency, 0.5),
        "w3_start_latency_p99_ms": percentile(latency, 0.99),
    }


async def w4(b: Bench) -> None:
    n = b.n(1000)
    since = dt.datetime.now(dt.UTC)
    t0 = time.perf_counter()
    started = await b.start_many("bench-wait", n, clients=32)
    starts = time.perf_counter() - t0
    await b.all_done(since, timeout=600)
    lags = []
    for _, tasks in await b.runs([r for r, _ in started]):
        nap = tasks[0]
        assert nap.started_at and nap.finished_at, nap
        due = nap.started_at + dt.timedelta(seconds=1)
        lags.append((nap.finished_at - due).total_seconds() * 1000)
    b.figures |= {
        "w4_waits": float(n),
        "w4_starts_s": starts,
        "w4_timer_lag_p50_ms": percentile(lags, 0.5),
        "w4_timer_lag_p99_ms": percentile(lags, 0.99),
        "w4_timer_lag_max_ms": max(lags),
    }


async def profile(b: Bench) -> None:
    command = py_spy()
    if command is None:
        print("no py-spy (pip install py-spy, or install uv): no profile")
        return
    profiler = Profiler(command, b.stack.workdir)
    names = ["coordinator", "outbox-enqueuer", "api-gateway", "bench-worker-0"]
    for name in names:
        await profiler.attach(name, b.stack.pid(name))
    await asyncio.sleep(2.0)  # py-spy attaches
    elapsed, cpu0, cpu1 = await w1(b, label="profile_w1")
    outputs = await profiler.stop()
    steps = b.figures["profile_w1_steps"]
    print(f"\nprofile of W1 ({steps:.0f} steps in {elapsed:.1f} s, py-spy attached):")
    for name, path in outputs.items():
        p = summarise(path)
        cpu_ms = (cpu1.get(name, 0.0) - cpu0.get(name, 0.0)) * 1000 / steps
        print(render(name, p, cpu_ms))
        key = name.replace("-", "_")
        b.figures[f"profile_{key}_cpu_ms_per_step"] = cpu_ms
        for kind, share in p.self_share.items():
            b.figures[f"profile_{key}_self_{kind}_pct"] = share * 100
    print(f"(raw stacks in {b.stack.workdir})\n")


async def main() -> dict[str, float]:
    args = parse(options())
    name = new_database_name("composer_bench_stack")
    await repo.create_database(ADMIN_URL, name)
    url = repo.database_url(ADMIN_URL, name)
    prefix = f"bench-{uuid.uuid4().hex[:10]}"
    workdir = Path(tempfile.mkdtemp(prefix="composer-bench-"))
    redis = composer_queue.connect(REDIS_URL)
    mon = await repo.connect(url)
    stats = await _sql.Stats.open(ADMIN_URL, name)
    stack = ProcessStack(
        url,
        REDIS_URL,
        prefix,
        workdir,
        workers=args.workers,
        worker_concurrency=args.worker_concurrency,
        queues=("bench",),
        replicas=args.replicas,
        settings=args.env,
    )
    print(f"  scratch database {name}, Redis prefix {prefix}, logs in {workdir}", flush=True)
    try:
        await repo.migrate(mon)
        load = loadavg()
        await stack.start()
        headers = {"Authorization": f"Bearer {API_TOKEN}"}
        connector = aiohttp.TCPConnector(limit=256)
        async with aiohttp.ClientSession(headers=headers, connector=connector) as http:
            b = Bench(args, stack, http, mon, stats, await redis.server_pid())
            for definition in (chain(CHAIN_STEPS), fanout(FANOUT), ONE_NODE, ONE_WAIT):
                await b.deploy(definition)
            b.figures |= {
                "loadavg_1m_at_start": load[0],
                "loadavg_5m_at_start": load[1],
                "scale": args.scale,
                "workers": float(args.workers),
                "worker_concurrency": float(args.worker_concurrency),
            }
            steps: dict[str, Callable[[], Awaitable[None]]] = {
                "idle": lambda: idle(b),
                "w1": lambda: w1_with_commits(b),
                "ceiling": lambda: ceiling(b, url),
                "w2": lambda: w2(b),
                "w4": lambda: w4(b),
                "w3": lambda: w3(b),
            }
            for workload in WORKLOADS:
                if workload in args.only:
                    t = time.perf_counter()
                    await steps[workload]()
                    print(f"  {workload} done in {time.perf_counter() - t:.1f} s", flush=True)
            if args.profile:
                await profile(b)
            b.figures["loadavg_1m_at_end"] = loadavg()[0]
            stack.sample_rss()
            for p in stack.procs:
                b.figures[f"peak_rss_{p.name.replace('-', '_')}_mb"] = p.peak_rss
    finally:
        await stack.stop()
        await stats.close()
        await mon.close()
        await redis.drop(prefix)
        await redis.close()
        await repo.drop_database(ADMIN_URL, name)
    return b.figures
