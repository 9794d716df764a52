"""The services as processes: they refuse an outdated database, serve, and stop cleanly on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import signal
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc.aio
import pytest

from composer_rpc.v1 import worker_pb2 as pb
from composer_rpc.v1.worker_pb2_grpc import WorkerServiceStub
from tests.integration.databases import scratch_database

#: Random, as the services demand outside COMPOSER_DEV_MODE (composer_service.tokens).
TOKEN = secrets.token_urlsafe(32)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def service_env(database_url: str, redis_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPOSER_")}
    return (
        env
        | {
            "COMPOSER_DATABASE_URL": database_url,
            "COMPOSER_REDIS_URL": redis_url,
            "COMPOSER_REDIS_PREFIX": "svc-test",
        }
        | extra
    )


@pytest.fixture
def empty_database(pg_admin_url: str) -> Iterator[str]:
    with scratch_database(pg_admin_url) as url:
        yield url


#: Every service that needs the database: each refuses one behind the schema, naming the fix.
DATABASE_SERVICES = [
    "composer_api_gateway",
    "composer_coordinator",
    "composer_lease_sweeper",
    "composer_outbox_enqueuer",
    "composer_partition_manager",
    "composer_timer",
]


@pytest.mark.parametrize("module", DATABASE_SERVICES)
async def test_service_refuses_a_database_that_is_not_migrated(
    module: str, empty_database: str, redis_url: str
) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        module,
        env=service_env(
            empty_database,
            redis_url,
            COMPOSER_WORKER_TOKEN=TOKEN,
            COMPOSER_API_TOKENS=f"{TOKEN}:admin",
        ),
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2, stderr.decode()
    assert "make migrate" in stderr.decode()


async def test_coordinator_serves_and_drains_on_sigterm(database_url: str, redis_url: str) -> None:
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "composer_coordinator",
        env=service_env(
            database_url,
            redis_url,
            COMPOSER_WORKER_TOKEN=TOKEN,
            COMPOSER_GRPC_ADDR=f"127.0.0.1:{port}",
        ),
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            await asyncio.wait_for(channel.channel_ready(), 20)
            reply = await WorkerServiceStub(channel).ReportTaskResult(
                pb.ReportTaskResultRequest(
                    task_id="t",
                    run_id="0190b2a0-0000-7000-8000-000000000000",
                    node_id="n",
                    attempt=0,
                    owner="o",
                    lease_token="no-such-lease",
                    status=pb.TASK_STATUS_COMPLETED,
                    output_json="{}",
                ),
                metadata=(("authorization", f"Bearer {TOKEN}"),),
            )
            assert not reply.accepted  # no such run: acknowledged, nothing changed
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, stderr.decode()
    assert "draining" in stderr.decode()


async def wait_for_line(proc: asyncio.subprocess.Process, marker: str, timeout: float = 20) -> str:
    """Read the process's stderr until a line contains ``marker``; returns what was read."""
    assert proc.stderr is not None
    seen = ""
    async with asyncio.timeout(timeout):
        while marker not in seen:
            line = await proc.stderr.readline()
            if not line:
                raise AssertionError(f"process ended before logging {marker!r}: {seen}")
            seen += line.decode()
    return seen


async def test_workers_and_enqueuer_stop_cleanly_on_sigterm(
    database_url: str, redis_url: str
) -> None:
    env = service_env(
        database_url,
        redis_url,
        COMPOSER_WORKER_TOKEN=TOKEN,
        COMPOSER_GRPC_ADDR=f"127.0.0.1:{free_port()}",
    )
    started = {
        "composer_workers": "serving http, python",
        "composer_outbox_enqueuer": "publishing the outbox",
    }
    procs = {
        module: await asyncio.create_subprocess_exec(
            sys.executable, "-m", module, env=env, stderr=asyncio.subprocess.PIPE
        )
        for module in started
    }
    for module, proc in procs.items():
        await wait_for_line(proc, started[module])
        proc.send_signal(signal.SIGTERM)
    for proc in procs.values():
        _, stderr = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0, stderr.decode()


def _workers_env(database_url: str, redis_url: str, **extra: str) -> dict[str, str]:
    return service_env(
        database_url,
        redis_url,
        COMPOSER_WORKER_TOKEN=TOKEN,
        COMPOSER_GRPC_ADDR=f"127.0.0.1:{free_port()}",
        COMPOSER_LOG_FORMAT="human",
        **extra,
    )


async def _workers_start(env: dict[str, str]) -> str:
    """Start the workers service, read its log until it serves, stop it; its log."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "composer_workers", env=env, stderr=asyncio.subprocess.PIPE
    )
    try:
        seen = await wait_for_line(proc, "serving http, python", timeout=60)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, rest = await asyncio.wait_for(proc.communicate(), 30)
    return seen + rest.decode()


async def test_workers_refuse_python_nodes_where_the_sandbox_cannot_work(
    database_url: str, redis_url: str, tmp_path: Path
) -> None:
    # A kernel (or a container's seccomp profile) that refuses namespaces, as bwrap says it.
    fake = tmp_path / "bin" / "bwrap"
    fake.parent.mkdir()
    fake.write_text(
        "#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n"
    )
    fake.chmod(0o755)
    (tmp_path / "bin" / "slirp4netns").symlink_to(shutil.which("slirp4netns") or "/bin/false")
    env = _workers_env(database_url, redis_url)
    env["PATH"] = f"{fake.parent}:{env.get('PATH', '')}"
    log = await _workers_start(env)
    assert "ALERT" in log
    assert "refuses PYTHON nodes" in log
    assert "No permissions to creating new namespace" in log
    assert "COMPOSER_PYTHON_SANDBOX=off" in log  # the way out, named


async def test_workers_with_the_sandbox_off_say_so_loudly(
    database_url: str, redis_url: str
) -> None:
    log = await _workers_start(_workers_env(database_url, redis_url, COMPOSER_PYTHON_SANDBOX="off"))
    alerts = [line for line in log.splitlines() if "ALERT" in line]
    assert any("PYTHON nodes run unsandboxed" in line for line in alerts), log


async def test_workers_with_a_working_sandbox_say_how_nodes_run(
    database_url: str, redis_url: str
) -> None:
    log = await _workers_start(_workers_env(database_url, redis_url))
    assert "PYTHON nodes run sandboxed by" in log
    assert "ALERT" not in log
