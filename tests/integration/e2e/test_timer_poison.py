"""One wait the timer cannot fire never stops the others, and stops coming back.

The poison is a run whose stored definition no longer loads (written before a
validation rule existed, or by hand): firing its wait raises. The timer must
fire every other due wait, say which run it could not fire (an ALERT), and
park the bad one, not find it due again in every pass.
"""

from __future__ import annotations

import logging

import pytest

import composer_repo as repo
from composer_core.model import RunStatus
from composer_engine import Engine
from composer_timer.loop import Timer
from tests.integration.e2e.conftest import Stack
from tests.integration.waits import until


def nap(workflow_id: str) -> dict[str, object]:
    return {
        "id": workflow_id,
        "nodes": [{"id": "nap", "type": "WAIT", "spec": {"duration_seconds": 0.2}}],
    }


async def test_a_wait_that_cannot_be_fired_is_parked_and_the_others_fire(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    await stack.deploy(nap("poisoned"))
    await stack.deploy(nap("healthy"))
    bad = (await stack.engine.start("poisoned")).run_id
    good = (await stack.engine.start("healthy")).run_id
    async with repo.transaction(stack.pool) as conn:  # the stored definition breaks
        await conn.execute(
            'UPDATE workflow_definitions SET spec = \'{"id": "poisoned", "nodes": 7}\' '
            "WHERE id = 'poisoned'"
        )

    async def both_due() -> bool:
        async with repo.connection(stack.pool) as conn:
            return len(await repo.due_waits(conn)) == 2

    await until(both_due, what="both waits due")
    # a fresh engine: its definition cache has not seen the good copy
    timer = Timer(Engine(stack.pool, redis=stack.redis, redis_prefix=stack.prefix), stack.redis)

    with caplog.at_level(logging.WARNING, logger="composer.timer"):
        first = await timer.fire_due()
    assert (first.due, first.fired) == (2, 1)
    assert (await stack.wait_run(good, timeout=5)).status is RunStatus.SUCCEEDED
    [alert] = [r for r in caplog.records if r.levelname == "ALERT"]
    assert bad in alert.getMessage() and "nap" in alert.getMessage()

    second = await timer.fire_due()  # the parked wait is not due again at once
    assert second.due == 0
    assert timer.parked == 1
    assert (await stack.tasks_of(bad))["nap"].state.value == "WAITING"  # for an operator
