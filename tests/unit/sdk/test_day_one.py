"""A worker as the README starts it (issue 31): its connection from the environment that
``make run``'s stack.env sets, one line at start saying what it serves and where, and
SIGTERM or Ctrl-C draining it to STOPPED without the program handling signals itself."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from typing import Any

import pytest

from composer_queue.testing import FakeQueue
from composer_rpc.v1 import worker_pb2 as pb
from composer_sdk import TaskContext, Worker, WorkerConfig
from tests.unit.sdk.fakes import FakeStub, client
from tests.unit.sdk.test_worker import PREFIX, SHARDS, message, publish, until

STACK_ENV = {
    "COMPOSER_GRPC_ADDR": "127.0.0.1:8401",
    "COMPOSER_REDIS_URL": "redis://:s3cret@127.0.0.1:6380/0",
    "COMPOSER_REDIS_PREFIX": "composer-8400",
    "COMPOSER_WORKER_TOKEN": "the-stacks-worker-token",
}


def test_the_connection_defaults_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in STACK_ENV.items():
        monkeypatch.setenv(name, value)
    config = WorkerConfig()
    assert (config.coordinator, config.redis_url, config.redis_prefix, config.token) == (
        "127.0.0.1:8401",
        "redis://:s3cret@127.0.0.1:6380/0",
        "composer-8400",
        "the-stacks-worker-token",
    )
    # what the program passes wins
    assert WorkerConfig(redis_prefix="mine", token="t").redis_prefix == "mine"


def test_without_the_environment_the_local_standard_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [*STACK_ENV, "COMPOSER_GRPC_TLS_CA"]:
        monkeypatch.delenv(name, raising=False)
    config = WorkerConfig()
    assert (config.coordinator, config.redis_url, config.redis_prefix, config.token) == (
        "127.0.0.1:50051",
        "redis://127.0.0.1:6379/0",
        "composer",
        "",
    )
    assert config.coordinator_tls_ca is None and config.handle_signals


async def echo(ctx: TaskContext, input: Any) -> dict[str, Any]:
    return {"ok": True}


def test_the_start_line_says_what_it_serves_and_where_without_the_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in STACK_ENV.items():
        monkeypatch.setenv(name, value)
    worker = Worker(WorkerConfig(owner="w1"))
    worker.add_handler("payments", echo)
    line = worker.describe()
    assert line.startswith("worker w1 serving payments from Redis ")
    assert "node types payments TASK;" in line
    assert "redis://:***@127.0.0.1:6380/0 prefix 'composer-8400'" in line
    assert "coordinator 127.0.0.1:8401 (plaintext)" in line
    assert "s3cret" not in line


async def test_sigterm_drains_the_task_it_runs_and_the_worker_says_stopped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    queue, stub = FakeQueue(), FakeStub()
    started, release = asyncio.Event(), asyncio.Event()

    async def slow(ctx: TaskContext, input: Any) -> dict[str, Any]:
        started.set()
        await release.wait()
        return {"ok": True}

    config = WorkerConfig(
        redis_prefix=PREFIX,
        shards=SHARDS,
        read_block_ms=20,
        drain_seconds=10.0,
        owner="w1",
        presence_seconds=0.01,
    )
    worker = Worker(config, queue=queue, coordinator=client(stub))
    worker.add_handler("q", slow)
    caplog.set_level(logging.INFO, logger="composer.sdk")
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    run = asyncio.create_task(worker.run())
    await publish(queue, message("t1"))
    await asyncio.wait_for(started.wait(), 5)
    # the worker took SIGTERM (the program installed no handler): not the default, which kills
    assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    os.kill(os.getpid(), signal.SIGTERM)
    await until(lambda: "SIGTERM: draining" in caplog.text, "the drain began")
    await until(lambda: stub.heartbeats[-1].state == pb.WORKER_STATE_DRAINING, "a DRAINING beat")
    assert not run.done()  # the task it holds still runs
    release.set()
    await asyncio.wait_for(run, 5)
    assert worker.completed == 1 and len(stub.report_requests) == 1  # finished, reported
    assert stub.heartbeats[-1].state == pb.WORKER_STATE_STOPPED
    # the signals are given back once it stops
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


async def test_a_second_signal_cancels_what_still_runs(caplog: pytest.LogCaptureFixture) -> None:
    queue, stub = FakeQueue(), FakeStub()
    started = asyncio.Event()

    async def forever(ctx: TaskContext, input: Any) -> None:
        started.set()
        await asyncio.Event().wait()

    config = WorkerConfig(
        redis_prefix=PREFIX, shards=SHARDS, read_block_ms=20, drain_seconds=60.0, owner="w1"
    )
    worker = Worker(config, queue=queue, coordinator=client(stub))
    worker.add_handler("q", forever)
    caplog.set_level(logging.INFO, logger="composer.sdk")
    run = asyncio.create_task(worker.run())
    await publish(queue, message("t1"))
    await asyncio.wait_for(started.wait(), 5)
    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C
    await until(lambda: "SIGINT: draining" in caplog.text, "the drain began")
    os.kill(os.getpid(), signal.SIGINT)
    await asyncio.wait_for(run, 5)  # long before drain_seconds
    assert "cancelling 1 in-flight task(s) now" in caplog.text
    assert stub.report_requests == []  # nothing reported: the sweeper recovers the attempt


async def test_a_program_that_handles_signals_keeps_them() -> None:
    queue, stub = FakeQueue(), FakeStub()
    loop = asyncio.get_running_loop()
    mine = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, mine.set)
    try:
        worker = Worker(
            WorkerConfig(redis_prefix=PREFIX, shards=SHARDS, read_block_ms=20, owner="w1"),
            queue=queue,
            coordinator=client(stub),
        )
        worker.add_handler("q", echo)
        run = asyncio.create_task(worker.run())
        await until(lambda: worker.started_at > 0, "the worker started")
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.wait_for(mine.wait(), 5)
        assert not run.done()  # the program's handler ran, not the worker's drain
        worker.stop()
        await asyncio.wait_for(run, 5)
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
