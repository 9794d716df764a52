"""The worker's heartbeats to the coordinator: who it is, what it serves, how busy,
and a last one when it stops; none to a coordinator that keeps none."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from composer_queue.testing import FakeQueue
from composer_rpc.v1 import worker_pb2 as pb
from composer_sdk import TaskContext, Worker, WorkerConfig
from tests.unit.sdk.fakes import FakeStub, client
from tests.unit.sdk.test_worker import PREFIX, SHARDS, message, publish, until


def worker_on(stub: FakeStub, queue: FakeQueue, **config: Any) -> Worker:
    options: dict[str, Any] = {
        "redis_prefix": PREFIX,
        "shards": SHARDS,
        "read_block_ms": 20,
        "drain_seconds": 1.0,
        "owner": "w1",
        "concurrency": 4,
        "presence_seconds": 0.01,
    } | config
    return Worker(WorkerConfig(**options), queue=queue, coordinator=client(stub))


async def test_beats_say_what_the_worker_serves_how_busy_and_that_it_stopped() -> None:
    queue, stub = FakeQueue(), FakeStub()
    release = asyncio.Event()

    async def hold(ctx: TaskContext, input: Any) -> None:
        await release.wait()

    worker = worker_on(stub, queue)
    worker.add_handler("q", hold)
    task = asyncio.create_task(worker.run())
    await until(lambda: len(stub.heartbeats) > 0, "a first beat")
    first = stub.heartbeats[0]
    assert (first.worker_id, list(first.queues), first.concurrency) == ("w1", ["q"], 4)
    assert first.state == pb.WORKER_STATE_SERVING and first.in_flight == 0
    assert first.host and first.sdk_version and first.started_at > 0

    await publish(queue, message("t1"))
    await until(lambda: stub.heartbeats[-1].in_flight == 1, "a beat with the task held")
    release.set()
    await until(lambda: worker.completed == 1, "the task completed")
    await until(lambda: stub.heartbeats[-1].in_flight == 0, "a beat with nothing held")

    worker.stop()
    await asyncio.wait_for(task, 5)
    assert stub.heartbeats[-1].state == pb.WORKER_STATE_STOPPED
    assert [b.state for b in stub.heartbeats].count(pb.WORKER_STATE_STOPPED) == 1


async def test_a_coordinator_without_heartbeats_gets_one_try_and_the_worker_serves_on() -> None:
    queue, stub = FakeQueue(), FakeStub(heartbeat_answer=grpc.StatusCode.UNIMPLEMENTED)

    async def echo(ctx: TaskContext, input: Any) -> dict[str, int]:
        return {"ok": 1}

    worker = worker_on(stub, queue)
    worker.add_handler("q", echo)
    task = asyncio.create_task(worker.run())
    await publish(queue, message("t1"))
    await until(lambda: worker.completed == 1, "the task completed")
    worker.stop()
    await asyncio.wait_for(task, 5)
    # the first beat was answered UNIMPLEMENTED: no more, not even the STOPPED one
    [beat] = stub.heartbeats
    assert beat.state == pb.WORKER_STATE_SERVING


async def test_presence_seconds_zero_sends_no_beat() -> None:
    queue, stub = FakeQueue(), FakeStub()

    async def echo(ctx: TaskContext, input: Any) -> dict[str, int]:
        return {"ok": 1}

    worker = worker_on(stub, queue, presence_seconds=0)
    worker.add_handler("q", echo)
    task = asyncio.create_task(worker.run())
    await publish(queue, message("t1"))
    await until(lambda: worker.completed == 1, "the task completed")
    worker.stop()
    await asyncio.wait_for(task, 5)
    assert stub.heartbeats == []
