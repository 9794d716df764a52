"""The dev stack (`make run`) as a user starts it: ``python -m composer_devstack`` as a
subprocess, on ports, a database and a Redis prefix of its own, its output collected.

``start_stack`` starts one; the ``running_stack`` fixture one that every test stops
(SIGTERM, then SIGKILL) if it is still running.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import socket
import sys
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
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
#: The API, gRPC and an admin port per service (composer_devstack._stack.PORTS_PER_STACK).
PORTS_PER_STACK = 2 + len(SERVICES)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_free(port: int) -> bool:
    """Whether a server could listen on ``port`` now (SO_REUSEADDR, as the services bind)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _ephemeral_ports() -> range:
    """The ports the kernel hands to outgoing connections (Linux; elsewhere its default)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    except (OSError, ValueError):
        return range(32768, 61000)
    return range(int(low), int(high) + 1)


def free_range(size: int) -> int:
    """A base port with ``size`` free ports from it, above the ephemeral ports when
    there is room: a port there may be taken by any process's outgoing connection (the
    first stack's, to PostgreSQL and Redis) between this check and the service's bind,
    so a stack's service would never come up."""
    ephemeral = _ephemeral_ports()
    low = ephemeral.stop if ephemeral.stop + size <= 65000 else 20000
    for _ in range(200):
        base = random.randrange(low, 65000 - size)
        if all(port_free(p) for p in range(base, base + size)):
            return base
    raise RuntimeError(f"no {size} free ports in a row from {low} to 65000")


@dataclass
class Stack:
    process: asyncio.subprocess.Process
    api: str
    admin_ports: list[int]
    output: list[str]
    state: Path
    pump: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def text(self) -> str:
        return "\n".join(self.output)

    async def stop(self) -> None:
        """SIGTERM (SIGKILL after 30 s) if it still runs; then the rest of its output."""
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.process.wait(), 30)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()
        if self.pump is not None:
            await self.pump


async def _collect(process: asyncio.subprocess.Process, lines: list[str]) -> None:
    assert process.stdout is not None
    while line := await process.stdout.readline():
        lines.append(line.decode(errors="replace").rstrip())


def stack_environ(database_url: str, redis_url: str, **extra: str) -> dict[str, str]:
    """This process's environment without its COMPOSER_* variables, plus the stack's."""
    return {k: v for k, v in os.environ.items() if not k.startswith("COMPOSER_")} | {
        "COMPOSER_DATABASE_URL": database_url,
        "COMPOSER_REDIS_URL": redis_url,
        "COMPOSER_LOG_FORMAT": "human",
        **extra,
    }


async def start_stack(
    env: Mapping[str, str], state: Path, api_port: int, admin_ports: list[int], *args: str
) -> Stack:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "composer_devstack",
        "--grace",
        "10",
        "--state",
        str(state),
        *args,
        env=dict(env),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    lines: list[str] = []
    stack = Stack(process, f"http://127.0.0.1:{api_port}", admin_ports, lines, state)
    stack.pump = asyncio.create_task(_collect(process, lines))
    return stack


@pytest.fixture
async def running_stack(database_url: str, redis_url: str, tmp_path: Path) -> AsyncIterator[Stack]:
    """A stack on explicit ports (COMPOSER_API_PORT, COMPOSER_GRPC_ADDR, --admin-base)."""
    api_port, admin_base = free_port(), free_range(len(SERVICES))
    env = stack_environ(
        database_url,
        redis_url,
        COMPOSER_REDIS_PREFIX=f"stack-{uuid.uuid4().hex[:8]}",
        COMPOSER_API_PORT=str(api_port),
        COMPOSER_GRPC_ADDR=f"127.0.0.1:{free_port()}",
    )
    admin_ports = list(range(admin_base, admin_base + len(SERVICES)))
    stack = await start_stack(env, tmp_path, api_port, admin_ports, "--admin-base", str(admin_base))
    try:
        yield stack
    finally:
        await stack.stop()


async def ready(
    session: aiohttp.ClientSession, url: str, timeout: float = 60, stack: Stack | None = None
) -> None:
    """Until ``url`` answers 200; the error ends with ``stack``'s output, if given."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(aiohttp.ClientError):
            async with session.get(url) as response:
                if response.status == 200:
                    return
        if time.monotonic() > deadline:
            said = "" if stack is None else f"; the stack said:\n{stack.text[-3000:]}"
            raise AssertionError(f"{url} not ready after {timeout}s{said}")
        await asyncio.sleep(0.2)


def saved_tokens(state: Path) -> dict[str, str]:
    """The tokens the stack made on its first start, as `make demo` reads them."""
    return dict(
        line.split("=", 1)
        for line in (state / "tokens.env").read_text().splitlines()
        if line and not line.startswith("#")
    )
