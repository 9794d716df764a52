"""Run concurrency through the real services (docs/architecture.md §4.13): runs
started through the API, executed by an SDK worker through the coordinator; the
slots a finishing run frees are handed on by the coordinator's engine. A key never
has more runs going than its limit, and does reach it."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections import Counter, defaultdict
from typing import Any

import composer_repo as repo
from composer_sdk import TaskContext
from tests.integration.api.conftest import deploy, open_gateway
from tests.integration.e2e.conftest import Stack

KEYS = ("acme", "globex", "initech")


def charge(workflow_id: str, queue: str, **concurrency: Any) -> dict[str, Any]:
    return {
        "id": workflow_id,
        "concurrency": {"key": "{{input.customer}}", "max_runs": 2, **concurrency},
        "priority": "{{has(input.priority) ? input.priority : 3}}",
        "nodes": [
            {"id": "reserve", "type": "TASK", "queue": queue, "spec": {"c": "{{input.customer}}"}},
            {"id": "charge", "type": "TASK", "queue": queue, "spec": {"c": "{{input.customer}}"}},
        ],
        "edges": [{"from": "reserve", "to": "charge"}],
    }


async def run_intervals(
    pool: repo.Pool, run_ids: list[str]
) -> list[tuple[dt.datetime, dt.datetime]]:
    """Each run's (started, finished), from its history and its row."""
    out = []
    async with repo.connection(pool) as conn:
        for run_id in run_ids:
            history = await repo.run_history(conn, run_id)
            started = next(h.at for h in history if h.kind == "run.started")
            finished = (await repo.get_run(conn, run_id)).completed_at
            assert finished is not None
            out.append((started, finished))
    return out


def most_at_once(intervals: list[tuple[dt.datetime, dt.datetime]]) -> int:
    edges = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    most = current = 0
    for _, step in edges:  # an end before a start at the same instant: ends first
        current += step
        most = max(most, current)
    return most


async def test_twelve_runs_over_three_keys_never_run_three_of_a_key(
    stack: Stack, database_url: str, redis_url: str
) -> None:
    queue = f"charges-{stack.prefix}"
    executing: Counter[str] = Counter()
    most: Counter[str] = Counter()

    async def handler(ctx: TaskContext, input: dict[str, Any]) -> dict[str, Any]:
        executing[input["c"]] += 1
        most[input["c"]] = max(most[input["c"]], executing[input["c"]])
        try:
            await asyncio.sleep(0.1)  # the work: long enough for two of a key to overlap
        finally:
            executing[input["c"]] -= 1
        return {}

    stack.worker({queue: handler}, concurrency=12)
    async with open_gateway(database_url, redis_url, prefix=stack.prefix) as gw:
        await deploy(gw, charge("charge-e2e", queue))
        runs: dict[str, list[str]] = defaultdict(list)
        for i in range(12):
            key = KEYS[i % 3]
            answer = await gw.call(
                "POST", "/v1/runs", json={"workflow_id": "charge-e2e", "input": {"customer": key}}
            )
            assert answer.status == 201, answer.body
            runs[key].append(answer.body["run_id"])
            assert answer.body["status"] == ("RUNNING" if len(runs[key]) <= 2 else "PENDING")
        waiting = (await gw.call("GET", f"/v1/runs/{runs['acme'][-1]}")).body
        assert waiting["status"] == "PENDING"
        assert "waiting for a slot of key 'acme'" in waiting["waiting_hint"]
        listed = (await gw.call("GET", "/v1/limits")).body["limits"]
        mine = [item for item in listed if item["workflow_id"] == "charge-e2e"]
        assert {item["key"] for item in mine} == set(KEYS)
        for item in mine:  # the first two of each key may have finished already
            assert item["limit"] == 2 and item["kind"] == "run_concurrency"
            assert item["in_use"] <= 2 and item["in_use"] + item["waiting"] >= 2

        for key in KEYS:
            for run_id in runs[key]:
                record = await stack.wait_run(run_id, timeout=30)
                assert record.status.value == "SUCCEEDED", record.error
    for key in KEYS:
        assert most_at_once(await run_intervals(stack.pool, runs[key])) == 2, key
        assert most[key] <= 2
    assert max(most.values()) == 2
    async with repo.connection(stack.pool) as conn:
        assert (
            await conn.fetchval("SELECT count(*) FROM run_slots WHERE workflow_id = 'charge-e2e'")
            == 0
        )


async def test_cancel_strategies_through_the_api(
    stack: Stack, database_url: str, redis_url: str
) -> None:
    queue = f"held-{stack.prefix}"  # no worker serves it: the first runs stay going
    async with open_gateway(database_url, redis_url, prefix=stack.prefix) as gw:
        await deploy(gw, charge("charge-newest", queue, strategy="cancel_newest"))
        await deploy(gw, charge("charge-latest", queue, strategy="cancel_in_progress"))

        async def start(workflow_id: str) -> dict[str, Any]:
            answer = await gw.call(
                "POST", "/v1/runs", json={"workflow_id": workflow_id, "input": {"customer": "acme"}}
            )
            assert answer.status == 201, answer.body
            return dict(answer.body)

        going = [await start("charge-newest") for _ in range(2)]
        over = await start("charge-newest")
        assert [r["status"] for r in going] == ["RUNNING", "RUNNING"]
        assert over["status"] == "CANCELLED"
        cancelled = (await gw.call("GET", f"/v1/runs/{over['run_id']}")).body
        assert "'acme'" in cancelled["error"] and "cancel_newest" in cancelled["error"]

        oldest, second = [await start("charge-latest") for _ in range(2)]
        newest = await start("charge-latest")
        assert newest["status"] == "RUNNING"
        record = await stack.wait_run(oldest["run_id"])
        assert record.status.value == "CANCELLED"
        assert record.error is not None and newest["run_id"] in record.error
        assert (await gw.call("GET", f"/v1/runs/{second['run_id']}")).body["status"] == "RUNNING"
