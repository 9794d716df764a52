"""`make run`'s credentials mean what they say (issue 25, items 4 and 7), as a user meets them.

What the attacker found on a default `make run`:
- the token for every queue kept in .state/tokens.env still leased tasks after the user
  scoped the workers with COMPOSER_WORKER_TOKENS;
- a PYTHON node spoke raw Redis with no password (the private Redis the stack starts
  when none answers);
- the SSRF guard was off, so an HTTP node read an admin port's /metrics;
- the admin ports answered any Host.
"""

from __future__ import annotations

import json
import re
import socket
import stat
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import grpc.aio
import pytest
import yaml

import composer_queue
from composer_devstack._embedded import start_private_redis
from composer_devstack._secrets import TOKENS_FILE, load_tokens
from composer_rpc.v1.worker_pb2_grpc import WorkerServiceStub
from tests.integration.devstack.conftest import (
    SERVICES,
    Stack,
    free_port,
    free_range,
    ready,
    saved_tokens,
    stack_environ,
    start_stack,
)
from tests.integration.e2e.test_presence import beat

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

#: A PYTHON node's raw Redis client: PING, no password, and what came back.
RAW_REDIS = """
import socket
def main(input):
    try:
        with socket.create_connection(("127.0.0.1", input["port"]), timeout=5) as s:
            s.sendall(b"PING\\r\\n")
            return {"reply": s.recv(200).decode(errors="replace")}
    except OSError as exc:
        return {"reply": f"no connection: {exc}"}
"""


def raw_ping(port: int) -> bytes:
    """PING on a fresh connection without a password, and the reply."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"PING\r\n")
        return s.recv(200)


def command_line(pid: int) -> bytes:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read()


async def test_the_private_redis_requires_its_password_kept_off_its_command_line(
    tmp_path: Path,
) -> None:
    redis = await start_private_redis(tmp_path)
    try:
        assert raw_ping(redis.port).startswith(b"-NOAUTH"), "a client without it is answered"
        client = composer_queue.connect(redis.url)
        try:
            await client.ping()  # the services' URL carries it
        finally:
            await client.close()
        assert redis.password_file == tmp_path / "redis" / "password"
        assert redis.password_file.read_text().strip() == redis.password
        assert stat.S_IMODE(redis.password_file.stat().st_mode) == 0o600
        # any local user reads a command line
        assert redis.password.encode() not in command_line(redis.process.pid)
        port, password = redis.port, redis.password
    finally:
        await redis.stop()
    again = await start_private_redis(tmp_path, port)  # a restart (the chaos suite's)
    try:
        assert again.password == password and again.url == redis.url
        assert raw_ping(again.port).startswith(b"-NOAUTH")
    finally:
        await again.stop()


@pytest.fixture
async def scoped_stack(database_url: str, tmp_path: Path) -> AsyncIterator[tuple[Stack, str, str]]:
    """A stack whose user scoped the workers (COMPOSER_WORKER_TOKENS) after a default first
    start left a token for every queue in tokens.env, on a machine where no Redis answers
    at COMPOSER_REDIS_URL (so the stack starts its private one). Yields the stack, the
    old token for every queue, and the team's token."""
    old = load_tokens(tmp_path)  # what a default `make run` wrote
    assert old.worker is not None
    team = f"team-{uuid.uuid4().hex}{uuid.uuid4().hex}"
    api_port, admin_base = free_port(), free_range(len(SERVICES))
    env = stack_environ(
        database_url,
        f"redis://127.0.0.1:{free_port()}/0",  # nothing listens there
        COMPOSER_REDIS_PREFIX=f"creds-{uuid.uuid4().hex[:8]}",
        COMPOSER_API_PORT=str(api_port),
        COMPOSER_GRPC_ADDR=f"127.0.0.1:{free_port()}",
        COMPOSER_WORKER_TOKENS=f"{team}:payments",
    )
    admin_ports = list(range(admin_base, admin_base + len(SERVICES)))
    stack = await start_stack(env, tmp_path, api_port, admin_ports, "--admin-base", str(admin_base))
    try:
        yield stack, old.worker, team
    finally:
        await stack.stop()


