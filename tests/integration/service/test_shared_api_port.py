"""COMPOSER_API_SHARE_PORT: two api-gateway processes serve one API port, the kernel
spreading connections between them, and when one stops the other goes on answering
(a gateway is one process's CPU: a host that must start more runs than one can
runs two; docs/architecture.md §10)."""

from __future__ import annotations

import asyncio
import secrets
import signal
import sys
from collections.abc import AsyncIterator

import aiohttp
import pytest

from tests.integration.e2e.test_services import free_port, service_env, wait_for_line

TOKEN = secrets.token_urlsafe(32)


async def healthz_count(http: aiohttp.ClientSession, admin_port: int) -> float:
    """The /healthz answers a gateway counted (its admin port's /metrics)."""
    async with http.get(f"http://127.0.0.1:{admin_port}/metrics") as r:
        text = await r.text()
    return sum(
        float(line.rpartition(" ")[2])
        for line in text.splitlines()
        if line.startswith("composer_api_requests_total{") and '"/healthz"' in line
    )


@pytest.fixture
async def two_gateways(
    database_url: str, redis_url: str
) -> AsyncIterator[tuple[int, list[tuple[asyncio.subprocess.Process, int]]]]:
    """Two gateways sharing one API port: (the port, [(process, admin port)…])."""
    port = free_port()
    gateways = []
    try:
        for _ in range(2):
            admin = free_port()
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "composer_api_gateway",
                env=service_env(
                    database_url,
                    redis_url,
                    COMPOSER_API_PORT=str(port),
                    COMPOSER_API_SHARE_PORT="true",
                    COMPOSER_ADMIN_PORT=str(admin),
                    COMPOSER_API_TOKENS=f"{TOKEN}:admin",
                ),
                stderr=asyncio.subprocess.PIPE,
            )
            gateways.append((proc, admin))
            await wait_for_line(proc, "serving the REST API", timeout=60)
        yield port, gateways
    finally:
        for proc, _ in gateways:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
        for proc, _ in gateways:
            await asyncio.wait_for(proc.communicate(), 30)


async def test_two_gateways_share_the_api_port_and_one_outlives_the_other(
    two_gateways: tuple[int, list[tuple[asyncio.subprocess.Process, int]]],
) -> None:
    port, gateways = two_gateways
    # a connection each: the kernel hashes each new one to one of the two listeners
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http:
        for _ in range(40):
            async with http.get(f"http://127.0.0.1:{port}/healthz") as r:
                assert r.status == 200
        counts = [await healthz_count(http, admin) for _, admin in gateways]
        assert sum(counts) == 40
        assert all(count > 0 for count in counts), f"one gateway answered all 40: {counts}"

        first, _ = gateways[0]
        first.send_signal(signal.SIGTERM)
        await asyncio.wait_for(first.communicate(), 30)
        assert first.returncode == 0
        for _ in range(10):
            async with http.get(f"http://127.0.0.1:{port}/healthz") as r:
                assert r.status == 200
        assert await healthz_count(http, gateways[1][1]) == counts[1] + 10
