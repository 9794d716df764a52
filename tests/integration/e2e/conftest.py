"""An in-process Composer stack for end-to-end tests: real PostgreSQL, real Redis.

``stack`` runs the engine, the coordinator's gRPC server (on a free port),
the outbox-enqueuer loop and SDK workers in the test's event loop, on the
module's scratch database and a Redis key prefix of its own, and tears it
all down after the test (keys under the prefix deleted). ``open_stack`` can
also run the timer and the lease-sweeper loops (off by default).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import composer_queue
import composer_repo as repo
from composer_coordinator.server import start_server
from composer_engine import Engine, Workflows, validate_definition
from composer_engine.sealing import Sealer
from composer_executors import HttpPolicy, create_http_session
from composer_lease_sweeper.loop import Sweeper
from composer_outbox_enqueuer.loop import Enqueuer
from composer_sdk import Worker, WorkerConfig
from composer_service.telemetry import setup_telemetry
from composer_timer.loop import Timer
from composer_timer.schedules import ScheduleFirer
from composer_workers.handlers import http_handler, python_handler

TOKEN = "e2e-token"


_SPANS = InMemorySpanExporter()


@pytest.fixture(scope="session", autouse=True)
def telemetry() -> None:
    """Telemetry as a service sets it up, with spans kept in memory for the tests to read."""
    setup_telemetry("tests", span_exporters=[_SPANS])


@pytest.fixture
def spans() -> InMemorySpanExporter:
    """The spans finished during the test."""
    _SPANS.clear()
    return _SPANS


@dataclass
class Stack:
    engine: Engine
    pool: repo.Pool
    redis: composer_queue.RedisQueue
    redis_url: str
    prefix: str
    grpc_target: str
    enqueuer: Enqueuer
    #: ``redis_url`` is a node of a Redis Cluster (workers read it as one).
    redis_cluster: bool = False
    workers: list[Worker] = field(default_factory=list)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def deploy(self, definition: dict[str, Any]) -> int:
        """Validate and store a definition, deployed, as the API does; returns its version."""
        valid = validate_definition(definition)
        stored = await Workflows(self.pool).create(valid, deploy=True)
        return stored.version

    def worker(self, handlers: dict[str, Callable[..., Awaitable[Any]]], **config: Any) -> Worker:
        """Start an SDK worker serving ``handlers`` (queue → handler) for the rest of the test."""
        options: dict[str, Any] = {
            "lease_ttl": 5.0,
            "read_block_ms": 200,
            "drain_seconds": 2.0,
            "token": TOKEN,
            "coordinator": self.grpc_target,
        } | config
        worker = Worker(
            WorkerConfig(
                redis_url=self.redis_url,
                redis_cluster=self.redis_cluster,
                redis_prefix=self.prefix,
                **options,
            )
        )
        for queue, fn in handlers.items():
            worker.add_handler(queue, fn)
        self.workers.append(worker)
        self.tasks.append(asyncio.create_task(worker.run(), name=f"worker-{len(self.workers)}"))
        return worker

    async def builtin_workers(self) -> Worker:
        """The http and python queues, as services/workers serves them (private targets allowed)."""
        policy = HttpPolicy(allow_private=True)
        session = create_http_session(policy)
        self._closers.append(session.close)
        return self.worker(
            {"http": http_handler(session, policy), "python": python_handler(256 * 1024 * 1024)}
        )

    async def wait_run(self, run_id: str, timeout: float = 20.0) -> repo.RunRecord:
        """Poll until the run is terminal; fail the test with its state if it is not in time."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            async with repo.transaction(self.pool) as conn:
                run = await repo.get_run(conn, run_id)
            if run.status.is_terminal:
                return run
            if asyncio.get_running_loop().time() > deadline:
                tasks = await self.tasks_of(run_id)
                states = [(t.node_id, t.state.value, t.attempt) for t in tasks.values()]
                raise AssertionError(f"run {run_id} still {run.status} after {timeout}s: {states}")
            for task in self.tasks:
                if task.done() and not task.cancelled() and task.exception():
                    raise AssertionError(f"{task.get_name()} crashed") from task.exception()
            await asyncio.sleep(0.05)

    async def tasks_of(self, run_id: str) -> dict[str, repo.TaskRecord]:
        async with repo.transaction(self.pool) as conn:
            return {t.node_id: t for t in await repo.get_run_tasks(conn, run_id)}

    _closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    server: Any = None
    timer: Timer | None = None
    firer: ScheduleFirer | None = None
    sweeper: Sweeper | None = None


