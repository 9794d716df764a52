"""The only raw SQL of the benchmarks: the ceiling loop and the pg_stat reads.

Why it is not in libs/repo: neither is part of the engine. The ceiling is a
deliberately engine-free transaction (lock a row, read, insert two rows,
update one, commit) on tables of its own, so that the engine's steps/s can be
set against what a plain asyncpg loop gets from the same PostgreSQL in the
same run; and pg_stat_database / pg_stat_activity / pg_settings (and
pg_stat_statements where the server has it) are server statistics the engine
never reads. Every statistics read goes through ``Stats``, on a connection to
another database than the measured one, so that it never counts there, as does
``LockWaits`` (pg_stat_activity sampled on a connection of its own) and
``DatabaseWal`` (pg_walinspect, in a database of the bench's own). Keeping them
here, in one small module, keeps every engine statement in libs/repo.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import LiteralString

import asyncpg

CEILING_SCHEMA: LiteralString = """
CREATE TABLE IF NOT EXISTS bench_ceiling_runs (
    id uuid PRIMARY KEY,
    status text NOT NULL,
    steps int NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS bench_ceiling_tasks (
    id uuid PRIMARY KEY,
    run_id uuid NOT NULL,
    node_id text NOT NULL,
    state text NOT NULL,
    output jsonb,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS bench_ceiling_tasks_run ON bench_ceiling_tasks (run_id);
"""
_LOCK: LiteralString = "SELECT status, steps FROM bench_ceiling_runs WHERE id = $1 FOR UPDATE"
_READ: LiteralString = "SELECT node_id, state FROM bench_ceiling_tasks WHERE run_id = $1 ORDER BY created_at DESC LIMIT 2"
_INSERT: LiteralString = (
    "INSERT INTO bench_ceiling_tasks (id, run_id, node_id, state, output) "
    "VALUES ($1, $3, $4, 'COMPLETED', '{}'::jsonb), ($2, $3, $4, 'PENDING', NULL)"
)
_UPDATE: LiteralString = (
    "UPDATE bench_ceiling_runs SET steps = steps + 1, updated_at = now() WHERE id = $1"
)


async def ceiling(url: str, *, seconds: float, concurrency: int, rows: int) -> tuple[int, float]:
    """Run engine-like transactions over ``rows`` run rows from ``concurrency``
    connections for ``seconds``; returns (transactions committed, their elapsed seconds)."""
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(CEILING_SCHEMA)
        run_ids = [uuid.uuid4() for _ in range(rows)]
        await conn.executemany(
            "INSERT INTO bench_ceiling_runs (id, status) VALUES ($1, 'RUNNING')",
            [(r,) for r in run_ids],
        )
    finally:
        await conn.close()
    pool = await asyncpg.create_pool(url, min_size=concurrency, max_size=concurrency)
    counter = itertools.count()
    done = 0

    async def one_connection(deadline: float) -> None:
        nonlocal done
        async with pool.acquire() as c:
            while time.perf_counter() < deadline:
                i = next(counter)
                run_id = run_ids[i % rows]
                async with c.transaction():
                    await c.fetchrow(_LOCK, run_id)
                    await c.fetch(_READ, run_id)
                    await c.execute(_INSERT, uuid.uuid4(), uuid.uuid4(), run_id, f"s{i % 10}")
                    await c.execute(_UPDATE, run_id)
                done += 1

    try:
        t0 = time.perf_counter()
        await asyncio.gather(*(one_connection(t0 + seconds) for _ in range(concurrency)))
        elapsed = time.perf_counter() - t0
    finally:
        await pool.close()
    return done, elapsed


@dataclass(frozen=True, slots=True)
class Statement:
    """One pg_stat_statements entry's counters (cumulative; diff two readings)."""

    calls: int
    plans: int
    exec_ms: float
    plan_ms: float
    query: str

    def minus(self, before: Statement | None) -> Statement:
        if before is None:
            return self
        return Statement(
            self.calls - before.calls,
            self.plans - before.plans,
            self.exec_ms - before.exec_ms,
            self.plan_ms - before.plan_ms,
            self.query,
        )


class Stats:
    """pg_stat reads for one database, on a connection of its own (to ``postgres``,
    so that these reads never count among the database's own transactions)."""

    def __init__(self, conn: asyncpg.Connection[asyncpg.Record], database: str) -> None:
        self._conn = conn
        self.database = database

    @classmethod
    async def open(cls, admin_url: str, database: str) -> Stats:
        return cls(await asyncpg.connect(admin_url), database)

    async def close(self) -> None:
        await self._conn.close()

    async def commits(self) -> int:
        """xact_commit of the database as the statistics hold it now (flushed lazily:
        a busy backend at most once a second, an idle one after about 10 s)."""
        await self._conn.execute("SELECT pg_stat_clear_snapshot()")
        value = await self._conn.fetchval(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = $1", self.database
        )
        return int(value or 0)

    async def deadlocks(self) -> int:
        """pg_stat_database.deadlocks of the database (flushed lazily, as commits are)."""
        await self._conn.execute("SELECT pg_stat_clear_snapshot()")
        value = await self._conn.fetchval(
            "SELECT deadlocks FROM pg_stat_database WHERE datname = $1", self.database
        )
        return int(value or 0)

    async def wal_bytes(self) -> int:
        """The server's WAL insert position in bytes since 0/0: server-wide, every
        database's writes (and this server's background work) move it, not only ours."""
        value = await self._conn.fetchval(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint"
        )
        return int(value)

    async def database_oid(self) -> int:
        return int(
            await self._conn.fetchval(
                "SELECT oid FROM pg_database WHERE datname = $1", self.database
            )
        )

    async def backend_pids(self) -> list[int]:
        """Server processes connected to the database (for their CPU time in /proc)."""
        rows = await self._conn.fetch(
            "SELECT pid FROM pg_stat_activity WHERE datname = $1", self.database
        )
        return [int(r["pid"]) for r in rows]

    async def durability(self) -> dict[str, str]:
        """The server's fsync and synchronous_commit (is a commit flushed to disk?)."""
        rows = await self._conn.fetch(
            "SELECT name, setting FROM pg_settings WHERE name IN ('fsync', 'synchronous_commit')"
        )
        return {str(r["name"]): str(r["setting"]) for r in rows}

    async def statements_unavailable(self) -> str | None:
        """Why pg_stat_statements cannot be read here, or None when it can: it must be
        preloaded (shared_preload_libraries) and installed in the database this
        connection is on, so that its reads never touch the measured database."""
        preload = await self._conn.fetchval("SELECT current_setting('shared_preload_libraries')")
        if "pg_stat_statements" not in [p.strip() for p in str(preload or "").split(",")]:
            return "pg_stat_statements is not in shared_preload_libraries"
        installed = await self._conn.fetchval(
            "SELECT count(*) FROM pg_extension WHERE extname = 'pg_stat_statements'"
        )
        if not installed:
            name = await self._conn.fetchval("SELECT current_database()")
            return f"pg_stat_statements is preloaded but not installed in database {name}"
        return None

    async def statements(self) -> dict[int, Statement]:
        """pg_stat_statements' counters for the measured database, by query id."""
        rows = await self._conn.fetch(
            "SELECT s.queryid, sum(s.calls) AS calls, sum(s.plans) AS plans,"
            " sum(s.total_exec_time) AS exec_ms, sum(s.total_plan_time) AS plan_ms,"
            " min(s.query) AS query"
            " FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid"
            " WHERE d.datname = $1 AND s.queryid IS NOT NULL GROUP BY s.queryid",
            self.database,
        )
        return {
            int(r["queryid"]): Statement(
                int(r["calls"]),
                int(r["plans"]),
                float(r["exec_ms"]),
                float(r["plan_ms"]),
                str(r["query"]),
            )
            for r in rows
        }

    async def server_pids(self) -> list[int]:
        """Every process of the server, background ones too (shared with other databases)."""
        rows = await self._conn.fetch("SELECT pid FROM pg_stat_activity")
        return sorted({int(r["pid"]) for r in rows})


_LOCK_SAMPLE: LiteralString = (
    "SELECT count(*) AS backends,"
    " count(*) FILTER (WHERE state = 'active') AS active,"
    " count(*) FILTER (WHERE wait_event_type = 'Lock') AS waiting,"
    " coalesce(array_agg(wait_event) FILTER (WHERE wait_event_type = 'Lock'), '{}') AS events"
    " FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend'"
)


@dataclass(slots=True)
class LockWaits:
    """Samples of the database's client backends in pg_stat_activity, every
    ``interval`` seconds, on a connection of its own to another database (so the
    samples neither count among the measured database's transactions nor wait on
    the ``Stats`` connection). A backend waiting for a heavyweight lock (a row's
    transaction id, a tuple, a relation: wait_event_type 'Lock') shows in a sample
    only if it waits at that instant, so short waits are undercounted: the sums are
    a sampled estimate of how many backends wait at once, not a count of waits."""

    admin_url: str
    database: str
    interval: float = 0.1
    samples: int = 0
    backends: int = 0
    active: int = 0
    waiting: int = 0
    #: Waiting backends by wait_event (transactionid, tuple, relation, advisory, ...).
    events: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    _task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        conn = await asyncpg.connect(self.admin_url)
        self._task = asyncio.create_task(self._sample(conn), name="bench-lock-waits")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _sample(self, conn: asyncpg.Connection[asyncpg.Record]) -> None:
        t0 = time.monotonic()
        try:
            while True:
                row = await conn.fetchrow(_LOCK_SAMPLE, self.database)
                assert row is not None
                self.samples += 1
                self.backends += int(row["backends"])
                self.active += int(row["active"])
                self.waiting += int(row["waiting"])
                self.events.update(str(e) for e in row["events"])
                self.seconds = time.monotonic() - t0
                await asyncio.sleep(self.interval)
        finally:
            conn.terminate()  # cancelled, perhaps mid-query: no goodbye


_OUR_WAL: LiteralString = """
WITH r AS (
    SELECT xid::text AS xid, record_length, coalesce(block_ref, '') AS block_ref
    FROM pg_get_wal_records_info('0/0'::pg_lsn + $1::numeric, '0/0'::pg_lsn + $2::numeric)
), ours AS (
    SELECT DISTINCT xid FROM r WHERE block_ref LIKE $3 AND xid <> '0'
), mine AS (
    SELECT record_length FROM r
     WHERE block_ref LIKE $3 OR xid IN (SELECT xid FROM ours) OR xid = ANY($4::text[])
)
SELECT (SELECT coalesce(sum(record_length), 0)::bigint FROM mine) AS bytes,
       (SELECT count(*) FROM mine) AS records,
       (SELECT coalesce(array_agg(xid), '{}') FROM ours) AS xids
"""


@dataclass(slots=True)
class DatabaseWal:
    """The WAL one database writes, read as it is written: every ``interval`` seconds
    the records since the last read, with pg_walinspect, on a connection to a
    database of the bench's own (``url``, where the extension is installed: so the
    reads neither count among the measured database's transactions nor in its
    backends' CPU). A record is the database's when it touches one of its relations
    (``rel <tablespace>/<database oid>/…`` in its block references) or belongs to a
    transaction that did (its commit record too, also when that falls in the next
    read). Page headers and the padding between records are not counted. On a shared
    server a checkpoint (another suite's DROP DATABASE forces one) lets the server
    remove segments older than it, within a second of their writing: a read after
    the workload, and even reads every second, found them gone; hence the slot
    (``begin``). A read that fails ends the reading; ``error`` says why, and the
    totals are then partial (report none)."""

    url: str
    database_oid: int
    interval: float = 1.0
    bytes: int = 0
    records: int = 0
    start: int = 0
    end: int = 0
    error: str | None = None
    _xids: list[str] = field(default_factory=list)
    _conn: asyncpg.Connection[asyncpg.Record] | None = None
    _task: asyncio.Task[None] | None = None

    async def begin(self) -> int:
        """Start reading from the server's flushed WAL position now; returns it. A
        temporary physical replication slot on this connection keeps the server from
        removing the segments not read yet (it goes when the connection does, however
        the bench ends); without one (no free slot), the reads alone may lose a race."""
        self._conn = await asyncpg.connect(self.url)
        with contextlib.suppress(asyncpg.PostgresError):
            await self._conn.execute(
                "SELECT pg_create_physical_replication_slot("
                "'composer_bench_' || pg_backend_pid(), true, true)"
            )
        self.start = self.end = await self._flushed()
        self._task = asyncio.create_task(self._follow(), name="bench-wal")
        return self.start

    async def finish(self) -> int:
        """Read up to the flushed position now and stop; returns that position."""
        assert self._conn is not None and self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        try:
            if self.error is None:
                await self._read_to(await self._flushed())
        finally:
            await self._conn.close()
        return self.end

    async def _flushed(self) -> int:
        assert self._conn is not None
        value = await self._conn.fetchval(
            "SELECT pg_wal_lsn_diff(pg_current_wal_flush_lsn(), '0/0')::bigint"
        )
        return int(value)

    async def _follow(self) -> None:
        while self.error is None:
            await asyncio.sleep(self.interval)
            await self._read_to(await self._flushed())

    async def _read_to(self, end: int) -> None:
        assert self._conn is not None
        if end <= self.end:
            return
        try:
            row = await self._conn.fetchrow(
                _OUR_WAL, self.end, end, f"%/{self.database_oid}/%", self._xids
            )
        except asyncpg.PostgresError as exc:
            self.error = str(exc)
            return
        assert row is not None
        self.bytes += int(row["bytes"])
        self.records += int(row["records"])
        self._xids = list(row["xids"])
        self.end = end


async def wal_database(admin_url: str, name: str, url: str) -> str | None:
    """Create database ``name`` (at ``url``) with pg_walinspect installed, for
    ``DatabaseWal``; returns why it could not be (no contrib, not a superuser), or None."""
    try:
        admin = await asyncpg.connect(admin_url)
        try:
            quoted = await admin.fetchval("SELECT quote_ident($1)", name)
            await admin.execute(f"CREATE DATABASE {quoted}")
        finally:
            await admin.close()
        conn = await asyncpg.connect(url)
        try:
            await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        finally:
            await conn.close()
    except (OSError, asyncpg.PostgresError) as exc:
        return f"pg_walinspect: {exc}"
    return None
