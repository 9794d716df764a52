"""Issue 17, item 2, for the two servers with a port of their own: the api-gateway and
the coordinator, started as processes where another holds their port, exit 3 with one
line naming the setting. The coordinator's rival is another gRPC server, as a second
`make run`'s would be: gRPC's SO_REUSEPORT let the two share the port silently."""

from __future__ import annotations

import asyncio
import secrets
import socket
import sys
import uuid
from collections.abc import AsyncIterator

import grpc.aio
import pytest

from tests.integration.e2e.test_services import service_env


async def port_in_use(module: str, env: dict[str, str]) -> str:
    """Start ``module``; it must exit 3 on its own. Returns its stderr."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", module, env=env, stderr=asyncio.subprocess.PIPE
    )
    try:
        _, stderr = await asyncio.wait_for(proc.communicate(), 60)
    except TimeoutError:
        proc.kill()
        _, stderr = await proc.communicate()
        raise AssertionError(f"{module} started on a taken port: {stderr.decode()}") from None
    assert proc.returncode == 3, stderr.decode()
    assert "Traceback" not in stderr.decode()
    return stderr.decode()


@pytest.fixture
async def rival_grpc_port() -> AsyncIterator[int]:
    """A port a gRPC server (with gRPC's default options) listens on."""
    server = grpc.aio.server()
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield port
    finally:
        await server.stop(None)


async def test_the_coordinator_on_a_taken_grpc_port(
    rival_grpc_port: int, database_url: str, redis_url: str
) -> None:
    stderr = await port_in_use(
        "composer_coordinator",
        service_env(
            database_url,
            redis_url,
            COMPOSER_REDIS_PREFIX=f"clash-{uuid.uuid4().hex[:8]}",
            COMPOSER_GRPC_ADDR=f"127.0.0.1:{rival_grpc_port}",
            COMPOSER_WORKER_TOKEN=secrets.token_urlsafe(32),
            COMPOSER_BUILTIN_WORKER_TOKEN=secrets.token_urlsafe(32),
        ),
    )
    assert (
        f"coordinator cannot start: port {rival_grpc_port} (COMPOSER_GRPC_ADDR) is in use by "
        "another process: stop it or set COMPOSER_GRPC_ADDR"
    ) in stderr


async def test_the_gateway_on_a_taken_api_port(database_url: str, redis_url: str) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = int(squatter.getsockname()[1])
        stderr = await port_in_use(
            "composer_api_gateway",
            service_env(
                database_url,
                redis_url,
                COMPOSER_API_PORT=str(port),
                COMPOSER_API_TOKENS=f"{secrets.token_urlsafe(32)}:admin",
            ),
        )
    assert (
        f"api-gateway cannot start: port {port} (COMPOSER_API_PORT) is in use by "
        "another process: stop it or set COMPOSER_API_PORT"
    ) in stderr
