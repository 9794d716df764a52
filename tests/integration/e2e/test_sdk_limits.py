"""The worker SDK keeps to its concurrency, however many shards hold work."""

from __future__ import annotations

import asyncio
from typing import Any

from composer_core.model import RunStatus
from composer_sdk import TaskContext
from tests.integration.e2e.conftest import Stack, eventually


async def test_concurrency_is_a_bound_across_shards(stack: Stack) -> None:
    await stack.deploy(
        {"id": "wide", "nodes": [{"id": "a", "type": "TASK", "queue": "wide", "spec": {}}]}
    )
    running, peak = 0, 0

    async def busy(ctx: TaskContext, input: dict[str, Any]) -> dict[str, Any]:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.05)
        running -= 1
        return {}

    started = [await stack.engine.start("wide") for _ in range(40)]
    # each start published its dispatch (spread over the 4 shards) before it returned
    worker = stack.worker({"wide": busy}, concurrency=3)
    for s in started:
        assert (await stack.wait_run(s.run_id)).status is RunStatus.SUCCEEDED
    # a run is finished when the report commits; the worker counts it when the answer is back
    await eventually(lambda: worker.completed == 40, what="the worker counted every report")
    assert peak == 3
