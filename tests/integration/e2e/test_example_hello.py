"""examples/hello.yaml end to end: a healthy answer greets, a 5xx takes the unhealthy branch.

The check accepts 5xx (accept_status), so a service that answers 503 completes the
HTTP node with that status and the SWITCH routes on it, as the example promises.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml
from aiohttp import web

from composer_core.model import RunStatus, TaskState
from tests.integration.e2e.conftest import Stack, open_stack

HELLO = Path(__file__).resolve().parents[3] / "examples" / "hello.yaml"


@pytest.fixture
async def timed(database_url: str, redis_url: str) -> AsyncIterator[Stack]:
    """The stack with the timer loop running (hello's healthy branch has a WAIT)."""
    async with open_stack(database_url, redis_url, timer=True) as s:
        yield s


@pytest.fixture
async def health_url(unused_tcp_port: int) -> AsyncIterator[str]:
    """A local /healthz whose status the test picks with ?status=."""

    async def healthz(request: web.Request) -> web.Response:
        status = int(request.query.get("status", "200"))
        return web.json_response({"status": "ok" if status < 300 else "down"}, status=status)

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", unused_tcp_port).start()
    try:
        yield f"http://127.0.0.1:{unused_tcp_port}/healthz"
    finally:
        await runner.cleanup()


async def test_a_healthy_service_is_greeted(timed: Stack, health_url: str) -> None:
    await timed.deploy(yaml.safe_load(HELLO.read_text()))
    await timed.builtin_workers()
    started = await timed.engine.start("hello", input={"url": health_url, "name": "Ada"})
    run = await timed.wait_run(started.run_id)
    assert run.status is RunStatus.SUCCEEDED, run.error
    assert run.output == {"greeting": "Hello, Ada!", "checked": 200}
    assert (await timed.tasks_of(started.run_id))["unhealthy"].state is TaskState.SKIPPED


async def test_a_503_completes_the_check_and_takes_the_unhealthy_branch(
    timed: Stack, health_url: str
) -> None:
    await timed.deploy(yaml.safe_load(HELLO.read_text()))
    await timed.builtin_workers()
    started = await timed.engine.start(
        "hello", input={"url": f"{health_url}?status=503", "name": "Ada"}
    )
    run = await timed.wait_run(started.run_id)
    assert run.status is RunStatus.FAILED
    assert run.error is not None and "the service answered 503" in run.error
    tasks = await timed.tasks_of(started.run_id)
    assert tasks["check"].state is TaskState.COMPLETED
    assert tasks["check"].attempt == 0  # accepted, so not retried
    assert tasks["check"].output["status"] == 503
    assert tasks["check"].output["body"] == {"status": "down"}
    assert tasks["unhealthy"].state is TaskState.FAILED
    assert tasks["both"].state is TaskState.SKIPPED


async def test_a_404_still_fails_the_check_for_good(timed: Stack, health_url: str) -> None:
    await timed.deploy(yaml.safe_load(HELLO.read_text()))
    await timed.builtin_workers()
    started = await timed.engine.start(
        "hello", input={"url": f"{health_url}?status=404", "name": "Ada"}
    )
    run = await timed.wait_run(started.run_id)
    assert run.status is RunStatus.FAILED
    tasks = await timed.tasks_of(started.run_id)
    assert tasks["check"].state is TaskState.FAILED
    assert tasks["check"].error_code == "http_404"
    assert tasks["check"].attempt == 0  # a 4xx is permanent: no retry
    assert "unhealthy" not in tasks
