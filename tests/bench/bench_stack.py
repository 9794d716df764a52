"""The whole stack as processes: throughput, latency and cost, beside the hardware ceiling.

Starts every service as ``make run`` does (tests/bench/_procs.py: one replica
each, one process each, on free ports, a scratch database, a redis-server of
its own where one is installed, else a private prefix on the shared Redis)
plus no-op SDK worker processes (tests/bench/_noop_worker.py), waits
for /readyz, and drives runs through the public REST API (POST /v1/runs). It
learns that a run finished from the engine's own "run finished" hint (Redis
pub/sub, published after the run's last transaction commits), so waiting costs
the database nothing; only when no hint came for ``STALL`` seconds does it ask
the database, and those reads are counted and subtracted (see Counting). Only
runs that SUCCEEDED count: a failed run's steps count nowhere, and
``<workload>_runs_failed`` says how many there were.

Workloads (sizes at ``--scale 1``):

- **idle** 10 runs of the W1 chain one at a time: the step gaps of an idle stack;
- **w1** up to 1,500 runs of a 10-step chain of no-op TASK nodes, 200 in flight
  (a new run starts as one finishes), no run started later than 40 s after the
  first: at 1,500 steps/s that is 10 s of work, and a slower stack is measured
  for about 40 s. Figures: ``w1_steps_per_s`` (steps of succeeded runs ÷ first
  start → last completion), ``w1_steady_steps_per_s`` (steps whose report
  committed between the first run's completion and the last start, when 200
  were in flight, ÷ that window, ``w1_steady_window_s``), run latency
  (created_at → completed_at), and the gaps between consecutive steps of a run,
  all from the database's now() and the worker's clock (one machine):
  ``w1_gap_report_tx_to_handler_*`` the previous task's report transaction
  (its finished_at, the transaction's now(), so taken before its commit) → the
  next task's handler starts; ``w1_gap_report_acked_to_handler_*`` the worker
  got the answer to that report (after its commit) → the next handler starts.
  "Report committed → next handler starts" lies between the two (PostgreSQL
  here keeps no commit timestamps). Its parts: ``w1_gap_report_tx_to_lease_p50_ms``
  (→ the next task's lease transaction, its started_at) and
  ``w1_gap_lease_to_handler_p50_ms``; ``w1_handler_to_next_handler_p50_ms`` is a
  chain's whole period per step as a handler sees it;
- **ceiling** engine-like transactions (lock a row, read, insert two rows,
  update one, commit: one durable step transaction; tests/bench/_sql.py) from a
  plain asyncpg loop at the coordinator's pool size on the same database, for
  10 s: ``ceiling_tx_per_s``, and ``w1_steps_per_ceiling_tx`` = w1 steps/s ÷
  ceiling tx/s (1.0 would be one step per transaction of the plain loop, so
  fewer commits per step can only raise it; ``ceiling_durable`` is 1 when the
  server has fsync on and synchronous_commit not off);
- **w2** up to 150 runs of FORK → 100 no-op TASKs → JOIN, 20 in flight, same
  40 s limit on starting: tasks/s and join latency (the last branch's report →
  the JOIN's completion); W2 and W6 also give the CPU per task of each process (the
  services, the PostgreSQL backends, Redis) and of all of them
  (``w2_cpu_postgres_ms_per_task``, …), to tell where a MAP item and a FORK branch differ;
- **w4** 1,000 runs of one WAIT, all due at one moment 8 s after the first start
  (each run's input says how long from its start): firing lag, from due to the run's
  run-finished hint reaching the bench (after the firing's commit: what a waiter sees;
  ``w4_timer_decided_lag_*`` to the firing transaction's clock, its finished_at, which
  for a wait staged ahead of its time reads its bucket's due time),
  ``w4_due_spread_ms`` how far apart they came due (p1 to p99);
  ``w4_cpu_<process>_ms_per_task`` the CPU per wait fired, from ``W4_CPU_FROM`` s before
  they came due (the timer stages them up to its lead ahead, 0.25 s by default, and
  reads twice that);
- **w3** 5,000 starts of a 1-node workflow by 32 concurrent clients through
  POST /v1/runs: starts/s and start latency. Its TASK goes to a queue no worker
  serves, so W3 measures starting (the start transaction and the dispatch to
  Redis), not running; it leaves those runs active; ``w3_cpu_<process>_ms_per_task``
  is the CPU per start of each process, ``w3_cpu_bench_client_ms_per_task`` the
  bench's own HTTP client's, ``w3_machine_busy_cores`` how much of the machine was busy;
- **w5** 2,000 runs of W1's chain over 20 keys with run concurrency
  ``max_runs: 2`` (docs/architecture.md §4.13), all started up front by 32
  clients: ``w5_steps_per_s`` and ``w5_steps_per_s_of_w1`` (beside W1's, when
  both ran), ``w5_most_runs_of_a_key_at_once`` (from the runs' history: 2 at
  most) and ``w5_last_finish_spread_between_keys_s``; ``w5_cpu_<process>_ms_per_task``
  is the CPU per step of each process over the whole of W5 (starts included), to
  compare with W1's ``cpu_<process>_s_per_1k_steps`` (the same unit);
- **w7** a rate limit of 100 per second (docs/architecture.md §4.12): 3,400 runs of
  one TASK node with ``rate_limit: {limit: 100, per_seconds: 1}``, started with the
  key set to 1 per day (PUT /v1/limits), so all but one wait for tokens; then the
  key is set back to 100 per second and the backlog drains. ``w7_rate_per_s``
  (goal: 95 to 100): the attempts sent over the 30 s after the drain's first second,
  from each held attempt's first ``task.released`` row; ``w7_saturated`` (1: some
  still waited when the window closed), ``w7_most_in_1s`` (a bucket allows a second's
  100 tokens plus those left over, so at most 200; above 100 when a release
  came late and sent what had come back meanwhile) and ``w7_runs_failed`` (0);
- **w6** 10 runs of one MAP node over 1,000 no-op TASK items, ``max_parallel``
  100, all 10 in flight (1,000 items with a worker or on their way, as W2's 20
  runs of 100 branches have 2,000): ``w6_tasks_per_s`` and, beside W2's from the
  same run, ``w6_tasks_per_s_of_w2`` (1.0: a MAP item costs what a FORK branch
  does; an event of a MAP loads its items in flight and the next, never all,
  docs/architecture.md §2 "MAP");
- **python** 2,000 runs of one one-attempt PYTHON node on the built-in workers,
  16 in flight: ``python_crashed`` (nodes killed by a signal: 0 expected),
  ``python_node_p50_ms`` (lease → report), ``python_run_p50_ms``,
  ``python_machine_cpu_ms_per_node`` (the whole machine's CPU per node: the
  figure to compare) and ``python_workers_cpu_ms_per_node`` (the workers' CPU
  with their reaped children; it misses most of a sandboxed node's, whose
  processes die with their pid namespace instead of being reaped up to the
  worker); ``--env COMPOSER_PYTHON_SANDBOX=off`` measures the same
  unsandboxed. ``make bench BENCH=python`` measures the executor alone.

Per step of W1 (top-level keys of the results):

- ``commits_per_step`` PostgreSQL commits in the scratch database ÷ steps,
  each run's start transaction included (so 0.1 of it comes from starting);
- ``history_rows_per_step`` / ``history_bytes_per_step``: the run history's rows
  and their bytes on disk per W1 step (docs/architecture.md §6.4);
- ``statements_per_step`` / ``plans_per_step`` from pg_stat_statements when the
  server preloads it and the admin database has it installed (the top
  statements go to ``details.stack.statements`` in the JSON; otherwise that says
  why they are unavailable and these keys are absent;
  ``pg_stat_statements_available`` is 1 or 0);
- ``grpc_calls_per_step`` the unary calls the bench workers made to the
  coordinator (retries included), counted by an interceptor on the workers'
  channel; ``grpc_messages_per_step`` their request messages plus the response
  messages they got back; ``grpc_<method>_per_step`` by method; and
  ``coordinator_report_events_per_step``, reports the coordinator's engine
  handled (composer_events{event=NodeCompleted|NodeFailed} on its /metrics, a
  cross-check: the coordinator itself counts no RPCs);
- ``redis_commands_per_step`` commands the Redis server processed between the
  first start and the last completion (INFO commandstats, INFO itself left
  out) ÷ steps, with ``redis_<command>_per_step`` for each command above 0.01,
  and ``redis_quiet_commands_per_s`` the rate while the stack stood idle just
  before. The counts are server-wide: with the stack's own redis-server
  (``redis_private`` = 1, the default where redis-server is installed) they are
  the stack's alone; with ``--redis shared`` whatever else uses that Redis
  meanwhile counts too. A pipeline's or MULTI's commands count one by one:
  these are commands, an upper bound on round trips.

- ``wal_bytes_per_step`` / ``wal_records_per_step`` the WAL the scratch database
  wrote over W1's load (first start → last completion) ÷ steps: the records that
  touch its relations plus every record (commits included) of the transactions
  that did, read with pg_walinspect every second while W1 runs, its segments held
  by a temporary replication slot (a checkpoint on a shared server lets older
  segments go within a second), on a connection to a database of the bench's own (``<scratch>_wal``, so neither its transactions nor its backend's CPU
  count as the scratch database's; that CPU counts in ``foreign_cores_w1``); it
  needs a superuser and contrib (``wal_per_database_available`` is 1 or 0, and
  ``details.stack.wal`` says why not). WAL is server-wide: beside it,
  ``wal_server_bytes_per_step`` is pg_current_wal_lsn()'s advance over the same
  window (read on the ``Stats`` connection, to another database) ÷ steps, which
  counts every database's writes on a shared server (other test suites' CREATE
  DATABASE alone writes megabytes), and ``wal_server_net_bytes_per_step`` the
  same less ``wal_background_bytes_per_s`` (the advance over the quiet window)
  times the window: an estimate only as steady as the other users;
- lock waits, sampled: every ~100 ms during W1 (and W2) a connection of its own to
  another database reads pg_stat_activity for the scratch database's client
  backends (tests/bench/_sql.py ``LockWaits``). ``w1_lock_waiting_mean`` is the
  mean number waiting for a heavyweight lock (wait_event_type 'Lock': a row's
  transaction id, a tuple, a relation) per sample, ``w1_lock_waiting_share_of_active``
  those ÷ the active backends summed over the samples, ``w1_backends_active_mean``
  and ``w1_backends_mean`` the active and all backends per sample,
  ``w1_lock_waiting_samples_per_s`` waiting backends seen per second of sampling;
  ``details.stack.w1_lock_wait_events`` splits them by wait_event. A sample sees
  only the waits under way at that instant, so short ones are undercounted: it
  says how many backends wait at once, not how many waits there were.
  ``w1_deadlocks`` is pg_stat_database.deadlocks' advance over the commit window
  (read settled, as commits are). ``--replicas coordinator=2`` against one
  coordinator is the comparison these are for (docs/scale-out.md).

Counting commits: PostgreSQL flushes a backend's statistics lazily (a busy one
at most once a second, one that just went idle about 10 s later), so
xact_commit is read only after the services have been idle for ``SETTLE``
seconds, then ``QUIET`` seconds later, the start of W1's window, and again
``SETTLE`` seconds after its last run finished, the window's end. Subtracted:
what the idle services' own polling commits (the rate over the quiet
``QUIET`` seconds times the window) and the benchmark's own reads of the
scratch database inside the window (``w1_bench_reads``: one per ``STALL``
seconds without a hint, more only if a hint was missed; each counted as it is
made, its statement prepared beforehand so that it is one transaction). The run details the figures need are read after the window.
Every statistics read (pg_stat_database, pg_stat_statements, pg_settings) runs
on a connection to another database, so it never counts. Autovacuum's few
transactions on the scratch database, if any, count too.

Cost (over W1): CPU seconds per 1,000 steps for each process, for the
PostgreSQL backends of the scratch database and for the Redis server (with
``--redis shared``, other users of that Redis count too), from /proc/<pid>/stat; peak RSS
(VmHWM) per process at the end. ``foreign_cores_w1`` is the CPU the rest of
the machine used meanwhile (other test suites): the load these figures were
taken under.

``--profile`` runs W1 once more at the end (``--profile w2``, ``w3``, ``w4`` or
``w6``: that workload; ``idle``: 100 W1 chains one at a time, the CPU of an idle
step; W3's "steps" are its starts, W4's its waits, and W4 adds
the timer to the processes profiled) with py-spy attached to the coordinator, the outbox-enqueuer, the
api-gateway and a worker, and summarises where each spent its CPU
(tests/bench/_profile.py); those figures are kept apart (``profile_*``) since
sampling perturbs the run.

Options (``python -m tests.bench stack [options]``, or ``make bench BENCH_ARGS=…``):
``--only w1,ceiling`` (the ceiling needs w1), ``--scale 0.1`` (every size,
the number in flight and the 40 s limit times 0.1, for a quick run),
``--workers N``, ``--worker-concurrency N`` (default ``_procs.WORKER_CONCURRENCY``),
``--replicas outbox-enqueuer=2``
(``--replicas api-gateway=2`` runs two on the bench's one API port, COMPOSER_API_SHARE_PORT;
``--replicas coordinator=2`` gives each
coordinator a gRPC port of its own and every worker process all of them, each
run's calls routed to one (COMPOSER_COORDINATORS); ``--coordinator-split worker``
gives worker process ``i`` the ``i % n``-th alone instead, so give that
``--workers 2`` or more, and its baseline the same workers: the cost figures
name each replica, ``coordinator_0``…),
``--env COMPOSER_X=value`` (a setting for every service), ``--profile``,
``--redis shared`` (the Redis at COMPOSER_TEST_REDIS_URL instead of one of its own).

Uses COMPOSER_TEST_DATABASE_URL (default the local server) and, with
``--redis shared`` or no redis-server installed, COMPOSER_TEST_REDIS_URL.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import datetime as dt
import itertools
import json
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

import composer_queue as cq
import composer_repo as repo
from composer_core.model import RunStatus
from tests.bench import _sql, options
from tests.bench._procs import (
    API_TOKEN,
    WORKER_CONCURRENCY,
    PrivateRedis,
    ProcessStack,
    Profiler,
    cpu_seconds,
    cpu_seconds_with_children,
    machine_busy_seconds,
    py_spy,
)
from tests.bench._profile import render, summarise
from tests.integration.databases import new_database_name

#: The runner copies this module's figures to the top level of the results JSON.
HEADLINE = True
#: What is not a number (the top SQL statements); the runner puts it in details.stack.
DETAILS: dict[str, Any] = {}
ADMIN_URL = os.environ.get(
    "COMPOSER_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
REDIS_URL = os.environ.get("COMPOSER_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
#: The workloads ``--profile`` may run again under py-spy.
PROFILED = ("idle", "w1", "w2", "w3", "w4", "w6")
WORKLOADS = ("idle", "w1", "ceiling", "w2", "w6", "w4", "w3", "sealing", "python", "w5", "w7")
#: Seconds of quiet before reading pg_stat_database (idle backends flush after ~10 s).
SETTLE = 11.5
#: Seconds over which the idle services' own commits are measured, before W1.
QUIET = 10.0
#: Seconds without a run-finished hint before the database is asked (a hint may be lost).
STALL = 5.0
CEILING_CONCURRENCY = 16  # the coordinator's pool size, the engine's concurrency at the database
CEILING_SECONDS = 10.0
CHAIN_STEPS = 10
FANOUT = 100
W1_RUNS, W1_IN_FLIGHT = 1500, 200
W2_RUNS, W2_IN_FLIGHT = 150, 20
#: No W1 or W2 run starts later than this after the first (times --scale).
STARTING_SECONDS = 40.0


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tests.bench stack")
    p.add_argument("--only", default=",".join(WORKLOADS), help=f"of {', '.join(WORKLOADS)}")
    p.add_argument("--scale", type=float, default=1.0, help="every size times this")
    p.add_argument("--workers", type=int, default=1, help="no-op worker processes")
    p.add_argument(
        "--worker-concurrency",
        type=int,
        default=WORKER_CONCURRENCY,
        help="tasks each no-op worker holds at once (COMPOSER_CONCURRENCY)",
    )
    p.add_argument(
        "--replicas", action="append", default=[], metavar="SERVICE=N", help="repeatable"
    )
    p.add_argument(
        "--env", action="append", default=[], metavar="COMPOSER_X=V", help="a service setting"
    )
    p.add_argument(
        "--coordinator-split",
        choices=("run", "worker"),
        default="run",
        help="with coordinator replicas: every worker routes each run's calls to one "
        "(run), or worker process i talks to the i %% n-th alone (worker)",
    )
    p.add_argument(
        "--profile",
        nargs="?",
        const="w1",
        choices=PROFILED,
        help="profile a second run of a workload with py-spy (w1 when none is named)",
    )
    p.add_argument(
        "--redis",
        choices=("private", "shared"),
        default="private" if PrivateRedis.available() else "shared",
        help="a redis-server of its own (default where redis-server is installed), "
        "or the one at COMPOSER_TEST_REDIS_URL",
    )
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


def mapped(items: int) -> dict[str, Any]:
    """One MAP node over ``items`` no-op TASK items (a literal list: runs start without
    input), at most W6_PARALLEL at once."""
    return {
        "id": "bench-map",
        "nodes": [
            {
                "id": "map",
                "type": "MAP",
                "spec": {
                    "items": list(range(items)),
                    "max_parallel": W6_PARALLEL,
                    "node": {"type": "TASK", "queue": "bench", "spec": {"i": "{{ index }}"}},
                },
            }
        ],
    }


W6_RUNS, W6_ITEMS, W6_PARALLEL = 10, 1000, 100


def keyed_chain(steps: int) -> dict[str, Any]:
    """W1's chain with run concurrency: at most ``W5_MAX_RUNS`` runs of one customer."""
    return chain(steps) | {
        "id": "bench-keyed",
        "concurrency": {"key": "{{input.customer}}", "max_runs": W5_MAX_RUNS},
    }