#: The sweeper in tests: frequent sweeps, and thresholds to match Stack.worker(lease_ttl=1.0).
TEST_SWEEPER: dict[str, Any] = {"interval_seconds": 0.2, "lease_ttl": 1.0, "lost_after": 1.0}


@asynccontextmanager
async def open_stack(
    database_url: str,
    redis_url: str,
    *,
    poll_seconds: float = 0.2,
    timer: bool = False,
    sweeper: bool | dict[str, Any] = False,
    sealer: Sealer | None = None,
    park_seconds: float = 300.0,
    cluster: bool = False,
) -> AsyncIterator[Stack]:
    """Run the stack in this event loop until the block ends (also used by the benchmarks).

    ``timer`` also runs the timer loop; ``sweeper`` the lease-sweeper (a dict overrides
    TEST_SWEEPER's settings; workers that should be recovered from need a lease TTL no
    longer than its ``lease_ttl``). ``sealer`` seals and opens payloads in the engine
    and the enqueuer (None: plain). ``cluster``: ``redis_url`` is a node of a Redis Cluster.
    """
    prefix = f"test-{uuid.uuid4().hex[:10]}"
    pool = await repo.create_pool(database_url, min_size=2, max_size=10)
    redis = composer_queue.connect(redis_url, cluster=cluster)
    engine = Engine(
        pool, redis=redis, redis_prefix=prefix, sealer=sealer, park_seconds=park_seconds
    )
    # every heartbeat written (a worker beats every WorkerConfig.presence_seconds)
    server, port = await start_server(
        engine, address="127.0.0.1:0", token=TOKEN, heartbeat_write_seconds=0.0
    )
    enqueuer = Enqueuer(
        engine,
        redis,
        prefix=prefix,
        poll_seconds=poll_seconds,
        webhook_backoff=0.2,
        http_policy=HttpPolicy(allow_private=True),
        sealer=sealer or Sealer(),
    )
    s = Stack(engine, pool, redis, redis_url, prefix, f"127.0.0.1:{port}", enqueuer, cluster)
    s.server = server
    s.tasks.append(asyncio.create_task(enqueuer.run(s.stop), name="enqueuer"))
    if timer:
        s.timer = Timer(engine, redis, prefix=prefix, poll_seconds=1.0)
        s.tasks.append(asyncio.create_task(s.timer.run(s.stop), name="timer"))
        # the timer service's second loop, as services/timer runs it
        s.firer = ScheduleFirer(engine, redis, prefix=prefix, poll_seconds=1.0)
        s.tasks.append(asyncio.create_task(s.firer.run(s.stop), name="schedule-firer"))
    if sweeper:
        options = TEST_SWEEPER | (sweeper if isinstance(sweeper, dict) else {})
        s.sweeper = Sweeper(engine, redis, prefix=prefix, **options)
        s.tasks.append(asyncio.create_task(s.sweeper.run(s.stop), name="sweeper"))
    try:
        yield s
    finally:
        s.stop.set()
        for worker in s.workers:
            worker.stop()
        _, pending = await asyncio.wait(s.tasks, timeout=10)
        for task in pending:
            task.cancel()
        for task in s.tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        # every closer runs whatever one before it raises (a cluster whose master a test
        # killed can refuse the drop): a client left open warns when it is collected,
        # in whichever test runs then
        async with contextlib.AsyncExitStack() as closing:
            closing.push_async_callback(pool.close)
            closing.push_async_callback(redis.close)
            closing.push_async_callback(redis.drop, prefix)
            closing.push_async_callback(engine.aclose)
            closing.push_async_callback(server.stop, 0)
            for close in reversed(s._closers):  # run in the order they were added
                closing.push_async_callback(close)


@pytest.fixture
async def stack(database_url: str, redis_url: str) -> AsyncIterator[Stack]:
    async with open_stack(database_url, redis_url) as s:
        yield s


async def eventually(
    condition: Callable[[], bool], timeout: float = 10.0, what: str = "condition"
) -> None:
    """Wait until ``condition()`` holds, failing the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not hold within {timeout}s")
        await asyncio.sleep(0.02)
