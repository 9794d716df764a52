"""`make run`'s supervisor as a user runs it: every service up on tokens it made itself
(kept in the state folder and printed), a workflow through the REST API to SUCCEEDED,
counters moved on /metrics, and a clean stop on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

SERVICES = (
    "coordinator",
    "outbox-enqueuer",
    "timer",
    "lease-sweeper",
    "partition-manager",
    "workers",
    "api-gateway",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_range(size: int) -> int:
    """A base port with ``size`` free ports after it."""
    for _ in range(50):
        base = free_port()
        if base + size > 65000:
            continue
        try:
            for p in range(base, base + size):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
        except OSError:
            continue
        return base
    raise RuntimeError("no free port range")


@dataclass
class Stack:
    process: asyncio.subprocess.Process
    api: str
    admin_base: int
    output: list[str]
    state: Path


async def _collect(process: asyncio.subprocess.Process, lines: list[str]) -> None:
    assert process.stdout is not None
    while line := await process.stdout.readline():
        lines.append(line.decode(errors="replace").rstrip())


@pytest.fixture
async def running_stack(database_url: str, redis_url: str, tmp_path: Path) -> AsyncIterator[Stack]:
    api_port, admin_base = free_port(), free_range(len(SERVICES))
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPOSER_")} | {
        "COMPOSER_DATABASE_URL": database_url,
        "COMPOSER_REDIS_URL": redis_url,
        "COMPOSER_REDIS_PREFIX": f"stack-{uuid.uuid4().hex[:8]}",
        "COMPOSER_API_PORT": str(api_port),
        "COMPOSER_GRPC_ADDR": f"127.0.0.1:{free_port()}",
        "COMPOSER_LOG_FORMAT": "human",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "composer_devstack",
        "--admin-base",
        str(admin_base),
        "--grace",
        "10",
        "--state",
        str(tmp_path),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    lines: list[str] = []
    pump = asyncio.create_task(_collect(process, lines))
    stack = Stack(process, f"http://127.0.0.1:{api_port}", admin_base, lines, tmp_path)
    try:
        yield stack
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), 30)
            except TimeoutError:
                process.kill()
                await process.wait()
        await pump


async def ready(session: aiohttp.ClientSession, url: str, timeout: float = 60) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            async with session.get(url) as response:
                if response.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{url} not ready after {timeout}s")
        await asyncio.sleep(0.2)


def saved_tokens(stack: Stack) -> dict[str, str]:
    """The tokens the stack made on its first start, as `make demo` reads them."""
    return dict(
        line.split("=", 1)
        for line in (stack.state / "tokens.env").read_text().splitlines()
        if line and not line.startswith("#")
    )


async def test_stack_runs_a_workflow_and_stops_cleanly(running_stack: Stack) -> None:
    stack = running_stack
    async with aiohttp.ClientSession() as session:
        await ready(session, f"{stack.api}/healthz")
        # the tokens it made on this first start, as `make demo` reads them
        token = saved_tokens(stack)["COMPOSER_API_TOKEN"]
        assert len(token) >= 32
        assert any(token in line for line in stack.output), "the banner does not show the token"
        auth = {"Authorization": f"Bearer {token}"}
        for i in range(len(SERVICES)):
            await ready(session, f"http://127.0.0.1:{stack.admin_base + i}/readyz")
        definition = {
            "id": "stack-smoke",
            "nodes": [
                {
                    "id": "double",
                    "type": "PYTHON",
                    "spec": {
                        "code": "def main(input):\n    return {'n': input['n'] * 2}\n",
                        "input": {"n": "{{input.n}}"},
                    },
                },
                {"id": "nap", "type": "WAIT", "spec": {"duration_seconds": 0.5}},
            ],
            "edges": [{"from": "double", "to": "nap"}],
            "output": {"n": "{{tasks.double.output.n}}"},
        }
        async with session.post(
            f"{stack.api}/v1/workflows?deploy=true", json=definition, headers=auth
        ) as r:
            assert r.status == 201, await r.text()
        async with session.post(
            f"{stack.api}/v1/runs",
            json={"workflow_id": "stack-smoke", "input": {"n": 21}},
            headers=auth,
        ) as r:
            assert r.status == 201, await r.text()
            run_id = (await r.json())["run_id"]
        async with session.get(
            f"{stack.api}/v1/runs/{run_id}/result?timeout=30", headers=auth
        ) as r:
            run = await r.json()
        assert run["status"] == "SUCCEEDED", run
        assert run["output"] == {"n": 42}
        coordinator_admin = (
            f"http://127.0.0.1:{stack.admin_base + SERVICES.index('coordinator')}/metrics"
        )
        async with session.get(coordinator_admin) as r:
            metrics = await r.text()
        completed = [
            line
            for line in metrics.splitlines()
            if line.startswith("composer_tasks_completed_total")
        ]
        assert completed and sum(float(line.rsplit(" ", 1)[1]) for line in completed) >= 1, metrics[
            :2000
        ]
        gateway_admin = (
            f"http://127.0.0.1:{stack.admin_base + SERVICES.index('api-gateway')}/metrics"
        )
        async with session.get(gateway_admin) as r:
            metrics = await r.text()
        # the gateway's request metrics are on its admin port with every other metric
        assert 'route="/v1/runs"' in metrics and "composer_api_requests_total" in metrics, metrics[
            :2000
        ]

    stack.process.send_signal(signal.SIGTERM)
    await asyncio.wait_for(stack.process.wait(), 30)
    assert stack.process.returncode == 0, "\n".join(stack.output[-40:])
    output = "\n".join(stack.output)
    assert "every service stopped" in output
    assert "did not stop" not in output  # none needed a SIGKILL
    for name in SERVICES:
        assert f"{name:<17} |" in output or f"{name} |" in output, f"no output from {name}"
