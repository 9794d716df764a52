"""Outages: the database or Redis away for a while costs time, never data."""

from __future__ import annotations

import asyncio
import socket

import grpc.aio
import pytest

import composer_queue as cq
import composer_repo as repo
from composer_coordinator.server import start_server
from composer_engine import Engine
from composer_outbox_enqueuer.loop import Enqueuer
from composer_rpc.v1 import worker_pb2 as pb
from composer_rpc.v1.worker_pb2_grpc import WorkerServiceStub
from tests.integration.e2e.conftest import TOKEN, Stack, eventually


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens once the socket is closed


async def test_coordinator_answers_unavailable_when_the_database_is_down() -> None:
    pool = await repo.create_pool(
        f"postgresql://postgres@127.0.0.1:{closed_port()}/none", min_size=0, max_size=2
    )
    engine = Engine(pool, attempts=2)
    server, port = await start_server(engine, address="127.0.0.1:0", token=TOKEN)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            with pytest.raises(grpc.aio.AioRpcError) as down:
                await WorkerServiceStub(channel).AcquireTaskLease(
                    pb.AcquireTaskLeaseRequest(
                        task_id="t", run_id="r", attempt=0, owner="o", ttl_seconds=5
                    ),
                    metadata=(("authorization", f"Bearer {TOKEN}"),),
                )
        assert down.value.code() is grpc.StatusCode.UNAVAILABLE
    finally:
        await server.stop(0)
        await pool.close()


async def test_engine_survives_its_connections_being_killed(stack: Stack) -> None:
    await stack.deploy(
        {"id": "tiny", "nodes": [{"id": "a", "type": "TASK", "queue": "q", "spec": {}}]}
    )
    async with repo.transaction(stack.pool) as conn:
        await conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    started = await stack.engine.start("tiny")  # the dead connections fail, the retry succeeds
    assert (await stack.tasks_of(started.run_id))["a"].queue == "q"


async def test_enqueuer_keeps_dispatches_while_redis_is_down(stack: Stack) -> None:
    await stack.deploy(
        {"id": "held", "nodes": [{"id": "a", "type": "TASK", "queue": "held", "spec": {}}]}
    )
    stack.stop.set()  # stop the stack's own enqueuer: this test drives one
    await asyncio.wait_for(asyncio.gather(*stack.tasks, return_exceptions=True), 10)
    broken = cq.connect(f"redis://127.0.0.1:{closed_port()}/0")
    # Redis is down when the start commits: its own publish fails, the outbox row stays.
    engine = Engine(stack.pool, redis=broken, redis_prefix=stack.prefix)
    started = await engine.start("held")
    enqueuer = Enqueuer(engine, broken, prefix=stack.prefix, grace=0, poll_seconds=0.1)
    stop = asyncio.Event()
    loop = asyncio.create_task(enqueuer.run(stop))
    try:
        await asyncio.sleep(0.5)  # it keeps failing and backing off meanwhile
        assert not loop.done()
        assert enqueuer.published == 0
        assert (await stack.tasks_of(started.run_id))["a"].state == "PENDING"  # the row is kept
        # Redis is back: the hints' client, and the one the engine's publisher uses
        enqueuer.redis = stack.redis
        publisher = engine._shell.publish
        assert publisher is not None
        publisher.queue = stack.redis
        await eventually(lambda: enqueuer.published == 1, what="the dispatch was published")
    finally:
        stop.set()
        await asyncio.wait_for(loop, 10)
        await broken.close()
    entries = await stack.redis.entries(
        cq.task_stream(
            stack.prefix,
            "held",
            (await stack.tasks_of(started.run_id))["a"].task_id,
            cq.DEFAULT_SHARDS,
        )
    )
    assert len(entries) == 1
    assert (await stack.tasks_of(started.run_id))["a"].state == "QUEUED"
