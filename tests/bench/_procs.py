"""The services as processes, as ``make run`` starts them, for the stack benchmark.

Every service of composer_devstack's SERVICES runs as ``python -m <module>``
with the COMPOSER_* settings the dev stack gives it, but on free ports (other
stacks may be running on this machine), a scratch database and a private
Redis prefix; no-op SDK worker processes (tests/bench/_noop_worker.py) serve
the benchmark's queues. Logs go to one file per process. Also here: a
private redis-server, CPU time and peak RSS from /proc, and py-spy attached to
a process for a profile.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from composer_devstack.__main__ import SERVICES

#: Random per run, as the services demand outside COMPOSER_DEV_MODE (composer_service.tokens);
#: the processes get them through their environment.
API_TOKEN = secrets.token_urlsafe(32)
WORKER_TOKEN = secrets.token_urlsafe(32)
_CLK_TCK = os.sysconf("SC_CLK_TCK")
ROOT = Path(__file__).resolve().parents[2]
#: Tasks the no-op worker holds at once (COMPOSER_CONCURRENCY), from the read through
#: the lease's round trip to the handler's end. Its handler is a no-op coroutine, so
#: what a slot costs is memory, and the peers' figures are each at its best setting
#: for this machine (``../shared/peers``: Celery prefork -c 2 for W1, -c 4 for W2).
#: At 64 (the setting before 5be6986) W1's 200 runs waited in the stream for a slot
#: (report → next lease 134-143 ms p50, the machine 1.6 of its 2 cores busy) and the
#: coordinator committed small batches (0.27 commits a step); at 256 every run of W1
#: has one, 0.09 commits a step. Measured (``--only w1,w2,w6 --worker-concurrency N``, one window):
#: W1 1,079 / 1,210 / 1,658 / 1,366 steps/s at 64 / 128 / 256 / 512, all processes'
#: CPU per step 1.38 / 1.21 / 0.81 / 1.00 ms, W2 1,362 / 1,496 / 1,590 / 1,700.
WORKER_CONCURRENCY = 256


#: The ports ``free_port`` handed out: a port is free when asked for and bound only
#: when its process starts, so the kernel may hand it out again meanwhile (the
#: workers' admin port once took the api-gateway's, which then could not start).
_HANDED: set[int] = set()


def free_port() -> int:
    """A free loopback port this process has not handed out before."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
        if port not in _HANDED:
            _HANDED.add(port)
            return port


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    # after the command: state is field 3, utime 14 and stime 15 (1-based)
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