async def deploy_and_run(
    session: aiohttp.ClientSession,
    stack: Stack,
    definition: dict[str, Any],
    run_input: dict[str, Any],
) -> dict[str, Any]:
    auth = {"Authorization": f"Bearer {saved_tokens(stack.state)['COMPOSER_API_TOKEN']}"}
    async with session.post(
        f"{stack.api}/v1/workflows?deploy=true", json=definition, headers=auth
    ) as r:
        assert r.status in {200, 201}, await r.text()
    async with session.post(
        f"{stack.api}/v1/runs",
        json={"workflow_id": definition["id"], "input": run_input},
        headers=auth,
    ) as r:
        assert r.status == 201, await r.text()
        run_id = (await r.json())["run_id"]
    async with session.get(f"{stack.api}/v1/runs/{run_id}/result?timeout=60", headers=auth) as r:
        assert r.status == 200, await r.text()
    async with session.get(f"{stack.api}/v1/runs/{run_id}", headers=auth) as r:
        run: dict[str, Any] = await r.json()
    return run


async def test_make_run_scopes_its_tokens_guards_http_nodes_and_locks_its_redis(
    scoped_stack: tuple[Stack, str, str],
) -> None:
    stack, old_every_queue, team = scoped_stack
    async with aiohttp.ClientSession() as session:
        for port in stack.admin_ports:
            await ready(session, f"http://127.0.0.1:{port}/readyz", timeout=90)

        # no token for every queue is kept, and the coordinator takes none
        assert "COMPOSER_WORKER_TOKEN" not in saved_tokens(stack.state)
        assert old_every_queue not in (stack.state / TOKENS_FILE).read_text()
        grpc_addr = re.search(r"COMPOSER_GRPC_ADDR=(\S+)", (stack.state / "stack.env").read_text())
        assert grpc_addr is not None
        async with grpc.aio.insecure_channel(grpc_addr.group(1)) as channel:
            stub = WorkerServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.Heartbeat(
                    beat("old-fleet", "payments"),
                    metadata=(("authorization", f"Bearer {old_every_queue}"),),
                )
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
            answer = await stub.Heartbeat(
                beat(f"team-{uuid.uuid4().hex[:6]}", "payments"),
                metadata=(("authorization", f"Bearer {team}"),),
            )
            assert answer.recorded  # the team's own token is served

        # `make demo`: examples/hello.yaml's HTTP node calls the stack's own API, guard on
        hello = yaml.safe_load((EXAMPLES / "hello.yaml").read_text())
        run = await deploy_and_run(
            session, stack, hello, {"url": f"{stack.api}/healthz", "name": "ci"}
        )
        assert run["status"] == "SUCCEEDED", (run, stack.text[-3000:])
        assert run["output"] == {"greeting": "Hello, ci!", "checked": 200}

        # ...and no other port of this machine: an admin port's /metrics is refused
        metrics = f"http://127.0.0.1:{stack.admin_ports[SERVICES.index('api-gateway')]}/metrics"
        probe = {
            "id": "read-metrics",
            "nodes": [
                {
                    "id": "get",
                    "type": "HTTP",
                    "spec": {"url": "{{input.url}}"},
                    "retry": {"max_attempts": 1},
                }
            ],
            "edges": [],
        }
        for target in (metrics, metrics.replace("127.0.0.1", "localhost")):
            run = await deploy_and_run(session, stack, probe, {"url": target})
            assert run["status"] == "FAILED", run
            assert "refused to call" in json.dumps(run), run

        # the private Redis the stack started requires its password: a PYTHON node
        # speaking raw Redis gets nothing but NOAUTH
        found = re.search(r"private Redis on port (\d+)", stack.text)
        assert found is not None, stack.text[-3000:]
        redis_port = int(found.group(1))
        assert raw_ping(redis_port).startswith(b"-NOAUTH")
        snoop = {
            "id": "raw-redis",
            "nodes": [
                {
                    "id": "ping",
                    "type": "PYTHON",
                    "spec": {"code": RAW_REDIS, "input": {"port": "{{input.port}}"}},
                }
            ],
            "edges": [],
            "output": "{{tasks.ping.output}}",
        }
        run = await deploy_and_run(session, stack, snoop, {"port": redis_port})
        assert run["status"] == "SUCCEEDED", run
        assert "PONG" not in run["output"]["reply"], run["output"]

        # the admin ports answer only for the allowed names (and addresses)
        async with session.get(metrics, headers={"Host": "rebound.example"}) as r:
            assert r.status == 421
            assert "COMPOSER_ALLOWED_HOSTS" in await r.text()
