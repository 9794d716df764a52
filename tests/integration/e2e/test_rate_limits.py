"""A rate limit through the real services (docs/architecture.md §4.12): runs started
through the API, their attempts run by an SDK worker through the coordinator. 5 per
2 s, measured over 20 s: when each attempt was sent to the workers (the database's
times: the limit is kept there) never beats the bucket, and the worker's handlers
start at the bucket's rate on average. (A worker that falls behind may start two
sent attempts closer together than they were sent: the limit is on sending.)"""

from __future__ import annotations

import time
from typing import Any

import composer_repo as repo
from composer_sdk import TaskContext
from tests.integration.api.conftest import deploy, open_gateway
from tests.integration.e2e.conftest import Stack

LIMIT, PER_SECONDS, WINDOW = 5, 2.0, 20.0


async def test_five_per_two_seconds_over_twenty_seconds(
    stack: Stack, database_url: str, redis_url: str
) -> None:
    queue = f"partner-{stack.prefix}"
    key = f"partner-{stack.prefix}"
    starts: list[float] = []

    async def call(ctx: TaskContext, input: dict[str, Any]) -> dict[str, Any]:
        starts.append(time.monotonic())
        return {}

    stack.worker({queue: call}, concurrency=32)
    runs = 5 + int(WINDOW * LIMIT / PER_SECONDS)  # the burst, then 2.5 a second for 20 s
    async with open_gateway(database_url, redis_url, prefix=stack.prefix) as gw:
        await deploy(
            gw,
            {
                "id": "rated-e2e",
                "nodes": [
                    {
                        "id": "call",
                        "type": "TASK",
                        "queue": queue,
                        "rate_limit": {"key": key, "limit": LIMIT, "per_seconds": PER_SECONDS},
                    }
                ],
            },
        )
        run_ids = []
        for _ in range(runs):
            answer = await gw.call("POST", "/v1/runs", json={"workflow_id": "rated-e2e"})
            assert answer.status == 201, answer.body
            run_ids.append(answer.body["run_id"])
        waiting = (await gw.call("GET", f"/v1/runs/{run_ids[-1]}")).body["tasks"][0]
        assert waiting["state"] == "PENDING"
        assert f"rate limit '{key}' (5 per 2 s)" in waiting["waiting_hint"]
        listed = (await gw.call("GET", "/v1/limits")).body["limits"]
        row = next(item for item in listed if item["kind"] == "rate_limit" and item["key"] == key)
        assert row["limit"] == LIMIT and row["per_seconds"] == PER_SECONDS and row["waiting"] > 0

        for run_id in run_ids:
            record = await stack.wait_run(run_id, timeout=WINDOW + 20)
            assert record.status.value == "SUCCEEDED", record.error

    assert len(starts) == runs  # none dropped
    sent = []
    async with repo.connection(stack.pool) as conn:
        for run_id in run_ids:
            history = await repo.run_history(conn, run_id)
            released = [h.at for h in history if h.kind == "task.released"]
            first = next(h.at for h in history if h.kind == "run.started")
            sent.append((released[0] if released else first).timestamp())
    sent.sort()
    # never more sent than the bucket allows in any stretch: its size plus what refills
    for i, a in enumerate(sent):
        for j in range(i, len(sent)):
            allowed = LIMIT + (sent[j] - a) * LIMIT / PER_SECONDS
            assert j - i + 1 <= allowed + 1e-6 + 1, (i, j, sent[j] - a)
    # and not much less: after the burst, sent at the rate the bucket refills at
    after_burst = (len(sent) - LIMIT) / (sent[-1] - sent[LIMIT - 1])
    handled = (len(starts) - LIMIT) / (starts[-1] - starts[LIMIT - 1])
    print(
        f"rate limit 5/2s: {len(sent)} sent over {sent[-1] - sent[0]:.1f}s, "
        f"{after_burst:.2f}/s after the burst (the worker started them at {handled:.2f}/s)"
    )
    assert 0.95 * LIMIT / PER_SECONDS <= after_burst <= 1.05 * LIMIT / PER_SECONDS + 0.1
