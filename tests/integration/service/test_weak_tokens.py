"""The api-gateway and the coordinator, started as processes, refuse well-known, placeholder
and guessable tokens unless COMPOSER_DEV_MODE says this is a development machine (issue 15,
item 6): docker-compose shipped ``dev-token:admin`` on 0.0.0.0, and the Kubernetes
Secret's CHANGE-ME placeholders were accepted as real tokens; 32 times ``a`` passed a length
rule (issue 25). And a coordinator given scoped worker tokens holds no token for every
queue unless that list says so (issue 25: a left-over COMPOSER_WORKER_TOKEN leased a
``payments`` task)."""

from __future__ import annotations

import asyncio
import secrets
import signal
import socket
import sys

import pytest

from tests.integration.e2e.test_services import service_env, wait_for_line

HINT = "secrets.token_urlsafe(32)"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def refused(module: str, env: dict[str, str]) -> str:
    """Start ``module``; it must exit 2 on its own. Returns its stderr."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", module, env=env, stderr=asyncio.subprocess.PIPE
    )
    try:
        _, stderr = await asyncio.wait_for(proc.communicate(), 30)
    except TimeoutError:
        proc.kill()
        _, stderr = await proc.communicate()
        raise AssertionError(f"{module} started with a weak token: {stderr.decode()}") from None
    assert proc.returncode == 2, stderr.decode()
    return stderr.decode()


@pytest.mark.parametrize(
    "tokens",
    ["dev-token:admin", "CHANGE-ME-admin-token:admin", "a-reasonable-looking-token:viewer"],
)
async def test_gateway_refuses_a_weak_api_token(
    tokens: str, database_url: str, redis_url: str
) -> None:
    stderr = await refused(
        "composer_api_gateway",
        service_env(
            database_url,
            redis_url,
            COMPOSER_API_TOKENS=tokens,
            COMPOSER_API_PORT=str(free_port()),
        ),
    )
    assert "COMPOSER_API_TOKENS" in stderr and HINT in stderr
    secret = tokens.rpartition(":")[0]
    if not secret.startswith(("dev-", "CHANGE-ME")):  # public anyway; a real secret is never shown
        assert secret not in stderr


@pytest.mark.parametrize(
    ("variable", "token"),
    [
        ("COMPOSER_WORKER_TOKEN", "CHANGE-ME-worker-token"),
        ("COMPOSER_WORKER_TOKEN", "dev-worker-token"),
        ("COMPOSER_BUILTIN_WORKER_TOKEN", "dev-builtin-worker-token"),
        ("COMPOSER_WORKER_TOKENS", "team-a-token:payments"),
        ("COMPOSER_WORKER_TOKEN", "a" * 32),
        ("COMPOSER_BUILTIN_WORKER_TOKEN", "ab" * 24),
    ],
)
async def test_coordinator_refuses_a_weak_worker_token(
    variable: str, token: str, database_url: str, redis_url: str
) -> None:
    stderr = await refused(
        "composer_coordinator",
        service_env(
            database_url,
            redis_url,
            COMPOSER_GRPC_ADDR=f"127.0.0.1:{free_port()}",
            **{variable: token},
        ),
    )
    assert variable in stderr and HINT in stderr


async def test_dev_mode_lets_the_gateway_start_with_the_dev_token(
    database_url: str, redis_url: str
) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "composer_api_gateway",
        env=service_env(
            database_url,
            redis_url,
            COMPOSER_API_TOKENS="dev-token:admin",
            COMPOSER_API_PORT=str(free_port()),
            COMPOSER_DEV_MODE="true",
            COMPOSER_LOG_FORMAT="human",
        ),
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        seen = await wait_for_line(proc, "serving the REST API")
        assert "COMPOSER_DEV_MODE" in seen  # it warns that it took a weak token
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0


async def test_coordinator_refuses_a_token_for_every_queue_beside_scoped_ones(
    database_url: str, redis_url: str
) -> None:
    every_queue, team = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    stderr = await refused(
        "composer_coordinator",
        service_env(
            database_url,
            redis_url,
            COMPOSER_GRPC_ADDR=f"127.0.0.1:{free_port()}",
            COMPOSER_WORKER_TOKEN=every_queue,
            COMPOSER_WORKER_TOKENS=f"{team}:payments",
        ),
    )
    assert "COMPOSER_WORKER_TOKEN (a token for every queue) is set beside" in stderr
    assert "<token>:*" in stderr  # the explicit way, if a worker must serve every queue
    assert every_queue not in stderr and team not in stderr
