"""Bulk actions through the API with the real services: POST /v1/runs/bulk/cancel and
/bulk/retry store an operation, the lease-sweeper (a real process) carries it out
at a bounded rate, and GET /v1/operations/{id} reaches DONE with exact counts;
sending the request again is safe, and the operation goes on after the process
running it is killed and started again."""

from __future__ import annotations

import asyncio
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import Any

import uuid6

from tests.integration.api.conftest import TOKENS, Gateway, deploy, waiting_workflow
from tests.integration.e2e.test_services import TOKEN, free_port, service_env
from tests.integration.waits import until
from tests.unit.cli.runner import Result, invoke


@asynccontextmanager
async def lease_sweeper(
    gw: Gateway, database_url: str, redis_url: str, *, runs_per_second: float = 50.0
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``composer-lease-sweeper`` as a process on the gateway's prefix, killed at the end."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "composer_lease_sweeper",
        env=service_env(
            database_url,
            redis_url,
            COMPOSER_REDIS_PREFIX=gw.prefix,
            COMPOSER_WORKER_TOKEN=TOKEN,
            COMPOSER_ADMIN_PORT=str(free_port()),
            COMPOSER_OPERATIONS_RUNS_PER_SECOND=str(runs_per_second),
            COMPOSER_OPERATIONS_INTERVAL_SECONDS="0.5",
            COMPOSER_LOG_LEVEL="WARNING",
        ),
    )
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


async def start(gw: Gateway, workflow_id: str, labels: dict[str, str] | None = None) -> str:
    body: dict[str, Any] = {"workflow_id": workflow_id}
    if labels:
        body["labels"] = labels
    answer = await gw.call("POST", "/v1/runs", role="operator", json=body)
    assert answer.status == 201, answer.body
    run_id: str = answer.body["run_id"]
    return run_id


async def operation(gw: Gateway, operation_id: str) -> dict[str, Any]:
    answer = await gw.call("GET", f"/v1/operations/{operation_id}", role="viewer")
    assert answer.status == 200, answer.body
    body: dict[str, Any] = answer.body
    return body


async def finished(gw: Gateway, operation_id: str, timeout: float = 30.0) -> dict[str, Any]:
    async def done() -> bool:
        return bool((await operation(gw, operation_id))["state"] == "DONE")

    await until(done, timeout, f"operation {operation_id} DONE")
    return await operation(gw, operation_id)


async def statuses(gw: Gateway, run_ids: list[str]) -> dict[str, str]:
    found = {}
    for run_id in run_ids:
        answer = await gw.call("GET", f"/v1/runs/{run_id}", role="viewer")
        found[run_id] = answer.body["status"]
    return found


async def bulk(
    gw: Gateway, action: str, body: dict[str, Any], key: str | None = None
) -> tuple[int, str]:
    headers = {"Idempotency-Key": key} if key else None
    answer = await gw.call(
        "POST", f"/v1/runs/bulk/{action}", role="operator", json=body, headers=headers
    )
    assert answer.status in (200, 202), answer.body
    return answer.status, answer.body["operation_id"]


def counts(op: dict[str, Any]) -> tuple[int, int, int, int]:
    return op["total"], op["done"], op["skipped"], op["failed"]


async def test_bulk_cancel_by_filter_then_retry_and_repeats_are_safe(
    gateway: Gateway, database_url: str, redis_url: str
) -> None:
    await deploy(gateway, waiting_workflow("bulk-a"))
    await deploy(gateway, waiting_workflow("bulk-b"))
    batch = {"batch": "b1"}
    going = [await start(gateway, "bulk-a", batch) for _ in range(6)]
    unlabelled = [await start(gateway, "bulk-a") for _ in range(2)]
    elsewhere = [await start(gateway, "bulk-b", batch) for _ in range(2)]
    cancelled = await start(gateway, "bulk-a", batch)
    await gateway.call("POST", f"/v1/runs/{cancelled}/cancel", role="operator", json={})
    succeeded = await start(gateway, "bulk-a", batch)
    sent = await gateway.call("POST", f"/v1/runs/{succeeded}/signals/go", role="operator", json={})
    assert sent.status == 200, sent.body

    status, op_id = await bulk(
        gateway,
        "cancel",
        {"filter": {"workflow_id": "bulk-a", "label": ["batch:b1"]}, "reason": "bad deploy"},
        key="cancel-b1",
    )
    assert status == 202
    first = await operation(gateway, op_id)
    assert first["state"] == "RUNNING" and first["action"] == "cancel"
    async with lease_sweeper(gateway, database_url, redis_url):
        op = await finished(gateway, op_id)
        # 6 cancelled now, 1 found cancelled (done); 1 that succeeded (skipped)
        assert counts(op) == (8, 7, 1, 0) and op["collected"] is True, op
        assert op["requested_by"] and op["finished_at"]
        assert set((await statuses(gateway, going)).values()) == {"CANCELLED"}
        assert set((await statuses(gateway, unlabelled + elsewhere)).values()) == {"RUNNING"}
        assert (await statuses(gateway, [succeeded]))[succeeded] == "SUCCEEDED"
        shown = await gateway.call("GET", f"/v1/runs/{going[0]}", role="operator")
        assert shown.body["error"] == "bad deploy" and shown.body["cancelled_by"]

        # the same request with its key: the first operation, nothing new
        again_status, again_id = await bulk(
            gateway,
            "cancel",
            {"filter": {"workflow_id": "bulk-a", "label": ["batch:b1"]}, "reason": "bad deploy"},
            key="cancel-b1",
        )
        assert (again_status, again_id) == (200, op_id)
        # sent again without a key: a new operation that changes nothing
        _, repeat_id = await bulk(
            gateway, "cancel", {"filter": {"workflow_id": "bulk-a", "label": ["batch:b1"]}}
        )
        assert counts(await finished(gateway, repeat_id)) == (8, 7, 1, 0)

        # retry the cancelled ones (from their cancelled node), by filter
        _, retry_id = await bulk(
            gateway,
            "retry",
            {"filter": {"workflow_id": "bulk-a", "status": "CANCELLED"}},
            key="retry-b1",
        )
        op = await finished(gateway, retry_id)
        assert counts(op) == (7, 7, 0, 0), op
        assert set((await statuses(gateway, [*going, cancelled])).values()) == {"RUNNING"}
        # repeated: the key returns the first; a new one finds them going and skips them
        retry_body = {"filter": {"workflow_id": "bulk-a", "status": "CANCELLED"}}
        assert (await bulk(gateway, "retry", retry_body, key="retry-b1"))[1] == retry_id
        _, again = await bulk(gateway, "retry", {"run_ids": going})
        op = await finished(gateway, again)
        assert counts(op) == (6, 0, 6, 0), op
        assert set((await statuses(gateway, going)).values()) == {"RUNNING"}


