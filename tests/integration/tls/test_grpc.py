"""gRPC over TLS between the workers and the coordinator (issue 15, item 6): the
coordinator serves TLS with COMPOSER_GRPC_TLS_CERT and COMPOSER_GRPC_TLS_KEY, and the
SDK dials with TLS when given the CA to check it against (COMPOSER_GRPC_TLS_CA,
``WorkerConfig.coordinator_tls_ca``). A plaintext client, or one trusting another CA,
gets nothing from it."""

from __future__ import annotations

import asyncio
import secrets
import signal
import socket
import sys
from collections.abc import AsyncIterator

import pytest

from composer_sdk import SdkError
from composer_sdk._client import CoordinatorClient
from tests.integration.e2e.test_services import service_env, wait_for_line
from tests.integration.tls.conftest import Certs

TOKEN = secrets.token_urlsafe(32)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def tls_coordinator(database_url: str, redis_url: str, certs: Certs) -> AsyncIterator[int]:
    """The coordinator as a process, serving TLS; yields its port."""
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
            COMPOSER_GRPC_TLS_CERT=str(certs.cert),
            COMPOSER_GRPC_TLS_KEY=str(certs.key),
            COMPOSER_LOG_FORMAT="human",
        ),
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        seen = await wait_for_line(proc, "serving the worker protocol")
        assert "TLS" in seen
        yield port
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, stderr.decode()


async def renew(client: CoordinatorClient) -> bool | None:
    """A renewal of a lease nobody holds: False when the coordinator answered, None when
    no answer came (the SDK's "try again later")."""
    try:
        return await client.renew("task", "0190b2a0-0000-7000-8000-000000000000", 0, "o", 5, "x")
    finally:
        await client.close()


async def test_a_client_with_the_ca_is_served_over_tls(tls_coordinator: int, certs: Certs) -> None:
    client = CoordinatorClient(
        f"localhost:{tls_coordinator}", TOKEN, tls_ca_file=str(certs.ca), call_timeout=5
    )
    assert await renew(client) is False  # an answer: no such lease


async def test_a_plaintext_client_or_one_trusting_another_ca_gets_no_answer(
    tls_coordinator: int, certs: Certs
) -> None:
    plain = CoordinatorClient(f"localhost:{tls_coordinator}", TOKEN, call_timeout=2)
    assert await renew(plain) is None
    wrong = CoordinatorClient(
        f"localhost:{tls_coordinator}", TOKEN, tls_ca_file=str(certs.other_ca), call_timeout=2
    )
    assert await renew(wrong) is None


def test_an_unreadable_ca_file_names_the_setting(tmp_path: object) -> None:
    with pytest.raises(SdkError, match="COMPOSER_GRPC_TLS_CA"):
        CoordinatorClient("localhost:1", TOKEN, tls_ca_file="/nonexistent/ca.crt")


async def test_the_coordinator_refuses_half_a_tls_setting(
    database_url: str, redis_url: str, certs: Certs
) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "composer_coordinator",
        env=service_env(
            database_url,
            redis_url,
            COMPOSER_WORKER_TOKEN=TOKEN,
            COMPOSER_GRPC_ADDR=f"127.0.0.1:{free_port()}",
            COMPOSER_GRPC_TLS_CERT=str(certs.cert),
        ),
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2, stderr.decode()
    assert "COMPOSER_GRPC_TLS_KEY" in stderr.decode()


async def test_the_workers_service_dials_with_the_ca_it_is_given(
    database_url: str, redis_url: str
) -> None:
    """COMPOSER_GRPC_TLS_CA reaches the SDK: a CA file that is not there stops the workers
    at start, naming the setting."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "composer_workers",
        env=service_env(
            database_url,
            redis_url,
            COMPOSER_WORKER_TOKEN=TOKEN,
            COMPOSER_GRPC_ADDR=f"localhost:{free_port()}",
            COMPOSER_GRPC_TLS_CA="/nonexistent/ca.crt",
        ),
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2, stderr.decode()
    assert "COMPOSER_GRPC_TLS_CA" in stderr.decode()
