"""One chaos run: stack up, load and faults, quiescence, checks, stack down.

The pace is configurable (runs, concurrency, fault gap, rounds), so the same
code is ``make chaos`` (≥ 1,000 runs, faults repeated until every run has
started) and the short variant in ``make test`` (≈ 100 runs, one fault of
each kind).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import composer_queue
import composer_repo as repo
from tests.chaos.checks import Report, check, check_schedule, gather_runs, gather_streams
from tests.chaos.cluster import DEFAULT_REPLICAS, PREFIX, Cluster, Timings
from tests.chaos.driver import Driver
from tests.chaos.faults import Injector
from tests.chaos.ledger import read_ledger


@dataclass
class Config:
    runs: int = 1000
    concurrency: int = 40
    seed: int | None = None
    #: Seconds between faults.
    gap: tuple[float, float] = (2.0, 5.0)
    #: Rounds of faults (each kind once per round); None: until every run has started.
    rounds: int | None = None
    #: Longest wait for the streams and the outbox to drain once every run has ended.
    quiesce_timeout: float = 120.0
    #: Longest wait for any one run (it is reported stuck after that).
    run_deadline: float = 600.0
    timings: Timings = field(default_factory=Timings)
    #: Replicas per service (``--replicas``).
    replicas: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_REPLICAS))
    #: Keep the work folder (logs, ledger) even when every check passes.
    keep: bool = False

    @classmethod
    def short(cls) -> Config:
        """``make test``'s variant, with two of every service: it costs about what the
        defaults do (55-60 s either way here), and every replica's safety is checked."""
        return cls(
            runs=100,
            concurrency=10,
            rounds=1,
            gap=(1.0, 2.0),
            run_deadline=150.0,
            replicas=dict.fromkeys(DEFAULT_REPLICAS, 2),
        )


@dataclass
class Outcome:
    report: Report
    workdir: Path
    seconds: float


def say(text: str) -> None:
    print(f"chaos | {text}", flush=True)


async def run_suite(cfg: Config) -> Outcome:
    seed = cfg.seed if cfg.seed is not None else random.SystemRandom().randrange(1 << 32)
    rng = random.Random(seed)
    workdir = Path(tempfile.mkdtemp(prefix="composer-chaos-"))
    os.chmod(workdir, 0o755)  # PostgreSQL runs as the postgres user when we are root
    began = time.monotonic()
    say(f"seed {seed}; work folder {workdir}")
    cluster = Cluster(workdir, cfg.timings, dict(cfg.replicas))
    report: Report | None = None
    try:
        await cluster.start()
        say(
            f"stack up in {time.monotonic() - began:.1f}s: "
            f"{', '.join(f'{r.name}' for r in cluster.services)}"
        )
        driver = Driver(
            cluster.api_urls,
            cluster.database_url,
            rng,
            cfg.runs,
            cfg.concurrency,
            run_deadline=cfg.run_deadline,
        )
        await driver.deploy()
        injector = Injector(cluster, random.Random(rng.random()), gap=cfg.gap)
        stop_faults = asyncio.Event()
        load = asyncio.create_task(driver.run(), name="load")
        faults = asyncio.create_task(injector.run(stop_faults, rounds=cfg.rounds), name="faults")
        load_began = time.monotonic()
        while not faults.done():
            if load.done() or (cfg.rounds is None and driver.started >= cfg.runs):
                stop_faults.set()
            await asyncio.wait([faults], timeout=5.0)
            say(
                f"{time.monotonic() - load_began:5.0f}s  runs started {driver.started}, "
                f"finished {driver.finished}; faults {len(injector.injected)}"
            )
        faults.result()
        await injector.settle()
        for replica in cluster.services:
            cluster.release(replica)
            if replica.frozen:
                cluster.thaw(replica)
        faults_end = time.time()
        unfinished = cfg.runs - driver.finished
        say(f"faults over: {injector.counts()}")
        while not load.done():
            await asyncio.wait([load], timeout=5.0)
            say(f"waiting for the last runs: finished {driver.finished} of {cfg.runs}")
        load.result()
        quiet = await _quiesce(cluster, cfg.quiesce_timeout)
        to_quiescence = time.time() - faults_end
        say(
            f"quiescent {to_quiescence:.1f}s after the last fault"
            + ("" if quiet else " (TIMED OUT)")
        )

        pool = await repo.create_pool(cluster.database_url, min_size=0, max_size=2)
        redis = composer_queue.connect(cluster.redis_url)
        try:
            facts = await gather_runs(pool, driver.driven)
            now = await gather_streams(pool, redis, PREFIX)
            report = check(facts, read_ledger(cluster.ledger_dir), now)
            await check_schedule(pool, report)
        finally:
            await redis.close()
            await pool.close()
        report.figure("seed", seed)
        report.figure("replicas", dict(cfg.replicas))
        report.figure(
            "API calls each gateway answered",
            {
                f"api-gateway-{i}": driver.answered.get(url, 0)
                for i, url in enumerate(cluster.api_urls)
            },
        )
        report.figure("faults injected", injector.counts())
        report.figure(
            "unexpected service exits (restarted by the supervisor)",
            dict(cluster.unexpected_exits()),
        )
        report.figure("API calls that failed or got 5xx (retried)", driver.api_errors)
        report.figure("runs not yet finished when the faults stopped", unfinished)
        report.figure("time to quiescence after the last fault", f"{to_quiescence:.1f}s", ok=quiet)
        if not quiet:
            report.violation(
                f"not quiescent within {cfg.quiesce_timeout:.0f}s of the last run ending"
            )
    finally:
        await cluster.stop()
    seconds = time.monotonic() - began
    say(f"report ({seconds:.0f}s in all):\n{report.render()}")
    if report.violations or cfg.keep:
        say(f"logs and ledger kept in {workdir}")
    else:
        with contextlib.suppress(OSError):
            shutil.rmtree(workdir)
    return Outcome(report, workdir, seconds)


async def _quiesce(cluster: Cluster, timeout: float) -> bool:
    """Until the outbox is empty and no stream holds an entry (read or not)."""
    deadline = time.monotonic() + timeout
    pool = await repo.create_pool(cluster.database_url, min_size=0, max_size=2)
    redis = composer_queue.connect(cluster.redis_url)
    try:
        while time.monotonic() < deadline:
            try:
                now = await gather_streams(pool, redis, PREFIX)
            except (repo.RepoError, OSError):
                now = None
            if (
                now is not None
                and not sum(now.outbox.values())
                and not now.entries
                and not now.pending
            ):
                return True
            await asyncio.sleep(0.5)
        return False
    finally:
        await redis.close()
        await pool.close()


def have_servers() -> str | None:
    """Why the suite cannot run here (None: it can)."""
    from composer_devstack._embedded import _pg_bin

    if not _pg_bin("initdb") or not _pg_bin("pg_ctl"):
        return "PostgreSQL's initdb/pg_ctl are not installed"
    if not shutil.which("redis-server"):
        return "redis-server is not installed"
    if os.geteuid() == 0:
        import pwd

        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root without a postgres user to run PostgreSQL as"
    return None