async def test_bulk_cancel_by_ids_counts_a_missing_run_as_failed(
    gateway: Gateway, database_url: str, redis_url: str
) -> None:
    await deploy(gateway, waiting_workflow("bulk-ids"))
    runs = [await start(gateway, "bulk-ids") for _ in range(3)]
    missing = str(uuid6.uuid7())
    _, op_id = await bulk(gateway, "cancel", {"run_ids": [*runs, missing, runs[0]]})
    first = await operation(gateway, op_id)
    assert first["total"] == 4 and first["collected"] is True  # counted at once, once each
    async with lease_sweeper(gateway, database_url, redis_url):
        op = await finished(gateway, op_id)
    assert counts(op) == (4, 3, 0, 1), op
    assert missing in op["last_error"]
    assert set((await statuses(gateway, runs)).values()) == {"CANCELLED"}


async def test_the_operation_goes_on_after_its_process_is_killed(
    gateway: Gateway, database_url: str, redis_url: str
) -> None:
    await deploy(gateway, waiting_workflow("bulk-restart"))
    runs = [await start(gateway, "bulk-restart", {"wave": "r"}) for _ in range(12)]
    _, op_id = await bulk(gateway, "cancel", {"filter": {"label": ["wave:r"]}})

    async def some_done() -> bool:
        return bool((await operation(gateway, op_id))["done"] >= 2)

    # 4 runs a second: the kill comes mid-way
    async with lease_sweeper(gateway, database_url, redis_url, runs_per_second=4) as proc:
        await until(some_done, 30, "a few runs cancelled")
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    cut = await operation(gateway, op_id)
    assert cut["state"] == "RUNNING" and 2 <= cut["done"] < 12, cut
    async with lease_sweeper(gateway, database_url, redis_url):
        op = await finished(gateway, op_id)
    assert counts(op) == (12, 12, 0, 0), op
    assert set((await statuses(gateway, runs)).values()) == {"CANCELLED"}


async def test_bad_bulk_requests_are_refused(gateway: Gateway) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({}, "either a filter or run_ids"),
        ({"filter": {}}, "filter is empty"),
        ({"filter": {"status": "RUNNING"}, "run_ids": [str(uuid6.uuid7())]}, "not both"),
        ({"filter": {"label": ["nocolon"]}}, "key:value"),
        ({"filter": {"created_after": "2026-01-01T00:00:00"}}, "time zone"),
        ({"run_ids": ["not-a-uuid"]}, "not a run id"),
        ({"filter": {"status": "SOMETIMES"}}, "filter.status"),
    ]
    for body, expected in cases:
        answer = await gateway.call("POST", "/v1/runs/bulk/cancel", role="operator", json=body)
        assert answer.status == 400, (body, answer.body)
        assert expected in answer.body["detail"], (body, answer.body)
    viewer = await gateway.call(
        "POST", "/v1/runs/bulk/cancel", role="viewer", json={"filter": {"status": "RUNNING"}}
    )
    assert viewer.status == 403
    unknown = await gateway.call("GET", f"/v1/operations/{uuid.uuid4()}", role="viewer")
    assert unknown.status == 404


async def test_the_cli_cancels_by_filter_only_when_told_yes(
    gateway: Gateway, database_url: str, redis_url: str
) -> None:
    await deploy(gateway, waiting_workflow("bulk-cli"))
    runs = [await start(gateway, "bulk-cli") for _ in range(3)]
    env = {"COMPOSER_API_URL": gateway.url, "COMPOSER_API_TOKEN": TOKENS["operator"]}

    def composer(*args: str) -> Awaitable[Result]:
        return asyncio.to_thread(invoke, list(args), env)

    asked = await composer("cancel", "--workflow", "bulk-cli", "--status", "running")
    assert asked.exit_code == 1, asked.output
    assert "this would cancel 3 run(s); add --yes" in asked.stderr
    assert set((await statuses(gateway, runs)).values()) == {"RUNNING"}
    none = await composer("cancel", "--workflow", "bulk-cli", "--status", "failed", "--yes")
    assert none.exit_code == 0 and "no runs match" in none.stdout
    assert (await composer("cancel")).exit_code == 1  # no run, no filter: says which

    async with lease_sweeper(gateway, database_url, redis_url):
        done = await composer("cancel", "--workflow", "bulk-cli", "--status", "RUNNING", "--yes")
    assert done.exit_code == 0, done.output
    assert "3 run(s), 3 cancelled, 0 skipped, 0 failed" in done.stdout
    assert set((await statuses(gateway, runs)).values()) == {"CANCELLED"}