def cpu_seconds_with_children(pid: int) -> float:
    """User + system CPU time of a process and of its children it has reaped."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    # utime, stime, cutime, cstime: fields 14-17 (1-based)
    return sum(int(f) for f in fields[11:15]) / _CLK_TCK


def peak_rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def machine_busy_seconds() -> float:
    """CPU seconds every core of the machine spent busy since boot (from /proc/stat)."""
    parts = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    values = [int(v) for v in parts]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    return (sum(values[:8]) - idle) / _CLK_TCK


@dataclass
class Proc:
    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    process: asyncio.subprocess.Process | None = None
    peak_rss: float = 0.0

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    async def spawn(self) -> None:
        with self.log_path.open("ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                *self.argv,
                env=self.env,
                cwd=ROOT,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )


@dataclass
class ProcessStack:
    """Start with ``await start()``, stop with ``await stop()``."""

    database_url: str
    redis_url: str
    prefix: str
    workdir: Path
    workers: int = 1
    worker_concurrency: int = WORKER_CONCURRENCY
    queues: tuple[str, ...] = ("bench",)
    #: name → replicas: api-gateway replicas all serve the bench's API port
    #: (COMPOSER_API_SHARE_PORT); coordinator replicas each listen on a gRPC port of their own, and
    #: every worker process is given them all, each run's calls routed to one
    #: (``worker_addr``)
    replicas: dict[str, int] = field(default_factory=dict)
    #: False: worker process ``i`` talks to the ``i % n``-th coordinator alone, and a
    #: run's calls reach any of them (the split measured before routing)
    route_by_run: bool = True
    #: COMPOSER_* settings for every process, over the ones set here
    settings: dict[str, str] = field(default_factory=dict)
    api_port: int = field(default_factory=free_port)
    grpc_port: int = field(default_factory=free_port)
    procs: list[Proc] = field(default_factory=list)
    admin_ports: dict[str, int] = field(default_factory=dict)
    _coordinator_addrs: list[str] = field(default_factory=list)

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def _env(self, admin_port: int) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith("COMPOSER_")}
        return (
            base
            | {
                "COMPOSER_DATABASE_URL": self.database_url,
                "COMPOSER_REDIS_URL": self.redis_url,
                "COMPOSER_REDIS_PREFIX": self.prefix,
                "COMPOSER_API_TOKENS": f"{API_TOKEN}:admin",
                "COMPOSER_WORKER_TOKEN": WORKER_TOKEN,
                "COMPOSER_HTTP_ALLOW_PRIVATE": "true",
                "COMPOSER_API_PORT": str(self.api_port),
                "COMPOSER_GRPC_ADDR": f"127.0.0.1:{self.grpc_port}",
                "COMPOSER_LOG_FORMAT": "human",
                "COMPOSER_ADMIN_PORT": str(admin_port),
            }
            | self.settings
        )

    @property
    def coordinators(self) -> list[str]:
        """The coordinator replicas' gRPC addresses (the first on the stack's port)."""
        n = self.replicas.get("coordinator", 1)
        while len(self._coordinator_addrs) < n:
            port = self.grpc_port if not self._coordinator_addrs else free_port()
            self._coordinator_addrs.append(f"127.0.0.1:{port}")
        return self._coordinator_addrs[:n]

    def worker_addr(self, i: int) -> dict[str, str]:
        """Worker process ``i``'s coordinators: every one, each run's calls routed to
        one of them (COMPOSER_COORDINATORS), or without ``route_by_run`` the ``i % n``-th
        alone. (Given all of them in gRPC's own list syntax, its own first, as the dev
        stack gave them, every worker here sent all its calls to one coordinator:
        gRPC's pick_first did not take the first address.)"""
        addrs = self.coordinators
        if len(addrs) == 1:
            return {}
        if self.route_by_run:
            return {"COMPOSER_COORDINATORS": ",".join(addrs)}
        return {"COMPOSER_GRPC_ADDR": addrs[i % len(addrs)]}

    async def start(self, timeout: float = 60.0) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        for name, module in SERVICES:
            n = self.replicas.get(name, 1)
            for i in range(n):
                label = name if n == 1 else f"{name}-{i}"
                port = free_port()
                self.admin_ports[label] = port
                env = self._env(port)
                if name == "coordinator":
                    env["COMPOSER_GRPC_ADDR"] = self.coordinators[i]
                elif name == "api-gateway" and n > 1:
                    env["COMPOSER_API_SHARE_PORT"] = "true"  # every one on the bench's port
                elif name == "workers":
                    env |= self.worker_addr(i)
                self.procs.append(
                    Proc(label, [sys.executable, "-m", module], env, self.workdir / f"{label}.log")
                )
        for i in range(self.workers):
            label = f"bench-worker-{i}"
            env = self._env(0) | {"COMPOSER_CONCURRENCY": str(self.worker_concurrency)}
            env |= self.worker_addr(i)
            env.pop("COMPOSER_ADMIN_PORT")
            self.procs.append(
                Proc(
                    label,
                    [
                        sys.executable,
                        "-m",
                        "tests.bench._noop_worker",
                        str(self.records_path(i)),
                        ",".join(self.queues),
                    ],
                    env,
                    self.workdir / f"{label}.log",
                )
            )
        # The bench's workers start once the services are ready: one started before its
        # coordinator listens gives up asking its protocol version after ~1 s of tries and
        # asks again only before its first lease, so it would never log that it reached
        # the coordinator (``_ready``) and a workload's first task would pay the asking.
        deadline = time.monotonic() + timeout
        services = [p for p in self.procs if not p.name.startswith("bench-worker")]
        for p in services:
            await p.spawn()
        await self._ready(deadline)
        for p in self.procs:
            if p.process is None:
                await p.spawn()
        await self._reached(deadline)

    def records_path(self, i: int) -> Path:
        return self.workdir / f"worker-{i}.records"

    async def _ready(self, deadline: float) -> None:
        """Wait until every service answers its readiness probe."""
        waiting = dict(self.admin_ports)
        async with aiohttp.ClientSession() as http:
            while waiting:
                for p in self.procs:
                    if p.process is not None and p.process.returncode is not None:
                        tail = p.log_path.read_text(errors="replace")[-2000:]
                        raise RuntimeError(f"{p.name} exited ({p.process.returncode}):\n{tail}")
                for name, port in list(waiting.items()):
                    with contextlib.suppress(aiohttp.ClientError, OSError):
                        async with http.get(f"http://127.0.0.1:{port}/readyz") as r:
                            if r.status == 200:
                                del waiting[name]
                if time.monotonic() > deadline:
                    raise TimeoutError(f"services not ready in time: {', '.join(waiting)}")
                await asyncio.sleep(0.2)

    async def _reached(self, deadline: float) -> None:
        """Wait until each bench worker has heard its coordinator: they have no admin
        port, their log says so."""
        for p in self.procs:
            if p.name.startswith("bench-worker"):
                while "speaks worker protocol" not in p.log_path.read_text(errors="replace"):
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"{p.name} did not reach its coordinator")
                    await asyncio.sleep(0.1)

    def cpu(self) -> dict[str, float]:
        return {p.name: cpu_seconds(p.pid) for p in self.procs if p.process is not None}

    def sample_rss(self) -> None:
        for p in self.procs:
            if p.process is not None:
                p.peak_rss = max(p.peak_rss, peak_rss_mb(p.pid))

    def pid(self, name: str) -> int:
        """The process named ``name``, or the first replica of service ``name``."""
        return next(p.pid for p in self.procs if p.name in (name, f"{name}-0"))

    async def restart(self, settings: dict[str, str]) -> None:
        """Stop every process and start them again with ``settings`` over the stack's own
        (the database and Redis keep their data)."""
        await self.stop()
        self.procs.clear()
        self.admin_ports.clear()
        self.settings = {k: v for k, v in self.settings.items() if k not in settings} | settings
        await self.start()

    async def stop(self, grace: float = 15.0) -> None:
        self.sample_rss()
        running = [p for p in self.procs if p.process and p.process.returncode is None]
        for p in running:
            with contextlib.suppress(ProcessLookupError):
                p.process.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        deadline = time.monotonic() + grace
        for p in running:
            assert p.process is not None
            try:
                await asyncio.wait_for(p.process.wait(), max(0.1, deadline - time.monotonic()))
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.process.pid, signal.SIGKILL)
                await p.process.wait()


