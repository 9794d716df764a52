"""The README's TypeScript worker runs as written: sdks/typescript/examples/payments.ts
(built by make ts-sdk), started with only the environment a stack's .state/stack.env
and tokens.env give it, serves the TASK node `charge` of examples/charge.yaml end to
end: the run's output is the handler's, a bad amount fails for good with its code, and
SIGTERM stops it cleanly."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml

import composer_repo as repo
from composer_core.model import RunStatus, TaskState
from tests.conformance.conftest import ROOT
from tests.integration.e2e.conftest import TOKEN, Stack, open_stack

EXAMPLE = ROOT / "sdks" / "typescript" / "dist" / "examples" / "payments.js"
CHARGE = ROOT / "examples" / "charge.yaml"


@pytest.fixture
async def stack(database_url: str, redis_url: str) -> AsyncIterator[Stack]:
    async with open_stack(database_url, redis_url) as s:
        yield s


async def test_the_typescript_example_charges_an_order_end_to_end(
    stack: Stack, tmp_path: Path
) -> None:
    assert EXAMPLE.exists(), f"{EXAMPLE} is not built: run make ts-sdk"
    await stack.deploy(yaml.safe_load(CHARGE.read_text()))
    # what `set -a; . .state/tokens.env; . .state/stack.env` gives the shell, and no more
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPOSER_")} | {
        "COMPOSER_GRPC_ADDR": stack.grpc_target,
        "COMPOSER_REDIS_URL": stack.redis_url,
        "COMPOSER_REDIS_PREFIX": stack.prefix,
        "COMPOSER_WORKER_TOKEN": TOKEN,
    }
    stderr = tmp_path / "worker.stderr"
    with stderr.open("wb") as err:
        proc = await asyncio.create_subprocess_exec("node", str(EXAMPLE), env=env, stderr=err)
    try:
        good = (await stack.engine.start("charge", input={"order_id": "A-1", "amount": 21})).run_id
        bad = (await stack.engine.start("charge", input={"order_id": "A-2", "amount": 0})).run_id
        run = await stack.wait_run(good, timeout=30)
        assert run.status is RunStatus.SUCCEEDED, stderr.read_text()
        assert run.output == {"charged": 21, "key": f"{good}:charge"}
        async with repo.transaction(stack.pool) as conn:
            [log] = await repo.get_task_logs(conn, good)
        assert log.lines.endswith("INFO charging 21 for order A-1")

        failed = await stack.wait_run(bad, timeout=30)
        assert failed.status is RunStatus.FAILED
        task = (await stack.tasks_of(bad))["charge"]
        assert (task.state, task.attempt, task.error_code) == (TaskState.FAILED, 0, "bad_amount")

        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    said = stderr.read_text()
    assert f"serving payments from Redis {stack.redis_url} prefix '{stack.prefix}'" in said
