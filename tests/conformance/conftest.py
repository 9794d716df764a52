"""The conformance suite's harness: a real stack (tests/integration/e2e's ``open_stack``:
PostgreSQL, Redis, the engine, the coordinator's gRPC server, the enqueuer and the
lease-sweeper) and worker PROCESSES of either SDK, told apart by the ``sdk`` fixture.

Each SDK has one conformance worker program with the same behaviours on the same
inputs (tests/conformance/python_worker.py, sdks/typescript/conformance/worker.ts,
built by ``make ts-sdk``), configured by the environment a stack's ``.state/stack.env``
would give it. A worker says on stdout when a handler starts (``started <task>
<attempt>``) and when one is stopped unfinished (``aborted …``); its stderr (the SDK's
log) is kept for the test's assertions and shown when a test fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import composer_repo as repo
from tests.integration import conftest as integration
from tests.integration.e2e.conftest import TOKEN, Stack, open_stack
from tests.integration.redis_cluster import LocalCluster
from tests.integration.tls import conftest as tls

# the integration suite's fixtures for PostgreSQL (a migrated scratch database per
# module) and Redis, used by name
pg_admin_url = integration.pg_admin_url
pg_template = integration.pg_template
database_url = integration.database_url
redis_url = integration.redis_url
redis_cluster = integration.redis_cluster
#: A throw-away CA and a server certificate it signed for 127.0.0.1 (the TLS tests').
certs = tls.certs

ROOT = Path(__file__).resolve().parents[2]
PYTHON_WORKER = Path(__file__).with_name("python_worker.py")
TS_WORKER = ROOT / "sdks" / "typescript" / "dist" / "conformance" / "worker.js"
SDKS = ("python", "typescript")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)


@dataclass
class WorkerProcess:
    """One conformance worker process: its stdout lines as they come, its stderr at the end."""

    sdk: str
    proc: asyncio.subprocess.Process
    stderr_path: Path
    lines: list[str] = field(default_factory=list)
    reader: asyncio.Task[None] | None = None

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        async for raw in self.proc.stdout:
            self.lines.append(raw.decode(errors="replace").rstrip("\n"))

    async def line(self, prefix: str, timeout: float = 30.0) -> str:
        """The first stdout line that starts with ``prefix`` (waits for it)."""
        deadline = time.monotonic() + timeout
        while True:
            for line in self.lines:
                if line.startswith(prefix):
                    return line
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"the {self.sdk} worker said no {prefix!r} within {timeout}s; "
                    f"stdout {self.lines}, stderr:\n{self.stderr()[-3000:]}"
                )
            if self.proc.returncode is not None:
                raise AssertionError(
                    f"the {self.sdk} worker exited ({self.proc.returncode}) before saying "
                    f"{prefix!r}; stderr:\n{self.stderr()[-3000:]}"
                )
            await asyncio.sleep(0.02)

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""

    def signal(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(sig)

    async def exited(self, timeout: float = 30.0) -> int:
        try:
            return await asyncio.wait_for(self.proc.wait(), timeout)
        except TimeoutError:
            raise AssertionError(
                f"the {self.sdk} worker did not exit within {timeout}s; stderr:\n"
                f"{self.stderr()[-3000:]}"
            ) from None


@dataclass
class Conformance:
    """A stack, and worker processes of the SDK under test for it."""

    sdk: str
    stack: Stack
    tmp: Path
    workers: list[WorkerProcess] = field(default_factory=list)

    async def worker(
        self,
        queue: str,
        *,
        token: str = TOKEN,
        coordinator: str | None = None,
        lease_ttl: float = 2.0,
        drain_seconds: float = 10.0,
        tls_ca: Path | None = None,
        redis_prefix: str | None = None,
        redis_cluster: bool | None = None,
        coordinators: str = "",
        take_next: bool | None = None,
    ) -> WorkerProcess:
        """Start a worker process of this SDK serving ``queue``, configured as a stack's
        stack.env would configure it (COMPOSER_GRPC_ADDR, COMPOSER_REDIS_URL, ...);
        ``take_next`` sets COMPOSER_WORKER_TAKE_NEXT (None: unset, the SDK's default)."""
        s = self.stack
        env = {k: v for k, v in os.environ.items() if not k.startswith("COMPOSER_")} | {
            "COMPOSER_GRPC_ADDR": coordinator or s.grpc_target,
            "COMPOSER_REDIS_URL": s.redis_url,
            "COMPOSER_REDIS_PREFIX": redis_prefix or s.prefix,
            "COMPOSER_WORKER_TOKEN": token,
            "CONFORMANCE_QUEUE": queue,
            "CONFORMANCE_LEASE_TTL": str(lease_ttl),
            "CONFORMANCE_DRAIN_SECONDS": str(drain_seconds),
            "PYTHONUNBUFFERED": "1",
        }
        if tls_ca is not None:
            env["COMPOSER_GRPC_TLS_CA"] = str(tls_ca)
        if coordinators:
            env["COMPOSER_COORDINATORS"] = coordinators
        if take_next is not None:
            env["COMPOSER_WORKER_TAKE_NEXT"] = "true" if take_next else "false"
        if redis_cluster if redis_cluster is not None else s.redis_cluster:
            env["COMPOSER_REDIS_CLUSTER"] = "true"
        if self.sdk == "python":
            command = [sys.executable, str(PYTHON_WORKER)]
        else:
            assert TS_WORKER.exists(), f"{TS_WORKER} is not built: run make ts-sdk"
            command = ["node", str(TS_WORKER)]
        stderr_path = self.tmp / f"worker-{len(self.workers)}.stderr"
        with stderr_path.open("wb") as stderr:
            proc = await asyncio.create_subprocess_exec(
                *command, env=env, stdout=asyncio.subprocess.PIPE, stderr=stderr
            )
        worker = WorkerProcess(self.sdk, proc, stderr_path)
        worker.reader = asyncio.create_task(worker._read())
        self.workers.append(worker)
        return worker

    async def deploy_task(
        self,
        spec: dict[str, Any],
        *,
        queue: str,
        max_attempts: int = 3,
        timeout: float = 60,
        priority: str | None = None,
    ) -> str:
        """Deploy a one-node workflow (a TASK on ``queue`` whose input is ``spec``, its
        runs' ``priority`` given when not None); its id."""
        workflow_id = f"conf-{uuid.uuid4().hex[:8]}"
        await self.stack.deploy(
            {
                "id": workflow_id,
                **({} if priority is None else {"priority": priority}),
                "nodes": [
                    {
                        "id": "work",
                        "type": "TASK",
                        "queue": queue,
                        "spec": spec,
                        "timeout_seconds": timeout,
                        "retry": {"max_attempts": max_attempts, "initial_seconds": 0.1},
                    }
                ],
            }
        )
        return workflow_id

    async def task(self, run_id: str) -> repo.TaskRecord:
        return (await self.stack.tasks_of(run_id))["work"]

    async def logs(self, run_id: str) -> list[repo.TaskLogRecord]:
        async with repo.transaction(self.stack.pool) as conn:
            return await repo.get_task_logs(conn, run_id)

    async def worker_rows(self) -> list[repo.WorkerRecord]:
        async with repo.transaction(self.stack.pool) as conn:
            return await repo.list_workers(conn)


@pytest.fixture(params=SDKS)
def sdk(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def conformance(
    sdk: str, database_url: str, redis_url: str, tmp_path: Path
) -> AsyncIterator[Conformance]:
    """The stack with the lease-sweeper on, and this SDK's workers, killed at the end."""
    async with (
        open_stack(database_url, redis_url, sweeper=True) as stack,
        _workers_killed(Conformance(sdk, stack, tmp_path)) as c,
    ):
        yield c


@pytest.fixture
async def cluster_conformance(
    sdk: str, database_url: str, redis_cluster: LocalCluster, tmp_path: Path
) -> AsyncIterator[Conformance]:
    """The same on the session's Redis Cluster (COMPOSER_REDIS_CLUSTER=true)."""
    async with (
        open_stack(database_url, redis_cluster.url, sweeper=True, cluster=True) as stack,
        _workers_killed(Conformance(sdk, stack, tmp_path)) as c,
    ):
        yield c


@contextlib.asynccontextmanager
async def _workers_killed(c: Conformance) -> AsyncIterator[Conformance]:
    try:
        yield c
    finally:
        for w in c.workers:
            if w.proc.returncode is None:
                w.signal(signal.SIGKILL)
            await w.proc.wait()
            if w.reader is not None:
                await w.reader
