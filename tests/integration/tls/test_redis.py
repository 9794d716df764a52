"""Redis AUTH over TLS (issue 15, item 6): a ``rediss://:password@host:port/db`` URL,
with ``?ssl_ca_certs=<file>`` for a private CA, is all a service needs; the URL goes
through composer_queue.connect unchanged. Tested against a redis-server of the test's
own that speaks TLS only and requires a password."""

from __future__ import annotations

import asyncio
import secrets
import shutil
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import composer_queue
from tests.integration.tls.conftest import Certs

PASSWORD = secrets.token_urlsafe(24)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def answers(url: str) -> bool:
    client = composer_queue.connect(url, connect_timeout=2)
    try:
        await client.ping()
    except composer_queue.QueueError:
        return False
    finally:
        await client.close()
    return True


@pytest.fixture
async def tls_redis(certs: Certs, tmp_path: Path) -> AsyncIterator[int]:
    """A redis-server on a free port, TLS only, password required; yields the port."""
    server = shutil.which("redis-server")
    assert server, "the Redis TLS test needs redis-server"
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        server,
        "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
        "--tls-cert-file", str(certs.cert), "--tls-key-file", str(certs.key),
        "--tls-ca-cert-file", str(certs.ca), "--tls-auth-clients", "no",
        "--requirepass", PASSWORD, "--save", "", "--appendonly", "no", "--dir", str(tmp_path),
        stdout=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    url = f"rediss://:{PASSWORD}@localhost:{port}/0?ssl_ca_certs={certs.ca}"
    deadline = time.monotonic() + 20
    try:
        while not await answers(url):
            assert proc.returncode is None, "redis-server exited: does it have TLS built in?"
            assert time.monotonic() < deadline, "the TLS redis-server did not answer in 20s"
            await asyncio.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        await proc.wait()


async def test_rediss_with_password_and_ca_works(tls_redis: int, certs: Certs) -> None:
    client = composer_queue.connect(
        f"rediss://:{PASSWORD}@localhost:{tls_redis}/0?ssl_ca_certs={certs.ca}"
    )
    try:
        await client.publish([("tls-test:q", {"k": "v"})])
        await client.drop("tls-test")
    finally:
        await client.close()


async def test_without_tls_the_password_or_the_ca_nothing_answers(
    tls_redis: int, certs: Certs
) -> None:
    assert not await answers(f"redis://:{PASSWORD}@localhost:{tls_redis}/0")
    assert not await answers(f"rediss://localhost:{tls_redis}/0?ssl_ca_certs={certs.ca}")
    assert not await answers(
        f"rediss://:{PASSWORD}@localhost:{tls_redis}/0?ssl_ca_certs={certs.other_ca}"
    )
