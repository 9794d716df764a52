"""Round trips per step through the whole stack, and the steps/s they allow.

Runs 100 runs of a 10-step chain of no-op TASK nodes through the in-process
stack of the end-to-end tests (engine, coordinator gRPC server,
outbox-enqueuer, one SDK worker, all in this one process) on a scratch
database and a Redis prefix of its own, and counts, per step:

- database transactions the services opened (``repo.transaction``, counted by
  wrapping it: pg_stat_database is flushed too lazily to count them);
- Redis commands (INFO commandstats, server-wide: run it on a quiet Redis);
- gRPC calls the coordinator served (lease, renew, report).

Uses COMPOSER_TEST_DATABASE_URL / COMPOSER_TEST_REDIS_URL (default the local servers).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from typing import Any

import composer_queue
import composer_repo as repo
from composer_sdk import TaskContext
from tests.integration.databases import new_database_name
from tests.integration.e2e.conftest import open_stack

ADMIN_URL = os.environ.get(
    "COMPOSER_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
REDIS_URL = os.environ.get("COMPOSER_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
RUNS, STEPS = 100, 10


async def noop(ctx: TaskContext, input: dict[str, Any]) -> dict[str, Any]:
    return {"step": ctx.node_id}


def chain() -> dict[str, Any]:
    ids = [f"s{i}" for i in range(STEPS)]
    return {
        "id": "bench-chain",
        "nodes": [{"id": i, "type": "TASK", "queue": "bench", "spec": {}} for i in ids],
        "edges": [{"from": a, "to": b} for a, b in itertools.pairwise(ids)],
    }


class CountingTransactions:
    """Wraps repo.transaction, which the engine and the enqueuer call through the module."""

    def __init__(self) -> None:
        self.count = 0
        self._original = repo.transaction

    def __enter__(self) -> CountingTransactions:
        def counted(pool: repo.Pool) -> Any:
            self.count += 1
            return self._original(pool)

        repo.transaction = counted
        return self

    def __exit__(self, *exc: object) -> None:
        repo.transaction = self._original


async def _finished(conn: repo.Connection, run_id: str) -> None:
    """Poll a run until it is terminal (through a connection the count leaves out)."""
    for _ in range(6000):
        if (await repo.get_run(conn, run_id)).status.is_terminal:
            return
        await asyncio.sleep(0.02)
    raise TimeoutError(f"run {run_id} did not finish in 2 minutes")


async def main() -> dict[str, float]:
    name = new_database_name("composer_bench_rt")
    await repo.create_database(ADMIN_URL, name)
    url = repo.database_url(ADMIN_URL, name)
    conn = await repo.connect(url)  # a direct connection: its queries are not counted
    try:
        await repo.migrate(conn)
        async with open_stack(url, REDIS_URL, poll_seconds=1.0) as stack:
            calls = {"lease": 0, "renew": 0, "report": 0}
            engine = stack.engine
            for attr, key in (
                ("acquire_lease", "lease"),
                ("renew_lease", "renew"),
                ("handle", "report"),
            ):
                original = getattr(engine, attr)

                def counted(*a: Any, _o: Any = original, _k: str = key, **kw: Any) -> Any:
                    if _k != "report" or kw.get("reporter") is not None:
                        calls[_k] += 1
                    return _o(*a, **kw)

                setattr(engine, attr, counted)
            await stack.deploy(chain())
            stack.worker({"bench": noop}, concurrency=32, read_block_ms=100)
            monitor = composer_queue.connect(REDIS_URL)
            redis0 = await monitor.command_calls()
            with CountingTransactions() as transactions:
                t0 = time.perf_counter()
                started = [await engine.start("bench-chain") for _ in range(RUNS)]
                for s in started:
                    await _finished(conn, s.run_id)
                elapsed = time.perf_counter() - t0
            redis1 = await monitor.command_calls()
            await monitor.close()
    finally:
        await conn.close()
        await repo.drop_database(ADMIN_URL, name)
    steps = RUNS * STEPS
    redis_delta = {k: redis1.get(k, 0) - redis0.get(k, 0) for k in redis1}
    redis_delta.pop("info", None)
    figures = {
        "steps": float(steps),
        "steps_per_s": steps / elapsed,
        # one start transaction per run is included, spread over its steps
        "db_transactions_per_step": transactions.count / steps,
        "grpc_calls_per_step": sum(calls.values()) / steps,
        "grpc_lease_per_step": calls["lease"] / steps,
        "grpc_report_per_step": calls["report"] / steps,
        "grpc_renew_per_step": calls["renew"] / steps,
        "redis_commands_per_step": sum(redis_delta.values()) / steps,
    }
    for command, count in sorted(redis_delta.items()):
        if count:
            figures[f"redis_{command}_per_step"] = count / steps
    return figures