W5_RUNS, W5_KEYS, W5_MAX_RUNS = 2000, 20, 2

#: W7: a rate limit of W7_RATE per second measured over W7_SECONDS, after W7_SKIP
#: seconds (the bucket's burst spent); enough runs to keep it saturated past the end.
W7_RATE, W7_SECONDS, W7_SKIP = 100, 30.0, 1.0
W7_RUNS = 3400
RATED = {
    "id": "bench-rated",
    "nodes": [
        {
            "id": "call",
            "type": "TASK",
            "queue": "bench",
            "spec": {},
            "rate_limit": {"key": "bench-rate", "limit": W7_RATE, "per_seconds": 1},
        }
    ],
}

ONE_NODE = {
    "id": "bench-one",
    "nodes": [{"id": "only", "type": "TASK", "queue": "bench-unserved", "spec": {}}],
}
#: W4: each run waits as long as its input says, so that every wait comes due at once.
ONE_WAIT = {
    "id": "bench-wait",
    "nodes": [{"id": "nap", "type": "WAIT", "spec": {"duration_seconds": "{{input.seconds}}"}}],
}
#: W4: seconds from the first start to the moment every wait is due (the starts
#: take 1-5 s on this machine; a start after it wakes at once and is counted late).
W4_DUE_AFTER = 8.0
#: W4: seconds before the due time from which the firing's CPU is counted: the timer
#: reads the waits due within twice its lead (0.25 s by default) and stages them up
#: to a lead ahead; 2.5 s leaves room for a lead set as high as 1 s.
W4_CPU_FROM = 2.5
#: One PYTHON node on the built-in workers, one attempt: a crash fails its run.
ONE_PYTHON = {
    "id": "bench-python",
    "nodes": [
        {
            "id": "py",
            "type": "PYTHON",
            "retry": {"max_attempts": 1},
            "spec": {"code": "import json\ndef main(input):\n    return {'ok': True}\n"},
        }
    ],
}
PYTHON_NODES, PYTHON_IN_FLIGHT = 2000, 16


