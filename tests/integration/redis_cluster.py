"""A local Redis Cluster of three masters and no replicas, for the cluster tests.

``LocalCluster.start()`` runs three ``redis-server --cluster-enabled yes`` in a
temporary directory on free ports of their own (from 7100 up: never 6379 nor a
port another test run holds; each node also needs its bus port, +10000), joins
them with ``redis-cli --cluster create`` and waits until every node says
``cluster_state:ok``. ``stop()`` kills them and removes the directory.
``kill(port)`` and ``restart(port)`` take one master down and bring it back with
its node configuration (nodes.conf), empty (no persistence: what PostgreSQL holds
is the truth, and what the stream held is sent again by the lease-sweeper).
``cluster-require-full-coverage no``, as docs/architecture.md advises for a
cluster without replicas: while a master is down, the others serve their slots.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

FIRST_PORT = 7100
LAST_PORT = 7999
MASTERS = 3
BUS_OFFSET = 10000


def _free(port: int) -> bool:
    """Nothing listens on ``port`` nor on its cluster bus port."""
    for p in (port, port + BUS_OFFSET):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                return False
    return True


def _cli(port: int, *args: str, timeout: float = 10) -> str:
    out = subprocess.run(
        ["redis-cli", "-h", "127.0.0.1", "-p", str(port), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return out.stdout + out.stderr


def _until(what: str, check: object, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise RuntimeError(f"the local Redis Cluster: {what} did not happen in {timeout:.0f}s")
        time.sleep(0.05)


@dataclass
class LocalCluster:
    ports: list[int] = field(default_factory=list)
    directory: Path | None = None
    processes: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def url(self) -> str:
        """Any node's address: the cluster client finds the others."""
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    @property
    def every_node_url(self) -> str:
        """Every node's address: a client that starts while one is down finds the others."""
        return "redis://" + ",".join(f"127.0.0.1:{p}" for p in self.ports) + "/0"

    def start(self) -> LocalCluster:
        if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
            raise RuntimeError(
                "the cluster tests need redis-server and redis-cli (apt-get install redis-server)"
            )
        self.directory = Path(tempfile.mkdtemp(prefix="composer-redis-cluster-"))
        self.ports = self._pick_ports()
        try:
            for port in self.ports:
                self._spawn(port)
            for port in self.ports:
                _until(f"node {port} answering", lambda p=port: "PONG" in _cli(p, "PING"))
            created = subprocess.run(
                [
                    "redis-cli",
                    "--cluster",
                    "create",
                    *[f"127.0.0.1:{p}" for p in self.ports],
                    "--cluster-replicas",
                    "0",
                    "--cluster-yes",
                ],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            if created.returncode != 0:
                raise RuntimeError(
                    f"redis-cli --cluster create failed: {created.stdout}{created.stderr}"
                )
            self.wait_ok()
        except BaseException:
            self.stop()
            raise
        return self

    def _pick_ports(self) -> list[int]:
        """Three consecutive free ports (with their bus ports), from a spot of this process's
        own so that two test runs at once rarely even try the same ones."""
        span = LAST_PORT - FIRST_PORT - MASTERS
        start = FIRST_PORT + (os.getpid() * 7) % span
        for n in range(span):
            base = FIRST_PORT + (start - FIRST_PORT + n) % span
            ports = list(range(base, base + MASTERS))
            if all(_free(p) for p in ports):
                return ports
        raise RuntimeError(f"no {MASTERS} free ports between {FIRST_PORT} and {LAST_PORT}")

    def _spawn(self, port: int) -> None:
        assert self.directory is not None
        node_dir = self.directory / str(port)
        node_dir.mkdir(exist_ok=True)
        self.processes[port] = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "2000",
                # no replicas: a dead master stops its own slots only, not the cluster
                "--cluster-require-full-coverage",
                "no",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(node_dir),
                "--logfile",
                str(node_dir / "redis.log"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def cluster_ok(self) -> bool:
        return all(
            "cluster_state:ok" in _cli(p, "CLUSTER", "INFO")
            for p in self.ports
            if p in self.processes
        )

    def wait_ok(self, timeout: float = 30) -> None:
        _until("cluster_state:ok on every node", self.cluster_ok, timeout)

    def kill(self, port: int) -> None:
        """Kill one master at once (SIGKILL: no goodbye to clients or the other nodes)."""
        process = self.processes.pop(port)
        process.kill()
        process.wait(10)

    def restart(self, port: int) -> None:
        """Start a killed master again with its nodes.conf: it takes back its slots, empty."""
        self._spawn(port)
        _until(f"node {port} answering", lambda: "PONG" in _cli(port, "PING"))
        self.wait_ok()

    def stop(self) -> None:
        for process in self.processes.values():
            with contextlib.suppress(OSError):
                process.kill()
        for process in self.processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(10)
        self.processes.clear()
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
