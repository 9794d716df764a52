"""A worker's run() tunes its process's garbage collector (WorkerConfig.tune_gc), as a
service's start does: start-up's objects frozen, the youngest generation collected
after 10,000 allocations. Each case runs in a process of its own, as a program would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

#: A worker on the queue fake and a fake coordinator: its collector's state once it
#: serves, then it stops.
PROGRAM = r"""
import asyncio, gc, sys
from composer_queue.testing import FakeQueue
from composer_sdk import Worker, WorkerConfig
from tests.unit.sdk.fakes import FakeStub, client

async def main() -> None:
    config = WorkerConfig(redis_prefix="unit", read_block_ms=20, drain_seconds=1.0)
    worker = Worker(config, queue=FakeQueue(), coordinator=client(FakeStub()))

    async def noop(ctx, input):
        return None

    worker.add_handler("q", noop)
    served = asyncio.create_task(worker.run())
    deadline = asyncio.get_running_loop().time() + 10
    while not worker.started_at and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)
    print(worker.started_at > 0, gc.get_threshold()[0], gc.get_freeze_count() > 0)
    worker.stop()
    await asyncio.wait_for(served, 10)

asyncio.run(main())
"""


@pytest.mark.parametrize(
    ("setting", "expected"),
    [(None, "True 10000 True"), ("false", "True 700 False")],
)
def test_a_worker_tunes_its_collector_unless_told_not_to(
    setting: str | None, expected: str
) -> None:
    env = {"PATH": "/usr/bin:/bin"}
    if setting is not None:
        env["COMPOSER_WORKER_TUNE_GC"] = setting
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == expected