@dataclass
class Loop:
    """What driving a workload's runs left: the runs and when things happened (time.time())."""

    run_ids: list[str]
    first_start: float
    last_start: float
    first_done: float
    last_done: float


@dataclass
class Bench:
    args: argparse.Namespace
    stack: ProcessStack
    http: aiohttp.ClientSession
    mon: Any  # a repo connection to the scratch database (its queries are counted)
    stats: _sql.Stats
    redis: cq.RedisQueue
    redis_pid: int
    #: Runs whose run-finished hint arrived (any workload's).
    announced: set[str] = field(default_factory=set)
    #: When each run's run-finished hint arrived (time.time()): when a waiter saw it.
    announced_at: dict[str, float] = field(default_factory=dict)
    hinted: asyncio.Event = field(default_factory=asyncio.Event)
    #: Hints may have been missed (the subscription dropped): ask the database.
    gap: bool = False
    #: Reads of the scratch database made while waiting (one transaction each).
    polls: int = 0
    #: The bench's own database with pg_walinspect (``_sql.DatabaseWal``), and why
    #: there is none (or None).
    wal_url: str = ""
    walinspect_unavailable: str | None = "not tried"
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

    async def start(
        self, workflow_id: str, input: dict[str, Any] | None = None
    ) -> tuple[str, float]:
        """Start a run; returns its id and the call's latency in seconds."""
        t0 = time.perf_counter()
        async with self.http.post(
            f"{self.stack.api_url}/v1/runs",
            json={"workflow_id": workflow_id, "input": input or {}},
        ) as r:
            body = await r.json()
            if r.status != 201:
                raise RuntimeError(f"starting {workflow_id}: {r.status} {body}")
        return str(body["run_id"]), time.perf_counter() - t0

    async def set_rate_limit(self, key: str, limit: int, per_seconds: float) -> None:
        async with self.http.put(
            f"{self.stack.api_url}/v1/limits/{key}",
            json={"limit": limit, "per_seconds": per_seconds},
        ) as r:
            if r.status != 200:
                raise RuntimeError(f"setting rate limit {key}: {r.status} {await r.text()}")

    async def start_many(self, workflow_id: str, n: int, clients: int) -> list[tuple[str, float]]:
        slots = asyncio.Semaphore(clients)

        async def one() -> tuple[str, float]:
            async with slots:
                return await self.start(workflow_id)

        return list(await asyncio.gather(*(one() for _ in range(n))))

    # -- driving runs ----------------------------------------------------------------

    def on_hint(self, _channel: str, message: str) -> None:
        now = time.time()
        for run_id in cq.finished_runs(message):
            self.announced.add(run_id)
            self.announced_at.setdefault(run_id, now)
        self.hinted.set()

    def on_gap(self) -> None:
        self.gap = True
        self.hinted.set()

    async def drive(
        self,
        workflow_id: str,
        total: int,
        *,
        in_flight: int,
        seconds: float = float("inf"),
        clients: int | None = None,
    ) -> Loop:
        """Start up to ``total`` runs, keeping ``in_flight`` of them unfinished (a new
        one starts as one finishes), none after ``seconds``; return when every run
        started has finished. ``clients`` bounds the concurrent POST /v1/runs."""
        slots = asyncio.Semaphore(clients or in_flight)
        since = dt.datetime.now(dt.UTC)
        started: list[str] = []
        unfinished: set[str] = set()  # started, no hint yet
        starting: set[asyncio.Task[None]] = set()
        failures: list[BaseException] = []
        finished = launched = 0
        first_start = last_start = time.time()
        first_done = last_done = 0.0
        stop_starting = time.monotonic() + seconds

        async def start_one() -> None:
            try:
                async with slots:
                    run_id, _ = await self.start(workflow_id)
            except Exception as exc:
                failures.append(exc)
            else:
                started.append(run_id)
                unfinished.add(run_id)
            self.hinted.set()

        while True:
            self.hinted.clear()
            if failures:
                raise failures[0]
            done = {r for r in unfinished if r in self.announced}
            if done:
                unfinished.difference_update(done)
                finished += len(done)
                last_done = time.time()
                first_done = first_done or last_done
            while (
                launched < total
                and launched - finished < in_flight
                and time.monotonic() < stop_starting
            ):
                launched += 1
                last_start = time.time()
                task = asyncio.create_task(start_one())
                starting.add(task)
                task.add_done_callback(starting.discard)
            if not starting and not unfinished and launched - finished == 0:
                return Loop(started, first_start, last_start, first_done, last_done)
            try:
                await asyncio.wait_for(self.hinted.wait(), STALL)
                stalled = self.gap
            except TimeoutError:
                stalled = True
            if stalled and not starting:
                self.check_alive()
                await self.find_finished(since, unfinished)

    async def wait_for(self, run_ids: list[str], since: dt.datetime) -> None:
        """Until every run of ``run_ids`` (created after ``since``) has finished."""
        unfinished = set(run_ids)
        while True:
            self.hinted.clear()
            unfinished = {r for r in unfinished if r not in self.announced}
            if not unfinished:
                return
            try:
                await asyncio.wait_for(self.hinted.wait(), STALL)
                stalled = self.gap
            except TimeoutError:
                stalled = True
            if stalled:
                self.check_alive()
                await self.find_finished(since, unfinished)

    async def find_finished(self, since: dt.datetime, unfinished: set[str]) -> None:
        """No hint for a while, or the subscription dropped: ask the database whether
        runs finished unannounced (every read counted in ``polls``)."""
        self.gap = False
        self.polls += 1
        start, end = since - dt.timedelta(milliseconds=5), since + dt.timedelta(days=1)
        active = await repo.count_active_runs(self.mon, start=start, end=end)
        if active >= len(unfinished):
            return  # nothing was missed
        for run_id in list(unfinished):
            self.polls += 1
            if (await repo.get_run(self.mon, run_id)).status.is_terminal:
                self.announced.add(run_id)

    # -- reading -------------------------------------------------------------------

    async def metric(self, service: str, name: str, **labels: str) -> float:
        """The sum of a metric's samples on a service's /metrics (those with ``labels``)."""
        port = self.stack.admin_ports[service]
        async with self.http.get(f"http://127.0.0.1:{port}/metrics") as r:
            text = await r.text()
        wanted = [f'{k}="{v}"' for k, v in labels.items()]
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name) and line[len(name) : len(name) + 1] in (" ", "{"):
                head, _, value = line.rpartition(" ")
                if all(w in head for w in wanted):
                    total += float(value)
        return total

    async def outbox_lag(self) -> tuple[float, float]:
        """(seconds, dispatches) published so far: composer_outbox_lag_seconds' sum and count."""
        return (
            await self.metric("outbox-enqueuer", "composer_outbox_lag_seconds_sum"),
            await self.metric("outbox-enqueuer", "composer_outbox_lag_seconds_count"),
        )

    async def report_events(self) -> float:
        """Reports the coordinators' engines handled (applied or ignored as stale)."""
        return sum(
            [
                await self.metric(name, "composer_events_total", event=event)
                for name in self.stack.admin_ports
                if name == "coordinator" or name.startswith("coordinator-")
                for event in ("NodeCompleted", "NodeFailed")
            ]
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

    def worker_records(self) -> tuple[dict[str, float], dict[str, float]]:
        """(handler starts, report answers) by task id, from the workers' records."""
        starts: dict[str, float] = {}
        acked: dict[str, float] = {}
        for i in range(self.stack.workers):
            path = self.stack.records_path(i)
            if path.exists():
                for line in path.read_text().splitlines():
                    kind, task_id, at = line.split("\t")
                    # the first start of an attempt, the first answer to its report
                    (starts if kind == "S" else acked).setdefault(task_id, float(at))
        return starts, acked

    def rpc_counts(self) -> dict[str, float]:
        """The workers' gRPC calls so far: ``requests``, ``responses`` and each method."""
        out: dict[str, float] = {"requests": 0.0, "responses": 0.0}
        for i in range(self.stack.workers):
            path = Path(f"{self.stack.records_path(i)}.rpc.json")
            if path.exists():
                counts = json.loads(path.read_text())
                for method, n in counts["requests"].items():
                    out["requests"] += n
                    out[method] = out.get(method, 0.0) + n
                out["responses"] += sum(counts["responses"].values())
        return out

    async def redis_calls(self) -> dict[str, int]:
        calls = await self.redis.command_calls()
        calls.pop("info", None)  # our own reads
        return calls

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


def succeeded(
    details: list[tuple[repo.RunRecord, list[repo.TaskRecord]]],
) -> list[tuple[repo.RunRecord, list[repo.TaskRecord]]]:
    return [(run, tasks) for run, tasks in details if run.status is RunStatus.SUCCEEDED]


def elapsed_since(
    t0: float, details: list[tuple[repo.RunRecord, list[repo.TaskRecord]]], loop: Loop
) -> float:
    """From the first start to the last completion (the database's, else the last hint)."""
    ends = [r.completed_at.timestamp() for r, _ in details if r.completed_at is not None]
    return (max(ends) if ends else loop.last_done) - t0


async def run_chains(
    b: Bench, *, runs: int, in_flight: int, seconds: float = float("inf")
) -> tuple[Loop, dict[str, float], dict[str, float]]:
    """Drive W1 chains; returns the loop and the CPU snapshots before and after."""
    cpu0 = await b.cpu_snapshot()
    loop = await b.drive("bench-chain", runs, in_flight=in_flight, seconds=seconds)
    cpu1 = await b.cpu_snapshot()
    return loop, cpu0, cpu1


async def chain_figures(b: Bench, label: str, loop: Loop, in_flight: int) -> float:
    """Read the runs of ``loop`` and set ``label``'s figures; returns the steps counted."""
    details = await b.runs(loop.run_ids)
    good = succeeded(details)
    steps = len(good) * CHAIN_STEPS
    elapsed = elapsed_since(loop.first_start, details, loop)
    handler, acked = b.worker_records()
    from_tx, from_ack, to_lease, to_handler, period, latency = [], [], [], [], [], []
    steady = 0
    for run, tasks in good:
        assert run.completed_at is not None, run
        latency.append((run.completed_at - run.created_at).total_seconds() * 1000)
        by_node = {t.node_id: t for t in tasks}
        for t in tasks:
            if t.finished_at and loop.first_done <= t.finished_at.timestamp() <= loop.last_start:
                steady += 1
        for i in range(CHAIN_STEPS - 1):
            prev, nxt = by_node[f"s{i}"], by_node[f"s{i + 1}"]
            if prev.finished_at is None or nxt.started_at is None or nxt.task_id not in handler:
                continue
            starts = handler[nxt.task_id]
            reported = prev.finished_at.timestamp()
            from_tx.append((starts - reported) * 1000)
            to_lease.append((nxt.started_at.timestamp() - reported) * 1000)
            to_handler.append((starts - nxt.started_at.timestamp()) * 1000)
            if prev.task_id in acked:
                from_ack.append((starts - acked[prev.task_id]) * 1000)
            if prev.task_id in handler:
                period.append((starts - handler[prev.task_id]) * 1000)
    window = loop.last_start - loop.first_done
    b.figures |= {
        f"{label}_runs": float(len(details)),
        f"{label}_runs_failed": float(len(details) - len(good)),
        f"{label}_in_flight": float(in_flight),
        f"{label}_steps": float(steps),
        f"{label}_elapsed_s": elapsed,
        f"{label}_steps_per_s": steps / elapsed,
        f"{label}_runs_per_s": len(good) / elapsed,
        f"{label}_steady_window_s": max(0.0, window),
        f"{label}_steady_steps_per_s": steady / window if window >= 1.0 else float("nan"),
        f"{label}_gap_report_tx_to_handler_p50_ms": percentile(from_tx, 0.50),
        f"{label}_gap_report_tx_to_handler_p95_ms": percentile(from_tx, 0.95),
        f"{label}_gap_report_tx_to_handler_p99_ms": percentile(from_tx, 0.99),
        f"{label}_gap_report_acked_to_handler_p50_ms": percentile(from_ack, 0.50),
        f"{label}_gap_report_acked_to_handler_p95_ms": percentile(from_ack, 0.95),
        f"{label}_gap_report_acked_to_handler_p99_ms": percentile(from_ack, 0.99),
        f"{label}_gap_report_tx_to_lease_p50_ms": percentile(to_lease, 0.50),
        f"{label}_gap_lease_to_handler_p50_ms": percentile(to_handler, 0.50),
        f"{label}_handler_to_next_handler_p50_ms": percentile(period, 0.50),
        f"{label}_run_latency_p50_ms": percentile(latency, 0.50),
        f"{label}_run_latency_p99_ms": percentile(latency, 0.99),
    }
    return float(steps)


def cost(
    b: Bench,
    steps: float,
    cpu0: dict[str, float],
    cpu1: dict[str, float],
    seconds: float,
    *,
    prefix: str = "",
) -> None:
    """CPU seconds per 1,000 steps by process (services, PostgreSQL backends, Redis),
    as figures whose names start with ``prefix``."""
    per_k = 1000.0 / max(1.0, steps)
    delta = {k: max(0.0, v - cpu0.get(k, 0.0)) for k, v in cpu1.items() if k != "machine"}
    postgres = sum(v for k, v in delta.items() if k.startswith("pg:"))
    services = {k: v for k, v in delta.items() if not k.startswith("pg:")}
    services.pop("redis")
    bench_client = services.pop("bench")
    for name, seconds_used in services.items():
        b.figures[f"{prefix}cpu_{name.replace('-', '_')}_s_per_1k_steps"] = seconds_used * per_k
    ours = sum(delta.values())
    b.figures |= {
        f"{prefix}cpu_services_s_per_1k_steps": sum(services.values()) * per_k,
        f"{prefix}cpu_postgres_s_per_1k_steps": postgres * per_k,
        f"{prefix}cpu_redis_s_per_1k_steps": delta["redis"] * per_k,
        f"{prefix}cpu_total_s_per_1k_steps": (ours - bench_client) * per_k,
        f"{prefix}cpu_bench_client_s_per_1k_steps": bench_client * per_k,
    }
    machine = cpu1["machine"] - cpu0["machine"]
    b.figures[f"{prefix}machine_busy_cores_w1"] = machine / seconds
    b.figures[f"{prefix}foreign_cores_w1"] = max(0.0, machine - ours) / seconds


def task_cost(
    b: Bench, workload: str, tasks: int, cpu0: dict[str, float], cpu1: dict[str, float]
) -> None:
    """CPU milliseconds per task of ``workload`` (W2, W6: a FORK branch beside a MAP
    item) for each service process, the PostgreSQL backends, the Redis server and all
    of them (the bench's own client left out)."""
    per = 1000.0 / max(1, tasks)
    delta = {k: max(0.0, v - cpu0.get(k, 0.0)) for k, v in cpu1.items() if k != "machine"}
    postgres = sum(v for k, v in delta.items() if k.startswith("pg:"))
    services = {k: v for k, v in delta.items() if not k.startswith("pg:")}
    services.pop("bench", None)
    for name, seconds in services.items():
        b.figures[f"{workload}_cpu_{name.replace('-', '_')}_ms_per_task"] = seconds * per
    b.figures |= {
        f"{workload}_cpu_postgres_ms_per_task": postgres * per,
        f"{workload}_cpu_total_ms_per_task": (sum(services.values()) + postgres) * per,
    }


async def sealing(b: Bench) -> None:
    """W1 with payloads sealed at rest and without, alternating (sealed, plain, sealed,
    plain), each on services restarted with (without) COMPOSER_ENCRYPTION_KEYS, in
    this one run; half of W1's runs each. The ratio of the means is what sealing
    costs (docs/sealing.md): alternating takes the machine's drift and a cold first
    phase out of it. Every document is sealed, the bench's empty inputs and outputs
    too, so each step pays the full number of seals."""
    key = base64.b64encode(os.urandom(32)).decode()
    in_flight = b.n(W1_IN_FLIGHT)
    phases = [("sealed", f"bench:{key}"), ("plain", "")] * 2
    for i, (kind, keys) in enumerate(phases):
        label = f"w1_{kind}_{i // 2 + 1}"
        await b.stack.restart({"COMPOSER_ENCRYPTION_KEYS": keys})
        loop, cpu0, cpu1 = await run_chains(
            b,
            runs=b.n(W1_RUNS // 2),
            in_flight=in_flight,
            seconds=STARTING_SECONDS / 2 * b.args.scale,
        )
        steps = await chain_figures(b, label, loop, in_flight)
        cost(b, steps, cpu0, cpu1, b.figures[f"{label}_elapsed_s"], prefix=f"{label}_")
    for kind in ("sealed", "plain"):
        for figure in ("steps_per_s", "cpu_total_s_per_1k_steps"):
            b.figures[f"w1_{kind}_{figure}"] = statistics.fmean(
                b.figures[f"w1_{kind}_{n}_{figure}"] for n in (1, 2)
            )
    b.figures["sealing_steps_ratio"] = b.figures["w1_sealed_steps_per_s"] / max(
        1e-9, b.figures["w1_plain_steps_per_s"]
    )
    b.figures["sealing_cpu_ratio"] = b.figures["w1_sealed_cpu_total_s_per_1k_steps"] / max(
        1e-9, b.figures["w1_plain_cpu_total_s_per_1k_steps"]
    )


async def idle(b: Bench) -> None:
    """The step gaps when idle: 10 chains, one at a time."""
    lag0, n0 = await b.outbox_lag()
    loop, _, _ = await run_chains(b, runs=b.n(10), in_flight=1)
    await chain_figures(b, "idle", loop, 1)
    lag1, n1 = await b.outbox_lag()
    for key in list(b.figures):
        if key.startswith("idle_") and not ("gap" in key or "latency" in key or "handler" in key):
            del b.figures[key]
    # the report's commit → its dispatch in Redis, part of report → lease
    b.figures["idle_outbox_lag_mean_ms"] = (lag1 - lag0) / max(1.0, n1 - n0) * 1000


async def w1_with_commits(b: Bench) -> None:
    unavailable = await b.stats.statements_unavailable()
    # the quiet window: what the idle services commit (and Redis serves) on their own
    quiet0 = await b.settled_commits()
    wal_q = await b.stats.wal_bytes()
    q0 = time.monotonic()
    statements_q = {} if unavailable else await b.stats.statements()
    redis_q = await b.redis_calls()
    await asyncio.sleep(QUIET)
    c0 = await b.stats.commits()
    deadlocks0 = await b.stats.deadlocks()
    window0 = time.monotonic()
    quiet = window0 - q0
    statements0 = {} if unavailable else await b.stats.statements()
    redis0 = await b.redis_calls()
    rpc0, events0, polls0 = b.rpc_counts(), await b.report_events(), b.polls
    background = (c0 - quiet0) / quiet
    in_flight = b.n(W1_IN_FLIGHT)
    waits = _sql.LockWaits(ADMIN_URL, b.stats.database)
    await waits.start()
    ours: _sql.DatabaseWal | None = None
    if b.walinspect_unavailable is None:
        ours = _sql.DatabaseWal(b.wal_url, await b.stats.database_oid())
        await ours.begin()
    wal0, t_wal0 = await b.stats.wal_bytes(), time.monotonic()
    wal_background = (wal0 - wal_q) / (t_wal0 - q0)
    try:
        loop, cpu0, cpu1 = await run_chains(
            b, runs=b.n(W1_RUNS), in_flight=in_flight, seconds=STARTING_SECONDS * b.args.scale
        )
        wal1, t_wal1 = await b.stats.wal_bytes(), time.monotonic()
    finally:
        await waits.stop()
        if ours is not None:
            await ours.finish()
    redis1 = await b.redis_calls()
    c1 = await b.settled_commits()
    deadlocks1 = await b.stats.deadlocks()
    window = time.monotonic() - window0
    statements1 = {} if unavailable else await b.stats.statements()
    rpc1, events1, polls = b.rpc_counts(), await b.report_events(), b.polls - polls0
    # the window is over: now the details may be read
    steps = await chain_figures(b, "w1", loop, in_flight)
    per_step = 1.0 / max(1.0, steps)
    commits = (c1 - c0) - polls - background * window
    b.figures |= {
        "w1_commits": float(commits),
        "commits_per_step": commits * per_step,
        "background_commits_per_s": background,
        "w1_bench_reads": float(polls),
    }
    cost(b, steps, cpu0, cpu1, b.figures["w1_elapsed_s"])
    await history_figures(b, steps)
    wal = (wal1 - wal0) - max(0.0, wal_background) * (t_wal1 - t_wal0)
    b.figures |= {
        "wal_server_bytes_per_step": (wal1 - wal0) * per_step,
        "wal_server_net_bytes_per_step": max(0.0, wal) * per_step,
        "wal_background_bytes_per_s": wal_background,
        "w1_deadlocks": float(deadlocks1 - deadlocks0),
    }
    if ours is not None and ours.error is not None:
        b.walinspect_unavailable = f"reading W1's WAL: {ours.error}"
    elif ours is not None:
        b.figures |= {
            "wal_bytes_per_step": ours.bytes * per_step,
            "wal_records_per_step": ours.records * per_step,
        }
    b.figures["wal_per_database_available"] = 0.0 if b.walinspect_unavailable else 1.0
    if b.walinspect_unavailable:
        DETAILS["wal"] = f"per database unavailable: {b.walinspect_unavailable}"
    lock_figures(b, "w1", waits)

    grpc = {k: v - rpc0.get(k, 0.0) for k, v in rpc1.items()}
    b.figures |= {
        "grpc_calls_per_step": grpc["requests"] * per_step,
        "grpc_messages_per_step": (grpc["requests"] + grpc["responses"]) * per_step,
    }
    for method in ("AcquireTaskLease", "ReportTaskResult", "RenewTaskLease"):
        b.figures[f"grpc_{method}_per_step"] = grpc.get(method, 0.0) * per_step
    b.figures["coordinator_report_events_per_step"] = (events1 - events0) * per_step

    redis = {k: v - redis0.get(k, 0) for k, v in redis1.items()}
    quiet_redis = sum(redis0.values()) - sum(redis_q.values())
    b.figures |= {
        "redis_commands_per_step": sum(redis.values()) * per_step,
        "redis_quiet_commands_per_s": quiet_redis / quiet,
    }
    for command, count in sorted(redis.items(), key=lambda kv: -kv[1]):
        if count * per_step >= 0.01:
            b.figures[f"redis_{command.replace('|', '_')}_per_step"] = count * per_step

    b.figures["pg_stat_statements_available"] = 0.0 if unavailable else 1.0
    if unavailable:
        DETAILS["statements"] = f"unavailable: {unavailable}"
        print(f"  SQL statements per step: unavailable ({unavailable})", flush=True)
    else:
        statement_figures(b, statements_q, statements0, statements1, quiet, window, steps)


def lock_figures(b: Bench, workload: str, waits: _sql.LockWaits) -> None:
    """The sampled lock waits of ``workload`` (see _sql.LockWaits)."""
    samples = max(1, waits.samples)
    b.figures |= {
        f"{workload}_lock_samples": float(waits.samples),
        f"{workload}_lock_sample_interval_ms": waits.seconds / samples * 1000,
        f"{workload}_backends_mean": waits.backends / samples,
        f"{workload}_backends_active_mean": waits.active / samples,
        f"{workload}_lock_waiting_mean": waits.waiting / samples,
        f"{workload}_lock_waiting_share_of_active": waits.waiting / max(1, waits.active),
        f"{workload}_lock_waiting_samples_per_s": waits.waiting / max(1e-9, waits.seconds),
    }
    DETAILS[f"{workload}_lock_wait_events"] = dict(waits.events.most_common())


async def history_figures(b: Bench, steps: float) -> None:
    """What the run history (docs/architecture.md §6.4) adds per step: its rows and the
    bytes they take on disk (table and index), read after W1 (the runs before W1 in
    this database are the warm-up's few, counted in too: an upper bound). Its CPU is
    in cpu_total_s_per_1k_steps with the rest of the statement it rides with."""
    rows = await b.mon.fetchval("SELECT count(*) FROM run_history")
    size = await b.mon.fetchval(
        "SELECT coalesce(sum(pg_total_relation_size(inhrelid)), 0) FROM pg_inherits"
        " WHERE inhparent = 'run_history'::regclass"
    )
    b.figures |= {
        "history_rows_per_step": float(rows) / max(1.0, steps),
        "history_bytes_per_step": float(size) / max(1.0, steps),
    }


def statement_figures(
    b: Bench,
    before_quiet: dict[int, _sql.Statement],
    before: dict[int, _sql.Statement],
    after: dict[int, _sql.Statement],
    quiet: float,
    window: float,
    steps: float,
) -> None:
    """Statements and plans per step over W1's window (less the idle services' rate)."""

    def calls(snapshot: dict[int, _sql.Statement]) -> tuple[int, int]:
        return sum(s.calls for s in snapshot.values()), sum(s.plans for s in snapshot.values())

    (cq0, pq0), (c0, p0), (c1, p1) = calls(before_quiet), calls(before), calls(after)
    rate_calls, rate_plans = (c0 - cq0) / quiet, (p0 - pq0) / quiet
    b.figures |= {
        "statements_per_step": (c1 - c0 - rate_calls * window) / steps,
        "plans_per_step": (p1 - p0 - rate_plans * window) / steps,
    }
    delta = [s.minus(before.get(q)) for q, s in after.items()]
    top = sorted((s for s in delta if s.calls > 0), key=lambda s: -s.calls)[:15]
    DETAILS["statements"] = [
        {
            "query": " ".join(s.query.split())[:400],
            "calls_per_step": s.calls / steps,
            "plans_per_step": s.plans / steps,
            "mean_exec_ms": s.exec_ms / s.calls,
            "mean_plan_ms": s.plan_ms / s.plans if s.plans else None,
        }
        for s in top
    ]
    print("  top SQL statements over W1 (calls per step, mean ms):", flush=True)
    for s in top[:8]:
        query = " ".join(s.query.split())[:90]
        print(f"    {s.calls / steps:7.3f}  {s.exec_ms / s.calls:7.3f}  {query}", flush=True)


async def ceiling(b: Bench, url: str) -> None:
    seconds = max(2.0, CEILING_SECONDS * b.args.scale)
    rows = b.n(W1_IN_FLIGHT)  # one row per run in flight in W1
    transactions, elapsed = await _sql.ceiling(
        url, seconds=seconds, concurrency=CEILING_CONCURRENCY, rows=rows
    )
    tx_per_s = transactions / elapsed
    settings = await b.stats.durability()
    durable = settings.get("fsync") == "on" and settings.get("synchronous_commit") != "off"
    b.figures |= {
        "ceiling_seconds": elapsed,
        "ceiling_transactions": float(transactions),
        "ceiling_concurrency": float(CEILING_CONCURRENCY),
        "ceiling_rows": float(rows),
        "ceiling_durable": 1.0 if durable else 0.0,
        "ceiling_tx_per_s": tx_per_s,
        "w1_steps_per_ceiling_tx": b.figures["w1_steps_per_s"] / tx_per_s,
    }


async def w2(b: Bench) -> None:
    in_flight = b.n(W2_IN_FLIGHT)
    waits = _sql.LockWaits(ADMIN_URL, b.stats.database)
    await waits.start()
    try:
        cpu0 = await b.cpu_snapshot()
        loop = await b.drive(
            "bench-fanout",
            b.n(W2_RUNS),
            in_flight=in_flight,
            seconds=STARTING_SECONDS * b.args.scale,
        )
        cpu1 = await b.cpu_snapshot()
    finally:
        await waits.stop()
    lock_figures(b, "w2", waits)
    details = await b.runs(loop.run_ids)
    good = succeeded(details)
    elapsed = elapsed_since(loop.first_start, details, loop)
    joins = []
    for _, tasks in good:
        by_node = {t.node_id: t for t in tasks}
        branch_done = max(
            t.finished_at for t in tasks if t.node_id.startswith("b") and t.finished_at
        )
        join = by_node["join"].finished_at
        assert join is not None
        joins.append((join - branch_done).total_seconds() * 1000)
    b.figures |= {
        "w2_runs": float(len(details)),
        "w2_runs_failed": float(len(details) - len(good)),
        "w2_in_flight": float(in_flight),
        "w2_tasks": float(len(good) * FANOUT),
        "w2_elapsed_s": elapsed,
        "w2_tasks_per_s": len(good) * FANOUT / elapsed,
        "w2_join_latency_p50_ms": percentile(joins, 0.5),
        "w2_join_latency_max_ms": max(joins, default=float("nan")),
    }
    task_cost(b, "w2", len(good) * FANOUT, cpu0, cpu1)


async def w6(b: Bench) -> None:
    """W6: runs of one MAP of 1,000 no-op items, all in flight; per task beside W2."""
    n = b.n(W6_RUNS)
    cpu0 = await b.cpu_snapshot()
    loop = await b.drive("bench-map", n, in_flight=n)
    cpu1 = await b.cpu_snapshot()
    details = await b.runs(loop.run_ids)
    good = succeeded(details)
    elapsed = elapsed_since(loop.first_start, details, loop)
    for run, _ in good:
        items = await repo.get_map_items(b.mon, run.run_id, "map", limit=1000)
        assert len(items) == W6_ITEMS, f"run {run.run_id} has {len(items)} items"
    tasks = len(good) * W6_ITEMS
    b.figures |= {
        "w6_runs": float(len(details)),
        "w6_runs_failed": float(len(details) - len(good)),
        "w6_items": float(W6_ITEMS),
        "w6_max_parallel": float(W6_PARALLEL),
        "w6_tasks": float(tasks),
        "w6_elapsed_s": elapsed,
        "w6_tasks_per_s": tasks / elapsed,
    }
    task_cost(b, "w6", tasks, cpu0, cpu1)
    if "w2_tasks_per_s" in b.figures:
        b.figures["w6_tasks_per_s_of_w2"] = (
            b.figures["w6_tasks_per_s"] / b.figures["w2_tasks_per_s"]
        )


async def w3(b: Bench) -> None:
    n = b.n(5000)
    cpu0 = await b.cpu_snapshot()
    t0 = time.perf_counter()
    started = await b.start_many("bench-one", n, clients=32)
    elapsed = time.perf_counter() - t0
    cpu1 = await b.cpu_snapshot()
    task_cost(b, "w3", n, cpu0, cpu1)  # per start; the bench's own HTTP client apart:
    b.figures["w3_cpu_bench_client_ms_per_task"] = (cpu1["bench"] - cpu0["bench"]) * 1000 / n
    b.figures["w3_machine_busy_cores"] = (cpu1["machine"] - cpu0["machine"]) / elapsed
    latency = [s * 1000 for _, s in started]
    b.figures |= {
        "w3_starts": float(n),
        "w3_clients": 32.0,
        "w3_starts_per_s": n / elapsed,
        "w3_start_latency_p50_ms": percentile(latency, 0.5),
        "w3_start_latency_p99_ms": percentile(latency, 0.99),
    }


async def w4(b: Bench) -> None:
    """W4: 1,000 runs of one WAIT, started by 32 clients, each waiting until one moment
    ``W4_DUE_AFTER`` s after the first start (its input says how long from its start),
    so the timer finds them all due at once: the firing lag (due to the run-finished
    hint's arrival)."""
    n = b.n(1000)
    since = dt.datetime.now(dt.UTC)
    t0 = time.perf_counter()
    due_at = time.time() + W4_DUE_AFTER
    slots = asyncio.Semaphore(32)

    async def one() -> tuple[str, float]:
        async with slots:
            seconds = max(0.0, due_at - time.time())
            run_id, _ = await b.start("bench-wait", {"seconds": seconds})
            return run_id, seconds

    started = list(await asyncio.gather(*(one() for _ in range(n))))
    starts = time.perf_counter() - t0
    seconds_of = dict(started)
    await asyncio.sleep(max(0.0, due_at - W4_CPU_FROM - time.time()))
    cpu0 = await b.cpu_snapshot()  # the firing's cost alone, staging included
    await b.wait_for([r for r, _ in started], since)
    cpu1 = await b.cpu_snapshot()
    task_cost(b, "w4", n, cpu0, cpu1)  # per wait fired
    details = await b.runs([r for r, _ in started])
    good = succeeded(details)
    lags, decided, dues = [], [], []
    for run, tasks in good:
        nap = tasks[0]
        assert nap.started_at and nap.finished_at, nap
        # the node's own clock: its wake_at is when it was reached plus its input
        due = nap.started_at + dt.timedelta(seconds=seconds_of[run.run_id])
        dues.append(due.timestamp() * 1000)
        # finished_at is the firing transaction's clock, taken before its writes and
        # commit; the run-finished hint comes after the commit: what a waiter sees
        decided.append((nap.finished_at - due).total_seconds() * 1000)
        seen = b.announced_at.get(run.run_id)
        if seen is not None:
            lags.append((seen - due.timestamp()) * 1000)
    b.figures |= {
        "w4_waits": float(n),
        "w4_runs_failed": float(n - len(good)),
        "w4_starts_s": starts,
        "w4_started_after_due": float(sum(1 for _, s in started if s == 0.0)),
        # how far apart the waits came due (the start requests' latency): p99 - p1
        "w4_due_spread_ms": percentile(dues, 0.99) - percentile(dues, 0.01),
        # due to the run-finished hint's arrival (after the commit), for the runs whose
        # hint was not lost (the rest: w4_waits - w4_lags_seen)
        "w4_lags_seen": float(len(lags)),
        "w4_timer_lag_p50_ms": percentile(lags, 0.5),
        "w4_timer_lag_p99_ms": percentile(lags, 0.99),
        "w4_timer_lag_max_ms": max(lags, default=float("nan")),
        # due to the firing transaction's clock (finished_at): before its commit
        "w4_timer_decided_lag_p50_ms": percentile(decided, 0.5),
        "w4_timer_decided_lag_p99_ms": percentile(decided, 0.99),
    }


async def w5(b: Bench) -> None:
    """W5: 2,000 runs of W1's chain over 20 customers, at most 2 runs of a customer at
    once (run concurrency, docs/architecture.md §4.13), all started up front by 32
    clients: steps/s (beside W1's, when it ran), the most runs of a key ever going at
    once (from the runs' history: never above 2), and the spread between keys of when
    their last run finished (keys share the stack fairly)."""
    n = b.n(W5_RUNS)
    slots = asyncio.Semaphore(32)
    since = dt.datetime.now(dt.UTC)
    cpu0 = await b.cpu_snapshot()
    first_start = time.time()

    async def one(i: int) -> tuple[str, str]:
        customer = f"c{i % W5_KEYS:02d}"
        async with slots:
            run_id, _ = await b.start("bench-keyed", {"customer": customer})
        return run_id, customer

    started = list(await asyncio.gather(*(one(i) for i in range(n))))
    starts_s = time.time() - first_start
    await b.wait_for([r for r, _ in started], since)
    cpu1 = await b.cpu_snapshot()
    details = await b.runs([r for r, _ in started])
    good = succeeded(details)
    task_cost(b, "w5", len(good) * CHAIN_STEPS, cpu0, cpu1)  # per step, beside W1's
    key_of = dict(started)
    intervals: dict[str, list[tuple[float, float]]] = {}
    for run, _ in good:
        assert run.completed_at is not None
        history = await repo.run_history(b.mon, run.run_id)
        began = next(h.at for h in history if h.kind == "run.started").timestamp()
        intervals.setdefault(key_of[run.run_id], []).append((began, run.completed_at.timestamp()))
    most = 0
    for spans in intervals.values():
        edges = sorted([(s0, 1) for s0, _ in spans] + [(e, -1) for _, e in spans])
        current = 0
        for _, step in edges:
            current += step
            most = max(most, current)
    last_by_key = [max(e for _, e in spans) for spans in intervals.values()]
    elapsed = max(e for spans in intervals.values() for _, e in spans) - first_start
    steps = len(good) * CHAIN_STEPS
    b.figures |= {
        "w5_runs": float(len(details)),
        "w5_runs_failed": float(len(details) - len(good)),
        "w5_keys": float(W5_KEYS),
        "w5_max_runs": float(W5_MAX_RUNS),
        "w5_starts_s": starts_s,
        "w5_elapsed_s": elapsed,
        "w5_steps_per_s": steps / elapsed,
        "w5_most_runs_of_a_key_at_once": float(most),
        "w5_last_finish_spread_between_keys_s": max(last_by_key) - min(last_by_key),
    }
    if "w1_steps_per_s" in b.figures:
        b.figures["w5_steps_per_s_of_w1"] = (
            b.figures["w5_steps_per_s"] / b.figures["w1_steps_per_s"]
        )


async def w7(b: Bench) -> None:
    """W7: a rate limit of 100 per second, saturated. The runs are started first with
    the key set to 1 per day (PUT /v1/limits), so all but one wait for tokens — how
    fast the API starts runs does not bound what is measured — then the key is set to
    the definition's 100 per second and the backlog drains. The rate is the attempts
    sent over the 30 s after the first second of the drain, from the send times the
    database recorded (each held attempt's first ``task.released`` row)."""
    n = b.n(W7_RUNS)
    await b.set_rate_limit("bench-rate", 1, 86400.0)
    slots = asyncio.Semaphore(32)
    since = dt.datetime.now(dt.UTC)
    first_start = time.time()

    async def one() -> str:
        async with slots:
            run_id, _ = await b.start("bench-rated")
        return run_id

    run_ids = list(await asyncio.gather(*(one() for _ in range(n))))
    starts_s = time.time() - first_start
    held = await b.mon.fetchval(
        "SELECT count(*) FROM task_instances WHERE run_id = ANY($1::text[]) "
        "AND held_reason IS NOT NULL",
        run_ids,
    )
    drain = (await b.mon.fetchval("SELECT now()")).timestamp()
    await b.set_rate_limit("bench-rate", W7_RATE, 1.0)
    await b.wait_for(run_ids, since)
    details = await b.runs(run_ids)
    good = succeeded(details)
    rows = await b.mon.fetch(
        "SELECT min(h.at) AS sent FROM run_history h "
        " WHERE h.run_id = ANY($1::text[]) AND h.kind = 'task.released' GROUP BY h.task_id",
        run_ids,
    )
    sent = sorted(r["sent"].timestamp() for r in rows)
    t0 = drain + W7_SKIP
    window = [t for t in sent if t0 <= t < t0 + W7_SECONDS]
    # the most sent in any one second of the window (the second ending at each send)
    most = 0
    j = 0
    for i, t in enumerate(window):
        while window[j] <= t - 1.0:
            j += 1
        most = max(most, i - j + 1)
    b.figures |= {
        "w7_runs": float(len(details)),
        "w7_runs_failed": float(len(details) - len(good)),
        "w7_starts_s": starts_s,
        "w7_held_before_drain": float(held),
        "w7_limit_per_s": float(W7_RATE),
        "w7_window_s": W7_SECONDS,
        # attempts still waiting when the window closed: the limit, not the backlog, set
        # the pace throughout
        "w7_saturated": 1.0 if sent and sent[-1] >= t0 + W7_SECONDS else 0.0,
        "w7_rate_per_s": len(window) / W7_SECONDS,
        "w7_most_in_1s": float(most),
        "w7_drain_s": (sent[-1] - drain) if sent else float("nan"),
    }


async def python_nodes(b: Bench) -> None:
    """2,000 one-attempt PYTHON nodes, 16 at once, on the built-in workers (issue 25): none
    may crash; what one costs (the workers' CPU with their reaped children: the node's
    processes, and bwrap and slirp4netns in a sandbox) and takes (lease → report)."""
    n = b.n(PYTHON_NODES)
    workers = b.stack.pid("workers")
    cpu0, busy0 = cpu_seconds_with_children(workers), machine_busy_seconds()
    loop = await b.drive("bench-python", n, in_flight=PYTHON_IN_FLIGHT)
    cpu1, busy1 = cpu_seconds_with_children(workers), machine_busy_seconds()
    details = await b.runs(loop.run_ids)
    good = succeeded(details)
    errors = [
        t.error or "" for r, tasks in details if r.status is not RunStatus.SUCCEEDED for t in tasks
    ]
    durations = [
        (t.finished_at - t.started_at).total_seconds() * 1000
        for _, tasks in good
        for t in tasks
        if t.started_at and t.finished_at
    ]
    latencies = [
        (r.completed_at - r.created_at).total_seconds() * 1000
        for r, _ in good
        if r.completed_at is not None
    ]
    elapsed = max(1e-9, loop.last_done - loop.first_start)
    b.figures |= {
        "python_nodes": float(len(details)),
        "python_runs_failed": float(len(details) - len(good)),
        "python_crashed": float(sum("killed by SIG" in e for e in errors)),
        "python_nodes_per_s": len(good) / elapsed,
        "python_node_p50_ms": percentile(durations, 0.5),
        "python_node_p99_ms": percentile(durations, 0.99),
        "python_run_p50_ms": percentile(latencies, 0.5),
        "python_workers_cpu_ms_per_node": (cpu1 - cpu0) * 1000 / max(1, len(details)),
        "python_machine_cpu_ms_per_node": (busy1 - busy0) * 1000 / max(1, len(details)),
    }
    if errors:
        print(f"  python: {len(errors)} failed, e.g. {errors[0][:300]}", flush=True)


async def profile(b: Bench, workload: str) -> None:
    """``workload`` (w1, w2, w3, w4 or w6) once more with py-spy attached; its steps (W2's,
    W6's tasks; W3's starts) divide the CPU."""
    command = py_spy()
    if command is None:
        print("no py-spy (pip install py-spy, or install uv): no profile")
        return
    profiler = Profiler(command, b.stack.workdir)
    names = ["coordinator", "outbox-enqueuer", "api-gateway", "bench-worker-0"]
    if workload == "w4":
        names.append("timer")
    for name in names:
        await profiler.attach(name, b.stack.pid(name))
    await asyncio.sleep(2.0)  # py-spy attaches
    if workload == "w4":  # W4 once more; its figures of the first run are kept
        kept = dict(b.figures)
        cpu0 = await b.cpu_snapshot()
        t0 = time.perf_counter()
        await w4(b)
        elapsed = time.perf_counter() - t0  # its starts, the wait until due, the fires
        cpu1 = await b.cpu_snapshot()
        outputs = await profiler.stop()
        steps = b.figures["w4_waits"]
        lag = b.figures["w4_timer_lag_p99_ms"]
        b.figures = kept
        b.figures["profile_w4_timer_lag_p99_ms"] = lag
    elif workload == "w3":
        n = b.n(5000)
        cpu0 = await b.cpu_snapshot()
        t0 = time.perf_counter()
        await b.start_many("bench-one", n, clients=32)
        elapsed = time.perf_counter() - t0
        cpu1 = await b.cpu_snapshot()
        outputs = await profiler.stop()
        steps = float(n)
        b.figures["profile_w3_starts_per_s"] = steps / elapsed
    elif workload == "idle":  # chains one at a time, ten times as many: where a step waits
        loop, cpu0, cpu1 = await run_chains(b, runs=b.n(100), in_flight=1)
        outputs = await profiler.stop()
        steps = await chain_figures(b, "profile_idle", loop, 1)
        elapsed = b.figures["profile_idle_elapsed_s"]
    elif workload == "w1":
        in_flight = b.n(W1_IN_FLIGHT)
        loop, cpu0, cpu1 = await run_chains(
            b, runs=b.n(W1_RUNS), in_flight=in_flight, seconds=STARTING_SECONDS * b.args.scale
        )
        outputs = await profiler.stop()
        steps = await chain_figures(b, "profile_w1", loop, in_flight)
        elapsed = b.figures["profile_w1_elapsed_s"]
    else:
        if workload == "w2":
            definition, runs, in_flight, per_run = "bench-fanout", W2_RUNS, W2_IN_FLIGHT, FANOUT
        else:
            definition, runs, in_flight, per_run = "bench-map", W6_RUNS, W6_RUNS, W6_ITEMS
        cpu0 = await b.cpu_snapshot()
        loop = await b.drive(
            definition,
            b.n(runs),
            in_flight=b.n(in_flight),
            seconds=STARTING_SECONDS * b.args.scale,
        )
        cpu1 = await b.cpu_snapshot()
        outputs = await profiler.stop()
        details = await b.runs(loop.run_ids)
        steps = float(len(succeeded(details)) * per_run)
        elapsed = elapsed_since(loop.first_start, details, loop)
        b.figures[f"profile_{workload}_tasks_per_s"] = steps / elapsed
    print(
        f"\nprofile of {workload.upper()} ({steps:.0f} steps in {elapsed:.1f} s, py-spy attached):"
    )
    for name, path in outputs.items():
        p = summarise(path)
        cpu_ms = (cpu1.get(name, 0.0) - cpu0.get(name, 0.0)) * 1000 / max(1.0, steps)
        print(render(name, p, cpu_ms))
        key = name.replace("-", "_")
        b.figures[f"profile_{key}_cpu_ms_per_step"] = cpu_ms
        for kind, share in p.self_share.items():
            b.figures[f"profile_{key}_self_{kind}_pct"] = share * 100
    print(f"(raw stacks in {b.stack.workdir})\n")


async def main() -> dict[str, float]:
    args = parse(options())
    DETAILS.clear()
    name = new_database_name("composer_bench_stack")
    await repo.create_database(ADMIN_URL, name)
    url = repo.database_url(ADMIN_URL, name)
    wal_name = f"{name}_wal"
    wal_url = repo.database_url(ADMIN_URL, wal_name)
    walinspect_unavailable = await _sql.wal_database(ADMIN_URL, wal_name, wal_url)
    prefix = f"bench-{uuid.uuid4().hex[:10]}"
    workdir = Path(tempfile.mkdtemp(prefix="composer-bench-"))
    private = PrivateRedis(workdir / "redis") if args.redis == "private" else None
    if private is not None:
        await private.start()
    redis_url = private.url if private is not None else REDIS_URL
    redis = cq.connect(redis_url)
    mon = await repo.connect(url)
    stats = await _sql.Stats.open(ADMIN_URL, name)
    stack = ProcessStack(
        url,
        redis_url,
        prefix,
        workdir,
        workers=args.workers,
        worker_concurrency=args.worker_concurrency,
        queues=("bench",),
        replicas=args.replicas,
        route_by_run=args.coordinator_split == "run",
        settings=args.env,
    )
    print(
        f"  scratch database {name}, Redis {redis_url} prefix {prefix}, logs in {workdir}",
        flush=True,
    )
    hints: cq.Subscriber | None = None
    try:
        await repo.migrate(mon)
        # the statements the waits may use, prepared now: later, each read is one transaction
        await repo.count_active_runs(
            mon, start=dt.datetime.now(dt.UTC), end=dt.datetime.now(dt.UTC)
        )
        with contextlib.suppress(repo.NotFound):
            await repo.get_run(mon, str(uuid.uuid4()))
        load = loadavg()
        await stack.start()
        headers = {"Authorization": f"Bearer {API_TOKEN}"}
        connector = aiohttp.TCPConnector(limit=256)
        async with aiohttp.ClientSession(headers=headers, connector=connector) as http:
            b = Bench(args, stack, http, mon, stats, redis, await redis.server_pid())
            b.wal_url, b.walinspect_unavailable = wal_url, walinspect_unavailable
            hints = cq.Subscriber(
                redis,
                [cq.channel(prefix, cq.RUN_FINISHED)],
                b.on_hint,
                on_gap=b.on_gap,
                name="bench-run-finished",
            )
            hints.start()
            await asyncio.wait_for(hints.subscribed.wait(), 30)
            for definition in (
                chain(CHAIN_STEPS),
                fanout(FANOUT),
                mapped(W6_ITEMS),
                ONE_NODE,
                ONE_WAIT,
                ONE_PYTHON,
                keyed_chain(CHAIN_STEPS),
                RATED,
            ):
                await b.deploy(definition)
            b.figures |= {
                "loadavg_1m_at_start": load[0],
                "loadavg_5m_at_start": load[1],
                "scale": args.scale,
                "redis_private": 1.0 if private is not None else 0.0,
                "workers": float(args.workers),
                "worker_concurrency": float(args.worker_concurrency),
            }
            steps: dict[str, Callable[[], Awaitable[None]]] = {
                "idle": lambda: idle(b),
                "w1": lambda: w1_with_commits(b),
                "ceiling": lambda: ceiling(b, url),
                "w2": lambda: w2(b),
                "w6": lambda: w6(b),
                "w4": lambda: w4(b),
                "w3": lambda: w3(b),
                "sealing": lambda: sealing(b),
                "python": lambda: python_nodes(b),
                "w5": lambda: w5(b),
                "w7": lambda: w7(b),
            }
            # A server without autovacuum (this machine's) keeps every dead row of the
            # workloads before: the outbox's and the tasks' churn would slow the next
            # one several times over (W6 after W1: PostgreSQL 0.7 -> 2.8 ms a task),
            # which no production server (autovacuum on; V001 tunes the outbox's) sees.
            vacuum = await mon.fetchval("SHOW autovacuum") != "on"
            b.figures["vacuumed_between_workloads"] = 1.0 if vacuum else 0.0
            ran = False
            for workload in WORKLOADS:
                if workload in args.only:
                    if vacuum and ran:
                        await mon.execute("VACUUM (ANALYZE)")
                    ran = True
                    t = time.perf_counter()
                    await steps[workload]()
                    print(f"  {workload} done in {time.perf_counter() - t:.1f} s", flush=True)
            if args.profile:
                await profile(b, args.profile)
            b.figures["loadavg_1m_at_end"] = loadavg()[0]
            stack.sample_rss()
            for p in stack.procs:
                b.figures[f"peak_rss_{p.name.replace('-', '_')}_mb"] = p.peak_rss
    finally:
        if hints is not None:
            await hints.close()
        await stack.stop()
        await stats.close()
        await mon.close()
        await redis.drop(prefix)
        await redis.close()
        if private is not None:
            await private.stop()
        await repo.drop_database(ADMIN_URL, name)
        await repo.drop_database(ADMIN_URL, wal_name)
    return b.figures