class PrivateRedis:
    """A redis-server of the benchmark's own on a free port, so that INFO commandstats
    and the server's CPU are the stack's alone (the shared one counts every user).
    No persistence (``--save ""``, no AOF), as the local shared server here runs."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.process: asyncio.subprocess.Process | None = None

    @staticmethod
    def available() -> bool:
        return shutil.which("redis-server") is not None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def start(self, timeout: float = 15.0) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.process = await asyncio.create_subprocess_exec(
            "redis-server",
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.workdir),
            "--logfile",
            str(self.workdir / "redis.log"),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while True:
            if self.process.returncode is not None:
                raise RuntimeError(
                    f"redis-server exited ({self.process.returncode}): see {self.workdir}/redis.log"
                )
            with contextlib.suppress(OSError):
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
                writer.close()
                await writer.wait_closed()
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"redis-server not listening on {self.port} within {timeout:.0f} s"
                )
            await asyncio.sleep(0.1)

    async def stop(self) -> None:
        if self.process is None or self.process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.process.wait(), 10)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await self.process.wait()


def py_spy() -> list[str] | None:
    """How to run py-spy here: installed, or through ``uv tool run`` (from PyPI)."""
    found = shutil.which("py-spy")
    if found:
        return [found]
    uv = shutil.which("uv")
    if uv:
        return [uv, "tool", "run", "py-spy"]
    python3 = shutil.which("python3")  # the Makefile's uv: python3 -m uv
    if (
        python3
        and subprocess.run([python3, "-m", "uv", "--version"], capture_output=True).returncode == 0
    ):
        return [python3, "-m", "uv", "tool", "run", "py-spy"]
    return None


class Profiler:
    """py-spy attached to processes until ``stop()`` (SIGINT makes it write its output)."""

    def __init__(self, command: list[str], workdir: Path) -> None:
        self.command = command
        self.workdir = workdir
        self.running: dict[str, tuple[asyncio.subprocess.Process, Path]] = {}

    async def attach(self, name: str, pid: int, rate: int = 200) -> None:
        out = self.workdir / f"{name}.pyspy.txt"
        proc = await asyncio.create_subprocess_exec(
            *self.command,
            "record",
            "--pid",
            str(pid),
            "--rate",
            str(rate),
            "--format",
            "raw",
            "--output",
            str(out),
            "--nonblocking",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=(self.workdir / f"{name}.pyspy.log").open("wb"),
        )
        self.running[name] = (proc, out)

    async def stop(self) -> dict[str, Path]:
        outputs: dict[str, Path] = {}
        for name, (proc, out) in self.running.items():
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGINT)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), 30)
            if out.exists():
                outputs[name] = out
        self.running.clear()
        return outputs
