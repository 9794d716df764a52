"""libs/repo against a real PostgreSQL: the task hot path as the table grows, and HOT updates.

1. create + complete throughput with 0, 1M and 5M task rows already in the
   current month's partition. One pair is what the engine does for a worker
   task: a transaction that locks the run, inserts the task and its outbox
   row, then one that locks the run and completes the task (fenced). Four
   concurrent connections, each on its own runs; the best of three rounds
   counts (the worst is reported too: the machine is shared). The existing rows are
   generated in SQL (INSERT … SELECT generate_series), not through Python.
2. The share of HOT updates on task_instances (pg_stat_user_tables) over a
   worker task's whole life: insert, QUEUED, lease, two renewals, COMPLETED —
   with V001's indexes, then again after adding the seed's state-predicate
   partial indexes, to show what they would cost.

Runs in a scratch database on COMPOSER_TEST_DATABASE_URL's server (default
the local one), dropped at the end. COMPOSER_BENCH_REPO_SIZES (e.g. "0,100000")
overrides the table sizes for a quick run.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import composer_repo as repo
from composer_core.model import NodeType, TaskState

ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
SIZES = (0, 1_000_000, 5_000_000)
TASKS_PER_RUN = 10  # in the generated rows
CONCURRENCY = 4
PAIRS = 800  # timed create+complete pairs per round
ROUNDS = 3  # per size; the best round counts (the machine is shared and noisy)
WARMUP = 200
HOT_TASKS = 2_000

# Bench-only data generation: whole runs with TASKS_PER_RUN finished tasks,
# ids shaped like UUIDv7s whose times fall in the current month before now.
_GENERATE_RUNS = """
INSERT INTO workflow_runs (id, workflow_id, version, status, input, config, created_at,
                           updated_at, completed_at)
SELECT id, 'bench', 1, 'SUCCEEDED', '{"n": 1}', '{}', ts, ts, ts
  FROM (SELECT g,
               to_timestamp(ms / 1000.0) AS ts,
               substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-7' || substr(r, 1, 3) || '-8'
                   || substr(r, 4, 3) || '-' || substr(r, 7, 12) AS id
          FROM (SELECT g, ms, lpad(to_hex(ms), 12, '0') AS h, md5(g::text || $3) AS r
                  FROM (SELECT g, ($1 + (g * $2))::bigint AS ms
                          FROM generate_series($4::bigint, $5::bigint) g) a) b) c
"""
_GENERATE_TASKS = """
INSERT INTO task_instances (id, run_id, node_id, node_type, state, attempt, input, output,
                            queue, created_at, updated_at, started_at, finished_at)
SELECT left(r.id, 14) || substr(md5(r.id || k::text), 1, 4) || '-'
           || substr(md5(r.id || k::text), 5, 4) || '-' || substr(md5(r.id || k::text), 9, 12),
       r.id, 'n' || k, 'HTTP', 'COMPLETED', 0, jsonb_build_object('k', k),
       jsonb_build_object('status', 200, 'body', 'ok'), 'http',
       r.created_at, r.created_at, r.created_at, r.created_at
  FROM workflow_runs r, generate_series(1, $2::int) k
 WHERE r.workflow_id = 'bench' AND r.id >= $1
"""
_TASK_STATS = """
SELECT COALESCE(sum(n_tup_upd), 0)::bigint AS upd, COALESCE(sum(n_tup_hot_upd), 0)::bigint AS hot
  FROM pg_stat_user_tables WHERE relname LIKE 'task\\_instances\\_p%'
"""
_RESET_STATS = """
SELECT pg_stat_reset_single_table_counters(c.oid)
  FROM pg_class c WHERE c.relname LIKE 'task\\_instances\\_p%'
