"""A rate limit through the real services (docs/architecture.md §4.12): runs started
through the API, their attempts run by an SDK worker through the coordinator; the
worker's own clock says when each handler started. 5 per 2 s, measured over 20 s."""

from __future__ import annotations

import time
from typing import Any

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
    t0 = starts[0]
    span = starts[-1] - t0
    # never more than the bucket allows in any stretch: its size plus what refills
    for i, a in enumerate(starts):
        for j in range(i, len(starts)):
            allowed = LIMIT + (starts[j] - a) * LIMIT / PER_SECONDS
            assert j - i + 1 <= allowed + 1, (i, j, starts[j] - a)
    # and not much less: after the burst, the rate the bucket refills at
    after_burst = (len(starts) - LIMIT) / (starts[-1] - starts[LIMIT - 1])
    print(
        f"rate limit 5/2s: {len(starts)} starts over {span:.1f}s, {after_burst:.2f}/s after the burst"
    )
    assert 0.95 * LIMIT / PER_SECONDS <= after_burst <= 1.05 * LIMIT / PER_SECONDS + 0.1
