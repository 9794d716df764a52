"""The api-gateway over real HTTP: a real port, the module's scratch database, real Redis.

``gateway`` serves the app alone (runs start, wait, get signals and cancels,
but no worker executes a task); ``live`` runs it beside the in-process stack
of tests/integration/e2e (engine, coordinator, enqueuer, workers) on the same
Redis prefix, for tests that need runs to finish.
"""

from __future__ import annotations

import asyncio
import io
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from composer_api_gateway import GatewayConfig, create_app
from composer_service import EngineConfig, RuntimeConfig, serving
from composer_service.engines import DEFAULT_MAX_CHILD_DEPTH
from composer_timer.schedules import ScheduleFirer
from tests.integration.e2e.conftest import Stack, open_stack

TOKENS = {"admin": "adm-secret", "operator": "op-secret", "viewer": "view-secret"}
TOKENS_ENV = ",".join(f"{token}:{role}" for role, token in TOKENS.items())


@dataclass
class Answer:
    status: int
    body: Any
    headers: Any
    content_type: str


@dataclass
class Gateway:
    url: str
    app: web.Application
    prefix: str
    session: aiohttp.ClientSession
    #: The admin port's base URL (/healthz, /readyz, /metrics), as composer_service serves it.
    admin_url: str

    async def admin(self, path: str) -> Answer:
        """GET ``path`` on the admin port."""
        async with self.session.get(self.admin_url + path) as response:
            text = await response.text()
            body: Any = await response.json() if response.content_type.endswith("json") else text
            return Answer(response.status, body, response.headers, response.content_type)

    async def call(
        self,
        method: str,
        path: str,
        *,
        role: str | None = "admin",
        json: Any = None,
        data: Any = None,
        content_type: str | None = None,
        headers: dict[str, str] | None = None,
        params: dict[str, str] | None = None,
    ) -> Answer:
        sent = dict(headers or {})
        if role is not None:
            sent["Authorization"] = f"Bearer {TOKENS[role]}"
        if content_type is not None:
            sent["Content-Type"] = content_type
        if isinstance(data, str):
            data = data.encode()
        if isinstance(data, bytes) and len(data) > 1024 * 1024:  # aiohttp warns about large bytes
            data = io.BytesIO(data)
        async with self.session.request(
            method, self.url + path, json=json, data=data, headers=sent, params=params
        ) as response:
            raw = await response.read()
            body: Any = raw.decode("utf-8", "replace")
            if response.content_type.endswith("json"):
                body = await response.json(content_type=None)
            return Answer(response.status, body, response.headers, response.content_type)


@asynccontextmanager
async def open_gateway(
    database_url: str, redis_url: str, *, prefix: str | None = None, **config: Any
) -> AsyncIterator[Gateway]:
    """Serve the gateway on a free port until the block ends."""
    prefix = prefix or f"test-{uuid.uuid4().hex[:10]}"
    settings: dict[str, Any] = {"tokens": TOKENS_ENV, "result_poll_seconds": 5.0}
    settings |= config
    # what the engine is built with (composer_service.engines), the rest the gateway's
    engine = EngineConfig(
        redis_prefix=prefix,
        encryption_keys=settings.pop("encryption_keys", ""),
        queue_concurrency=settings.pop("queue_concurrency", ""),
        max_child_depth=settings.pop("max_child_depth", DEFAULT_MAX_CHILD_DEPTH),
    )
    runtime = RuntimeConfig(
        "api-gateway",
        database_url=database_url,
        pool_size=8,
        redis_url=redis_url,
        admin_port=0,
        logs=False,  # the test's log capture stays
        telemetry=False,  # tests/integration/e2e installs its own
        engine=engine,
    )
    async with serving(runtime) as rt:
        app = create_app(
            GatewayConfig(redis_prefix=prefix, **settings), engine=rt.engine, redis=rt.queue
        )
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        try:
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            host, port = runner.addresses[0][:2]
            async with aiohttp.ClientSession() as session:
                yield Gateway(
                    f"http://{host}:{port}",
                    app,
                    prefix,
                    session,
                    admin_url=f"http://127.0.0.1:{rt.admin_port}",
                )
        finally:
            await runner.cleanup()


@pytest.fixture
async def gateway(database_url: str, redis_url: str) -> AsyncIterator[Gateway]:
    async with open_gateway(database_url, redis_url) as gw:
        yield gw


@dataclass
class Live:
    gateway: Gateway
    stack: Stack


@pytest.fixture
async def live(database_url: str, redis_url: str) -> AsyncIterator[Live]:
    async with (
        open_stack(database_url, redis_url) as stack,
        open_gateway(database_url, redis_url, prefix=stack.prefix) as gw,
    ):
        yield Live(gw, stack)


@pytest.fixture
async def scheduled(database_url: str, redis_url: str) -> AsyncIterator[Live]:
    """``live`` with the timer service's schedule firer running on the stack's prefix
    (as services/timer runs it), so schedules fire and backfills advance."""
    async with (
        open_stack(database_url, redis_url) as stack,
        open_gateway(database_url, redis_url, prefix=stack.prefix) as gw,
    ):
        firer = ScheduleFirer(stack.engine, stack.redis, prefix=stack.prefix, poll_seconds=0.2)
        stack.tasks.append(asyncio.create_task(firer.run(stack.stop), name="schedule-firer"))
        yield Live(gw, stack)


def waiting_workflow(workflow_id: str = "waits", event: str = "go") -> dict[str, Any]:
    """One WAIT_FOR_EVENT node: a run waits for ``event`` and then succeeds, no worker needed."""
    return {
        "id": workflow_id,
        "output": {"got": "{{tasks.wait.output}}"},
        "nodes": [{"id": "wait", "type": "WAIT_FOR_EVENT", "spec": {"event": event}}],
    }


def two_waits_workflow(workflow_id: str = "two-waits") -> dict[str, Any]:
    """WAIT_FOR_EVENT ``go`` then ``later``: a ``later`` sent first is buffered until
    its node waits, then taken."""
    return {
        "id": workflow_id,
        "output": {"got": "{{tasks.wait.output}}"},
        "nodes": [
            {"id": "wait", "type": "WAIT_FOR_EVENT", "spec": {"event": "go"}},
            {"id": "after", "type": "WAIT_FOR_EVENT", "spec": {"event": "later"}},
        ],
        "edges": [{"from": "wait", "to": "after"}],
    }


def queued_workflow(workflow_id: str = "queued") -> dict[str, Any]:
    """One TASK node on a queue nobody serves: its runs stay RUNNING."""
    return {
        "id": workflow_id,
        "nodes": [{"id": "work", "type": "TASK", "queue": "nobody", "spec": {"n": "{{input.n}}"}}],
    }


async def deploy(gw: Gateway, definition: dict[str, Any]) -> int:
    answer = await gw.call("POST", "/v1/workflows", json=definition, params={"deploy": "true"})
    assert answer.status in (200, 201), answer.body  # 200: unchanged, that version deployed
    version: int = answer.body["version"]
    return version
