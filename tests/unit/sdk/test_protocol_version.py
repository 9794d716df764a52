"""The worker protocol's version check: an SDK asks the coordinator which versions it
speaks at start, and refuses one outside its own, naming both versions and what to
upgrade; features are names, and one the SDK does not know changes nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from composer_queue.testing import FakeQueue
from composer_rpc import protocol
from composer_rpc.v1 import worker_pb2 as pb
from composer_sdk import SdkError, TaskContext, Worker, WorkerConfig
from tests.unit.sdk.fakes import FakeStub, client
from tests.unit.sdk.test_worker import PREFIX, SHARDS, message, publish, until


async def echo(ctx: TaskContext, input: Any) -> dict[str, int]:
    return {"ok": 1}


def worker_on(stub: FakeStub, queue: FakeQueue) -> Worker:
    config = WorkerConfig(
        redis_prefix=PREFIX, shards=SHARDS, read_block_ms=20, drain_seconds=1.0, owner="w1"
    )
    worker = Worker(config, queue=queue, coordinator=client(stub))
    worker.add_handler("q", echo)
    return worker


def speaks(version: int, oldest: int, *features: str) -> pb.GetCapabilitiesResponse:
    return pb.GetCapabilitiesResponse(
        protocol_version=version, min_protocol_version=oldest, features=features
    )


async def test_the_worker_asks_at_start_and_serves_a_coordinator_of_its_version() -> None:
    # a feature name this SDK does not know (a newer coordinator's) is ignored
    stub = FakeStub(capabilities=[speaks(protocol.PROTOCOL_VERSION, 1, "batched_calls", "later")])
    queue = FakeQueue()
    worker = worker_on(stub, queue)
    task = asyncio.create_task(worker.run())
    await publish(queue, message("t1"))
    await until(lambda: worker.completed == 1, "the task completed")
    worker.stop()
    await asyncio.wait_for(task, 5)
    [asked] = stub.capability_requests
    assert asked.protocol_version == protocol.PROTOCOL_VERSION
    assert asked.sdk.startswith("composer-sdk ")


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        (
            speaks(protocol.PROTOCOL_VERSION - 1, 0),
            f"speaks worker protocol version {protocol.PROTOCOL_VERSION - 1}, older than this "
            f"SDK's (composer-sdk",
        ),
        (
            speaks(protocol.PROTOCOL_VERSION + 2, protocol.PROTOCOL_VERSION + 1),
            f"serves SDKs of protocol version {protocol.PROTOCOL_VERSION + 1} and newer",
        ),
        (grpc.StatusCode.UNIMPLEMENTED, "predates worker protocol versions"),
    ],
    ids=["engine-too-old", "engine-too-new", "engine-before-versions"],
)
async def test_a_coordinator_of_another_version_stops_the_worker_naming_both(
    answer: Any, says: str
) -> None:
    stub, queue = FakeStub(capabilities=[answer]), FakeQueue()
    worker = worker_on(stub, queue)
    await publish(queue, message("t1"))
    with pytest.raises(SdkError) as raised:
        await asyncio.wait_for(worker.run(), 5)
    assert says in str(raised.value)
    assert f"version {protocol.PROTOCOL_VERSION}" in str(raised.value)
    assert stub.lease_requests == []  # nothing was run against it


async def test_an_unreachable_coordinator_is_asked_again_until_it_answers() -> None:
    stub = FakeStub(
        capabilities=[grpc.StatusCode.UNAVAILABLE] * 5
        + [speaks(protocol.PROTOCOL_VERSION, protocol.MIN_PROTOCOL_VERSION)]
    )
    queue = FakeQueue()
    worker = worker_on(stub, queue)
    task = asyncio.create_task(worker.run())
    await publish(queue, message("t1"))
    await until(lambda: worker.completed == 1, "the task completed")
    worker.stop()
    await asyncio.wait_for(task, 5)
    assert len(stub.capability_requests) == 6


def test_the_version_range_check_names_both_versions() -> None:
    assert protocol.incompatible("sdk 1", 1, "c:1", 1, 1) is None
    assert protocol.incompatible("sdk 2", 2, "c:1", 3, 1) is None
    too_old = protocol.incompatible("sdk 2", 2, "c:1", 1, 1)
    assert too_old is not None and "version 1" in too_old and "version 2" in too_old
    assert "upgrade the coordinator" in too_old
    too_new = protocol.incompatible("sdk 1", 1, "c:1", 3, 2)
    assert too_new is not None and "upgrade the SDK" in too_new


@pytest.mark.parametrize(
    ("topology", "cluster", "says"),
    [
        ("cluster", False, "publishes tasks to a Redis Cluster, but this worker reads one server"),
        ("server", True, "publishes tasks to one Redis server, but this worker reads a cluster"),
    ],
)
async def test_a_worker_reading_redis_otherwise_than_the_coordinator_stops_naming_the_setting(
    topology: str, cluster: bool, says: str
) -> None:
    """A single-server client's reads span a cluster's slots, and a cluster client cannot
    start on one server: the coordinator says which it is, and the worker stops."""
    answer = pb.GetCapabilitiesResponse(
        protocol_version=protocol.PROTOCOL_VERSION,
        min_protocol_version=protocol.MIN_PROTOCOL_VERSION,
        redis_topology=topology,
    )
    stub, queue = FakeStub(capabilities=[answer]), FakeQueue()
    config = WorkerConfig(
        redis_prefix=PREFIX, shards=SHARDS, read_block_ms=20, redis_cluster=cluster
    )
    worker = Worker(config, queue=queue, coordinator=client(stub))
    worker.add_handler("q", echo)
    await publish(queue, message("t1"))
    with pytest.raises(SdkError) as raised:
        await asyncio.wait_for(worker.run(), 5)
    assert says in str(raised.value)
    assert f"COMPOSER_REDIS_CLUSTER={'true' if topology == 'cluster' else 'false'}" in str(
        raised.value
    )
    assert raised.value.code == "REDIS_CLUSTER"
    assert stub.lease_requests == []
