"""The stack under test: a private PostgreSQL and Redis, and every service as processes.

PostgreSQL and Redis come from libs/devstack (``start_private_postgres``,
``start_private_redis``) under a temporary folder, on spare ports, so
restarting them disturbs nothing else on the machine. Each service replica
is a process with its own log file; a small supervisor restarts a replica
that exits on its own (counted: an unexpected exit is a figure the suite
prints), while one the fault injector killed stays down until it is let go.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

import composer_queue
import composer_repo as repo
from composer_devstack._embedded import (
    PrivatePostgres,
    PrivateRedis,
    free_port,
    start_private_postgres,
    start_private_redis,
)
from tests.chaos.ledger import read_ledger_file

#: Random per run, as the services demand outside COMPOSER_DEV_MODE (composer_service.tokens);
#: the processes get them through their environment.
API_TOKEN = secrets.token_urlsafe(32)
WORKER_TOKEN = secrets.token_urlsafe(32)
PREFIX = "chaos"
#: The queue the chaos workers serve (the ledgered no-op handler).
QUEUE = "chaos"
#: PostgreSQL tuned for a throw-away cluster on a busy laptop: durability across a
#: power cut is not what this suite tests (a fast shutdown still flushes everything).
PG_CONF = "fsync = off\nfull_page_writes = off\nmax_connections = 200\n"


@dataclass(frozen=True)
class Timings:
    """Short intervals so recovery fits in the run (all through COMPOSER_* settings)."""

    lease_ttl: float = 3.0
    sweeper_interval: float = 0.5
    lost_after: float = 3.0
    poll: float = 0.5
    timer_poll: float = 1.0
    worker_concurrency: int = 32


@dataclass
class Replica:
    kind: str
    index: int
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    process: asyncio.subprocess.Process | None = None
    starts: int = 0
    #: Exits nobody asked for (not a fault's SIGKILL, not shutdown).
    unexpected_exits: int = 0
    held: bool = False
    frozen: bool = False
    _release: asyncio.Event = field(default_factory=asyncio.Event)
    _expected_exit: bool = False

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.index}"

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None


#: The services, in start order, and how many replicas of each a run starts by default.
DEFAULT_REPLICAS: dict[str, int] = {
    "coordinator": 2,
    "outbox-enqueuer": 2,
    "timer": 1,
    "lease-sweeper": 1,
    "partition-manager": 1,
    "workers": 2,
    "chaos-workers": 2,
    "api-gateway": 1,
}


def parse_replicas(text: str) -> dict[str, int]:
    """``coordinator=2,timer=2`` (commas or spaces) over the defaults; ``all=N`` sets every
    service, and later entries override it (``all=2,api-gateway=1``). ValueError naming
    the bad entry."""
    counts = dict(DEFAULT_REPLICAS)
    for entry in text.replace(",", " ").split():
        name, sep, value = entry.partition("=")
        if not sep or not value.strip().isdigit():
            raise ValueError(f"{entry!r} is not <service>=<count>")
        count = int(value)
        if count < 1:
            raise ValueError(f"{entry!r}: every service needs at least one replica")
        if name == "all":
            counts = dict.fromkeys(counts, count)
        elif name in counts:
            counts[name] = count
        else:
            raise ValueError(f"{name!r} is not a service: {', '.join(['all', *counts])}")
    return counts


@dataclass
class Cluster:
    workdir: Path
    timings: Timings = field(default_factory=Timings)
    #: Replicas per service (``--replicas`` changes them: ``parse_replicas``).
    replicas: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_REPLICAS))
    postgres: PrivatePostgres | None = None
    redis: PrivateRedis | None = None
    services: list[Replica] = field(default_factory=list)
    #: One per api-gateway replica, each on its own port.
    api_urls: list[str] = field(default_factory=list)
    database_url: str = ""
    redis_url: str = ""
    _watchers: list[asyncio.Task[None]] = field(default_factory=list)
    _stopping: bool = False

    @property
    def ledger_dir(self) -> Path:
        return self.workdir / "ledger"

    @property
    def api_url(self) -> str:
        """The first gateway's URL (deploys and one-off calls)."""
        return self.api_urls[0]

    def of(self, kind: str) -> list[Replica]:
        return [r for r in self.services if r.kind == kind]

    # -- start and stop ----------------------------------------------------------

    async def start(self) -> None:
        state = self.workdir / "state"
        self.postgres = await asyncio.to_thread(start_private_postgres, state)
        with (self.postgres.data_dir / "postgresql.conf").open("a") as conf:
            conf.write(PG_CONF)
        await asyncio.to_thread(self._pg_ctl, "restart", "-m", "fast")
        self.redis = await start_private_redis(state)
        self.database_url = self.postgres.url
        self.redis_url = self.redis.url
        await repo.create_database_if_missing(self.database_url)
        conn = await repo.connect(self.database_url)
        try:
            await repo.migrate(conn)
        finally:
            await conn.close()
        self._build_services()
        for replica in self.services:
            self._watchers.append(
                asyncio.create_task(self._supervise(replica), name=f"supervise:{replica.name}")
            )
        await self.wait_ready(60.0)

    def _build_services(self) -> None:
        t = self.timings
        api_ports = [free_port() for _ in range(self.replicas["api-gateway"])]
        self.api_urls = [f"http://127.0.0.1:{port}" for port in api_ports]
        coordinators = [f"127.0.0.1:{free_port()}" for _ in range(self.replicas["coordinator"])]
        base = {k: v for k, v in os.environ.items() if not k.startswith("COMPOSER_")} | {
            "COMPOSER_DATABASE_URL": self.database_url,
            "COMPOSER_REDIS_URL": self.redis_url,
            "COMPOSER_REDIS_PREFIX": PREFIX,
            "COMPOSER_WORKER_TOKEN": WORKER_TOKEN,
            "COMPOSER_API_TOKENS": f"{API_TOKEN}:admin",
            "COMPOSER_LOG_FORMAT": "human",
            "COMPOSER_LOG_LEVEL": "INFO",
            "COMPOSER_HTTP_ALLOW_PRIVATE": "true",
            "COMPOSER_POOL_SIZE": "8",
            "COMPOSER_DRAIN_SECONDS": "2",
            "COMPOSER_LEASE_TTL_SECONDS": str(t.lease_ttl),
            "COMPOSER_SWEEPER_INTERVAL_SECONDS": str(t.sweeper_interval),
            "COMPOSER_SWEEPER_LOST_AFTER_SECONDS": str(t.lost_after),
            "COMPOSER_POLL_SECONDS": str(t.poll),
            "COMPOSER_TIMER_POLL_SECONDS": str(t.timer_poll),
            "COMPOSER_CONCURRENCY": str(t.worker_concurrency),
            "COMPOSER_API_RESULT_POLL_SECONDS": "1",
            "PYTHONUNBUFFERED": "1",
        }
        modules = {
            "coordinator": ["-m", "composer_coordinator"],
            "outbox-enqueuer": ["-m", "composer_outbox_enqueuer"],
            "timer": ["-m", "composer_timer"],
            "lease-sweeper": ["-m", "composer_lease_sweeper"],
            "partition-manager": ["-m", "composer_partition_manager"],
            "workers": ["-m", "composer_workers"],
            "chaos-workers": ["-m", "tests.chaos.worker", str(self.ledger_dir), QUEUE],
            "api-gateway": ["-m", "composer_api_gateway"],
        }
        logs = self.workdir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        for kind, count in self.replicas.items():
            for i in range(count):
                env = dict(base)
                if kind == "api-gateway":
                    env["COMPOSER_API_PORT"] = str(api_ports[i])
                elif kind == "coordinator":
                    env["COMPOSER_GRPC_ADDR"] = coordinators[i]
                elif kind in ("workers", "chaos-workers"):
                    # Every coordinator, one list for all: each run's calls go to
                    # the one its id hashes to, to the next while that one is dead.
                    env["COMPOSER_COORDINATORS"] = ",".join(coordinators)
                replica = Replica(
                    kind, i, [sys.executable, *modules[kind]], env, logs / f"{kind}-{i}.log"
                )
                self.services.append(replica)

    async def wait_ready(self, timeout: float) -> None:
        """Until every gateway answers and every coordinator accepts connections."""
        deadline = time.monotonic() + timeout
        ports = [int(r.env["COMPOSER_GRPC_ADDR"].rsplit(":", 1)[1]) for r in self.of("coordinator")]
        async with aiohttp.ClientSession() as http:
            while True:
                ok = all(_port_open(p) for p in ports)
                for url in self.api_urls if ok else ():
                    try:
                        async with http.get(f"{url}/healthz") as resp:
                            ok = ok and resp.status == 200
                    except aiohttp.ClientError:
                        ok = False
                if ok:
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"the stack was not ready within {timeout:.0f}s; logs in {self.workdir}/logs"
                    )
                await asyncio.sleep(0.2)

    async def stop(self) -> None:
        self._stopping = True
        for replica in self.services:
            replica._release.set()
            if replica.frozen:
                self._signal(replica, signal.SIGCONT)
            if replica.alive:
                self._signal(replica, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for replica in self.services:
            if replica.process is None:
                continue
            try:
                await asyncio.wait_for(
                    replica.process.wait(), max(0.1, deadline - time.monotonic())
                )
            except TimeoutError:
                self._signal(replica, signal.SIGKILL, group=True)
                await replica.process.wait()
        for watcher in self._watchers:
            watcher.cancel()
        for watcher in self._watchers:
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        if self.redis is not None:
            await self.redis.stop()
        if self.postgres is not None:
            await asyncio.to_thread(self.postgres.stop)

    # -- supervision -------------------------------------------------------------

    async def _supervise(self, replica: Replica) -> None:
        while not self._stopping:
            if replica.held:
                await replica._release.wait()
                replica.held = False
                continue
            with replica.log_path.open("ab") as log:
                replica.process = await asyncio.create_subprocess_exec(
                    *replica.argv,
                    env=replica.env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            replica.starts += 1
            await replica.process.wait()
            if self._stopping:
                return
            if replica._expected_exit:
                replica._expected_exit = False
            else:
                replica.unexpected_exits += 1
                await asyncio.sleep(0.5)  # a crash loop must not eat the machine

    def _signal(self, replica: Replica, sig: signal.Signals, *, group: bool = False) -> None:
        if replica.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            if group:
                os.killpg(replica.process.pid, sig)
            else:
                replica.process.send_signal(sig)

    # -- faults ------------------------------------------------------------------

    async def kill(self, kind: str, rng: random.Random) -> Replica:
        """SIGKILL one live replica of ``kind``; it stays down until ``release``."""
        live = [r for r in self.of(kind) if r.alive and not r.frozen and not r.held]
        replica = rng.choice(live or self.of(kind))
        replica.held = True
        replica._release.clear()
        if replica.alive:
            replica._expected_exit = True
            self._signal(replica, signal.SIGKILL, group=True)
            assert replica.process is not None
            await replica.process.wait()
        return replica

    def in_flight(self, replica: Replica) -> int:
        """Handlers the replica's current process started and has not ended (its ledger)."""
        if not replica.alive:
            return 0
        assert replica.process is not None
        open_: set[str] = set()
        for path in self.ledger_dir.glob(f"*-{replica.process.pid}-*.jsonl"):
            for r in read_ledger_file(path):
                if r["k"] == "start":
                    open_.add(r["x"])
                elif r["k"] == "end":
                    open_.discard(r["x"])
        return len(open_)

    def release(self, replica: Replica) -> None:
        replica._release.set()

    def freeze(self, replica: Replica) -> None:
        replica.frozen = True
        self._signal(replica, signal.SIGSTOP)

    def thaw(self, replica: Replica) -> None:
        self._signal(replica, signal.SIGCONT)
        replica.frozen = False

    def _pg_ctl(self, *args: str) -> None:
        assert self.postgres is not None
        pg = self.postgres
        # The options start_private_postgres started it with; and a log file, or the
        # server would inherit (and hold open) pg_ctl's output.
        options = f"-p {pg.port} -k {pg.data_dir} -c listen_addresses=127.0.0.1"
        cmd = pg._cmd(
            pg.pg_ctl,
            "-D",
            str(pg.data_dir),
            "-l",
            str(pg.data_dir / "server.log"),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            *args,
        )
        result = subprocess.run(
            cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False, timeout=90
        )
        if result.returncode != 0:
            raise RuntimeError(f"pg_ctl {' '.join(args)} failed: {result.stderr or result.stdout}")

    async def restart_postgres(self) -> None:
        """Fast shutdown (open transactions are rolled back, clients cut off), then start."""
        await asyncio.to_thread(self._pg_ctl, "restart", "-m", "fast")

    async def restart_redis(self, down_for: float) -> None:
        """Stop Redis (it keeps nothing: streams, groups and hints are gone) and start it
        again on the same port after ``down_for`` seconds."""
        assert self.redis is not None
        port = self.redis.port
        await self.redis.stop()
        await asyncio.sleep(down_for)
        self.redis = await start_private_redis(self.workdir / "state", port)

    async def flush_redis(self) -> None:
        client = _redis_client(self.redis_url)
        try:
            await client.flush_all()
        finally:
            await client.close()

    def unexpected_exits(self) -> Iterator[tuple[str, int]]:
        for replica in self.services:
            if replica.unexpected_exits:
                yield replica.name, replica.unexpected_exits


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _redis_client(url: str) -> composer_queue.RedisQueue:
    return composer_queue.connect(url)