"""
_SEED_INDEXES = (
    "CREATE INDEX seed_run_active ON task_instances (run_id) "
    "WHERE state IN ('PENDING', 'RUNNING', 'QUEUED', 'WAITING')",
    "CREATE INDEX seed_running_lease ON task_instances (lease_expires_at) WHERE state = 'RUNNING'",
    "CREATE INDEX seed_wake ON task_instances (wake_at) WHERE state = 'WAITING' AND wake_at IS NOT NULL",
)


def _uuid7() -> str:
    ms = time.time_ns() // 1_000_000
    rand = uuid.uuid4().int
    value = (ms << 80) | (0x7 << 76) | ((rand >> 64) & 0xFFF) << 64 | (0b10 << 62) | (rand >> 66)
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


@asynccontextmanager
async def _connection(url: str) -> AsyncIterator[repo.Connection]:
    conn = await repo.connect(url)
    try:
        yield conn
    finally:
        await conn.close()


def _sizes() -> tuple[int, ...]:
    override = os.environ.get("COMPOSER_BENCH_REPO_SIZES")
    return tuple(int(s) for s in override.split(",")) if override else SIZES


def _label(size: int) -> str:
    if size == 0:
        return "0"
    if size % 1_000_000 == 0:
        return f"{size // 1_000_000}m"
    return f"{size // 1000}k"


async def _grow(conn: repo.Connection, current_rows: int, target_rows: int) -> float:
    """Add generated finished runs until the task table holds ``target_rows``; rows/s."""
    runs = (target_rows - current_rows) // TASKS_PER_RUN
    if runs <= 0:
        return 0.0
    now = dt.datetime.now(dt.UTC)
    month_start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    start_ms = int(month_start.timestamp() * 1000)
    span_ms = int((now - month_start).total_seconds() * 1000) - 60_000
    step = max(span_ms // (SIZES[-1] // TASKS_PER_RUN), 1)
    first = current_rows // TASKS_PER_RUN
    started = time.perf_counter()
    async with conn.transaction():
        # Bench data only: skip the per-row foreign-key triggers while loading.
        await conn.execute("SET LOCAL session_replication_role = replica")
        lower = repo.uuid7_bound(
            dt.datetime.fromtimestamp((start_ms + first * step) / 1000, dt.UTC)
        )
        await conn.execute(_GENERATE_RUNS, start_ms, step, str(first), first, first + runs - 1)
        await conn.execute(_GENERATE_TASKS, lower, TASKS_PER_RUN)
    await conn.execute("VACUUM ANALYZE workflow_runs")
    await conn.execute("VACUUM ANALYZE task_instances")
    # Write the load out now, so its checkpoint does not land in the measurement.
    await conn.execute("CHECKPOINT")
    return runs * TASKS_PER_RUN / (time.perf_counter() - started)


async def _new_runs(pool: repo.Pool, version: int, count: int) -> list[str]:
    ids = [_uuid7() for _ in range(count)]
    async with pool.acquire() as conn, conn.transaction():
        for run_id in ids:
            await repo.insert_run(conn, run_id, workflow_id="hot", version=version, input={"n": 1})
    return ids


async def _create_complete(pool: repo.Pool, run_id: str, node_id: str) -> None:
    """What the engine does for one worker task, minus the state machine."""
    task_id = _uuid7()
    async with pool.acquire() as conn:
        async with conn.transaction():
            await repo.load_run(conn, run_id)
            assert await repo.insert_task(
                conn,
                run_id,
                task_id,
                node_id,
                node_type=NodeType.HTTP,
                state=TaskState.PENDING,
                input={"a": 1},
                queue="http",
            )
            await repo.enqueue_dispatch(
                conn, run_id=run_id, task_id=task_id, queue="http", payload={"task_id": task_id}
            )
        async with conn.transaction():
            await repo.load_run(conn, run_id)
            done = await repo.complete_task(
                conn, repo.TaskRef(run_id, task_id, node_id, 0), {"status": 200}
            )
            assert done is not None


async def _pairs_per_second(pool: repo.Pool, version: int, pairs: int) -> float:
    per_worker = pairs // CONCURRENCY
    tasks_per_run = 5
    runs = await _new_runs(pool, version, CONCURRENCY * (per_worker // tasks_per_run + 1))

    async def worker(w: int) -> None:
        mine = runs[w::CONCURRENCY]
        for i in range(per_worker):
            await _create_complete(pool, mine[i // tasks_per_run], f"n{i % tasks_per_run}")

    started = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(CONCURRENCY)))
    return per_worker * CONCURRENCY / (time.perf_counter() - started)


async def _worker_lifecycle(pool: repo.Pool, run_id: str, node_id: str) -> None:
    """A worker task from creation to completion: every write the task row sees."""
    task_id = _uuid7()
    ref = repo.TaskRef(run_id, task_id, node_id, 0)
    async with pool.acquire() as conn:
        await repo.insert_task(
            conn,
            run_id,
            task_id,
            node_id,
            node_type=NodeType.HTTP,
            state=TaskState.PENDING,
            input={"a": 1},
            queue="http",
        )
        await repo.mark_published(conn, [], [ref])
        await repo.acquire_lease(conn, run_id, task_id, 0, owner="bench", ttl=30, token="tok")
        await repo.renew_lease(conn, run_id, task_id, 0, owner="bench", ttl=30, token="tok")
        await repo.renew_lease(conn, run_id, task_id, 0, owner="bench", ttl=30, token="tok")
        await repo.complete_task(conn, repo.TaskRef(run_id, task_id, node_id, 0), {"ok": 1})


async def _hot_share(url: str, version: int) -> tuple[float, int]:
    """HOT updates / all updates on task_instances over HOT_TASKS worker lifecycles."""
    async with _connection(url) as admin:
        await admin.execute(_RESET_STATS)
    pool = await repo.create_pool(url, min_size=CONCURRENCY, max_size=CONCURRENCY)
    try:
        runs = await _new_runs(pool, version, HOT_TASKS // 5)

        async def worker(w: int) -> None:
            for i in range(w, HOT_TASKS, CONCURRENCY):
                await _worker_lifecycle(pool, runs[i // 5], f"h{i % 5}")

        await asyncio.gather(*(worker(w) for w in range(CONCURRENCY)))
    finally:
        await pool.close()  # a backend flushes its table statistics when it exits
    expected = HOT_TASKS * 5
    async with _connection(url) as admin:
        deadline = time.monotonic() + 30
        while True:
            await admin.execute("SELECT pg_stat_clear_snapshot()")
            row = await admin.fetchrow(_TASK_STATS)
            assert row is not None
            if row["upd"] >= expected or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)  # waiting for the statistics flush, with a deadline
    return (row["hot"] / row["upd"] if row["upd"] else 0.0), row["upd"]


async def main() -> dict[str, float]:
    admin_url = os.environ.get("COMPOSER_TEST_DATABASE_URL", ADMIN_URL)
    name = f"composer_bench_{uuid.uuid4().hex[:10]}"
    await repo.create_database(admin_url, name)
    url = repo.database_url(admin_url, name)
    figures: dict[str, float] = {}
    try:
        async with _connection(url) as conn:
            await repo.migrate(conn)
            await repo.create_definition(conn, "bench", name="bench", spec={}, deploy=True)
            hot = await repo.create_definition(conn, "hot", name="hot", spec={}, deploy=True)
        version = hot.version

        pool = await repo.create_pool(url, min_size=CONCURRENCY, max_size=CONCURRENCY)
        try:
            rows = 0
            for size in _sizes():
                async with pool.acquire() as conn:
                    load_rate = await _grow(conn, rows, size)
                    rows = max(rows, size)
                if load_rate:
                    figures[f"generated_rows_per_s_{_label(size)}"] = load_rate
                await _pairs_per_second(pool, version, WARMUP)
                rates = [await _pairs_per_second(pool, version, PAIRS) for _ in range(ROUNDS)]
                figures[f"create_complete_per_s_{_label(size)}"] = max(rates)
                figures[f"create_complete_per_s_{_label(size)}_worst"] = min(rates)
            base = figures.get("create_complete_per_s_0")
            if base:
                for size in _sizes()[1:]:
                    label = _label(size)
                    figures[f"ratio_{label}_vs_0"] = (
                        figures[f"create_complete_per_s_{label}"] / base
                    )
        finally:
            await pool.close()

        share, updates = await _hot_share(url, version)
        figures["hot_update_share"] = share
        figures["task_updates_counted"] = updates
        async with _connection(url) as conn:
            for statement in _SEED_INDEXES:
                await conn.execute(statement)
        share, _ = await _hot_share(url, version)
        figures["hot_update_share_with_seed_state_indexes"] = share
    finally:
        await repo.drop_database(admin_url, name)
    return figures


if __name__ == "__main__":
    for key, value in asyncio.run(main()).items():
        print(f"{key:45} {value:,.3f}")
