"""Run history over HTTP and in the CLI: the README's payment walk-through.

The run fails on a short payment, is retried from its wait and succeeds; the
history still lists the failed attempt with its error and duration, who
started, signalled and retried the run, and pages through a cursor.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from composer_core.model import RunStatus
from tests.integration.api.conftest import Gateway, Live, open_gateway, waiting_workflow
from tests.integration.api.test_cli import composer
from tests.integration.e2e.conftest import open_stack

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
ADMIN = "release-token-00000000000000000000000000"
VIEWER = "auditor-token-00000000000000000000000000"
TOKENS = f"release={ADMIN}:admin,auditor={VIEWER}:viewer"


@pytest.fixture
async def named(database_url: str, redis_url: str) -> AsyncIterator[Live]:
    """The stack with a gateway whose tokens have names (release: admin, auditor: viewer)."""
    async with (
        open_stack(database_url, redis_url) as stack,
        open_gateway(database_url, redis_url, prefix=stack.prefix, tokens=TOKENS) as gw,
    ):
        yield Live(gw, stack)


async def call(gw: Gateway, method: str, path: str, token: str = ADMIN, **kw: Any) -> Any:
    answer = await gw.call(
        method, path, role=None, headers={"Authorization": f"Bearer {token}"}, **kw
    )
    assert answer.status < 300, (answer.status, answer.body)
    return answer.body


async def history(gw: Gateway, run_id: str, token: str = ADMIN) -> list[dict[str, Any]]:
    body = await call(gw, "GET", f"/v1/runs/{run_id}/history", token)
    assert body["run_id"] == run_id and body["next_cursor"] is None
    entries: list[dict[str, Any]] = body["entries"]
    return entries


async def until(gw: Gateway, run_id: str, check: Any, what: str) -> dict[str, Any]:
    for _ in range(500):
        run = await call(gw, "GET", f"/v1/runs/{run_id}")
        if check(run):
            return dict(run)
        await asyncio.sleep(0.02)
    raise AssertionError(f"run {run_id} never {what}: {run}")


def waiting(node: str) -> Any:
    return lambda run: any(t["node_id"] == node and t["state"] == "WAITING" for t in run["tasks"])


def finished(run: dict[str, Any]) -> bool:
    return run["status"] in {s.value for s in (RunStatus.SUCCEEDED, RunStatus.FAILED)}


async def test_the_payment_walk_through_keeps_the_failed_attempt(named: Live) -> None:
    gw = named.gateway
    await named.stack.builtin_workers()
    definition = yaml.safe_load((EXAMPLES / "payment.yaml").read_text())
    await call(gw, "POST", "/v1/workflows", json=definition, params={"deploy": "true"})
    started = await call(
        gw,
        "POST",
        "/v1/runs",
        json={"workflow_id": "payment", "input": {"order_id": "A-1", "amount": 21}},
    )
    run_id = started["run_id"]
    await until(gw, run_id, waiting("paid"), "waited")
    await call(gw, "POST", f"/v1/runs/{run_id}/signals/payment_received", json={"paid": 5})
    failed = await until(gw, run_id, finished, "finished")
    assert failed["status"] == "FAILED"
    failed_settle = next(t for t in failed["tasks"] if t["node_id"] == "settle")

    await call(gw, "POST", f"/v1/runs/{run_id}/retry", json={"from_node": "paid"})
    await until(gw, run_id, waiting("paid"), "waited again")
    await call(gw, "POST", f"/v1/runs/{run_id}/signals/payment_received", json={"paid": 21})
    done = await until(gw, run_id, finished, "finished again")
    assert done["status"] == "SUCCEEDED", done

    entries = await history(gw, run_id)
    kinds = [(e["kind"], e["node_id"]) for e in entries]
    seqs = [e["seq"] for e in entries]
    assert seqs == sorted(seqs)
    start = entries[0]
    assert (start["kind"], start["actor"]) == ("run.started", "release")
    assert start["detail"]["input"] == {"order_id": "A-1", "amount": 21}
    # the first settle attempt: leased by a worker, failed with its error and duration
    failure = next(e for e in entries if e["kind"] == "task.failed" and e["node_id"] == "settle")
    assert failure["task_id"] == failed_settle["task_id"]
    assert failure["attempt"] == 0  # counted from 0, as a task's attempt
    assert "paid 5 of 21" in failure["detail"]["error"]
    assert failure["duration_ms"] is not None and failure["duration_ms"] >= 0
    leased = [e for e in entries if e["kind"] == "task.leased" and e["node_id"] == "settle"]
    assert len(leased) == 2 and all(e["actor"] for e in leased)
    # the retry: from where, by whom, which version; then the settle that succeeded
    retried = next(e for e in entries if e["kind"] == "run.retried")
    assert retried["actor"] == "release"
    assert retried["detail"]["from_node"] == "paid" and retried["detail"]["version"] == 1
    signals = [e for e in entries if e["kind"] == "signal.received"]
    assert [s["actor"] for s in signals] == ["release", "release"]
    assert kinds.index(("run.retried", None)) < kinds.index(("task.completed", "settle"))
    finishes = [e["detail"]["status"] for e in entries if e["kind"] == "run.finished"]
    assert finishes == ["FAILED", "SUCCEEDED"]
    # the settle task the retry replaced is still listed, under its own task id
    settles = {e["task_id"] for e in entries if e["node_id"] == "settle"}
    assert len(settles) == 2 and failed_settle["task_id"] in settles

    # pages: two entries at a time, through the cursor, give the same entries
    paged: list[dict[str, Any]] = []
    params = {"limit": "2"}
    while True:
        page = await call(gw, "GET", f"/v1/runs/{run_id}/history", params=params)
        paged.extend(page["entries"])
        if page["next_cursor"] is None:
            break
        params["cursor"] = page["next_cursor"]
    assert paged == entries

    # the CLI's timeline says the same in words
    result = await composer(named, "history", run_id, token=ADMIN)
    assert result.exit_code == 0, result.output
    assert "run started by release" in result.output
    assert "attempt 1 failed" in result.output and "paid 5 of 21" in result.output
    assert "run retried from paid by release on v1" in result.output
    assert "run succeeded" in result.output


async def test_a_viewer_sees_the_history_without_payloads(named: Live) -> None:
    gw = named.gateway
    await call(
        gw, "POST", "/v1/workflows", json=waiting_workflow("quiet"), params={"deploy": "true"}
    )
    started = await call(
        gw, "POST", "/v1/runs", json={"workflow_id": "quiet", "input": {"card": "4111"}}
    )
    run_id = started["run_id"]
    await until(gw, run_id, waiting("wait"), "waited")
    await call(gw, "POST", f"/v1/runs/{run_id}/cancel", json={"reason": "card 4111 declined"})
    await call(gw, "POST", f"/v1/runs/{run_id}/cancel", json={"reason": "a second cancel"})

    seen = await history(gw, run_id, VIEWER)
    start = seen[0]
    assert start["kind"] == "run.started" and start["redacted"] is True
    assert start["detail"]["input"] is None and start["actor"] == "release"
    cancel = next(e for e in seen if e["kind"] == "run.cancelled")
    assert cancel["detail"]["reason"] is None and cancel["actor"] == "release"
    assert "4111" not in str(seen)
    # the first cancel took effect; a second one changes nothing, and is not recorded
    full = await history(gw, run_id)
    cancels = [e["detail"]["reason"] for e in full if e["kind"] == "run.cancelled"]
    assert cancels == ["card 4111 declined"]
    cancelled = next(e for e in full if e["kind"] == "task.cancelled")
    assert cancelled["node_id"] == "wait"


async def test_history_of_an_unknown_run_and_a_bad_cursor(named: Live) -> None:
    gw = named.gateway
    missing = await gw.call(
        "GET",
        "/v1/runs/0192f0c4-3b8a-7cc0-8000-000000000000/history",
        role=None,
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    assert missing.status == 404, missing.body
    await call(gw, "POST", "/v1/workflows", json=waiting_workflow("w"), params={"deploy": "true"})
    started = await call(gw, "POST", "/v1/runs", json={"workflow_id": "w"})
    bad = await gw.call(
        "GET",
        f"/v1/runs/{started['run_id']}/history",
        role=None,
        headers={"Authorization": f"Bearer {ADMIN}"},
        params={"cursor": "not-ours"},
    )
    assert bad.status == 400 and "next_cursor" in bad.body["detail"], bad.body
