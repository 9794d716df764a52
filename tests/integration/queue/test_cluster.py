"""What a Redis Cluster asks of the queue beyond the contract (which runs on it too):
a queue's shards on several masters, one read over streams in different slots,
and hints over sharded pub/sub."""

from __future__ import annotations

import asyncio
import gc
import uuid
import warnings
from collections.abc import AsyncIterator

import pytest

import composer_queue as cq
from tests.integration.queue.test_contract import message
from tests.integration.redis_cluster import LocalCluster


@pytest.fixture
async def cluster(redis_cluster_url: str) -> AsyncIterator[cq.ClusterQueue]:
    client = cq.connect(redis_cluster_url, cluster=True)
    assert isinstance(client, cq.ClusterQueue)
    yield client
    await client.close()


@pytest.fixture
async def prefix(cluster: cq.ClusterQueue) -> AsyncIterator[str]:
    name = f"cluster-{uuid.uuid4().hex[:10]}"
    yield name
    await cluster.drop(name)


async def test_a_queues_shards_spread_over_the_masters(cluster: cq.ClusterQueue) -> None:
    # the default prefix and shard count, as a deployment has them
    names = cq.queue_streams("composer", "payments", cq.DEFAULT_SHARDS)
    masters = {await cluster.master_of(name) for name in names}
    assert len(masters) > 1, f"every shard of the queue is on {masters}"


async def test_one_read_takes_entries_from_streams_on_every_master(
    cluster: cq.ClusterQueue, prefix: str
) -> None:
    # eight shards of a queue, the first three on the three masters (which shard lands
    # where depends on the random prefix)
    shards = cq.queue_streams(prefix, "q", 64)
    first_on: dict[str, str] = {}
    for name in shards:
        first_on.setdefault(await cluster.master_of(name), name)
    assert len(first_on) == 3
    names = [*first_on.values(), *[n for n in shards if n not in first_on.values()][:5]]
    await cluster.ensure_groups(names)
    await cluster.publish([(n, message(f"t{i}")) for i, n in enumerate(names)])

    got = await cluster.read(names, "w", count=5, block_ms=0)
    rest = await cluster.read(names, "w", count=10, block_ms=0)

    assert [e.message().task_id for e in got] == ["t0", "t1", "t2", "t3", "t4"]
    assert [e.message().task_id for e in rest] == ["t5", "t6", "t7"]


async def test_a_blocked_read_answers_with_the_first_entry_and_loses_none(
    cluster: cq.ClusterQueue, prefix: str
) -> None:
    """Each stream is waited on by a read of its own; the first answer releases the
    others (CLIENT UNBLOCK), and what they were served meanwhile is not lost."""
    names = cq.queue_streams(prefix, "q", 4)
    await cluster.ensure_groups(names)
    loop = asyncio.get_running_loop()
    started = loop.time()
    reader = asyncio.create_task(cluster.read(names, "w", count=1, block_ms=20_000))
    await asyncio.sleep(0.1)  # let the reads block (when they have not yet, the test still holds)
    await cluster.publish([(names[2], message("late"))])
    [entry] = await asyncio.wait_for(reader, 5)
    assert entry.message().task_id == "late"
    assert loop.time() - started < 5  # the other streams' reads did not wait out their BLOCK

    # entries reaching two streams at once: one is taken, the other given back (uncounted)
    reader = asyncio.create_task(cluster.read(names, "w", count=1, block_ms=20_000))
    await asyncio.sleep(0.1)
    await cluster.publish([(names[0], message("a")), (names[3], message("b"))])
    first = await asyncio.wait_for(reader, 5)
    second = await cluster.read(names, "w", count=5, block_ms=1000)
    assert sorted(e.message().task_id for e in first + second) == ["a", "b"]
    assert all(e.deliveries == 1 for e in first + second)
    for name in names:
        backlog = await cluster.backlog(name)
        assert backlog is not None
        assert backlog.lag == 0


async def test_hints_go_over_sharded_pubsub_on_several_masters(
    cluster: cq.ClusterQueue, prefix: str
) -> None:
    loops = [cq.TIMER, cq.ENQUEUER, cq.RUN_FINISHED, *"abcdefghijkl"]
    channels = [cq.channel(prefix, loop) for loop in loops]
    assert len({await cluster.master_of(c) for c in channels}) > 1
    got: set[tuple[str, str]] = set()
    done = asyncio.Event()

    def on_message(chan: str, text: str) -> None:
        got.add((chan, text))
        if len(got) == len(channels):
            done.set()

    async with cq.Subscriber(cluster, channels, on_message) as subscriber:
        await asyncio.wait_for(subscriber.subscribed.wait(), 5)
        assert [await cluster.subscribers(c) for c in channels] == [1] * len(channels)
        for loop in loops:
            await cq.send_hint(cluster, prefix, loop, f"m-{loop}")
        await asyncio.wait_for(done.wait(), 5)
    assert got == {(cq.channel(prefix, loop), f"m-{loop}") for loop in loops}


async def test_a_url_may_name_several_nodes_and_any_one_answering_will_do(
    redis_cluster_url: str,
) -> None:
    """A worker that starts while the node its URL names first is down still finds the
    cluster through the others."""
    node = redis_cluster_url.removeprefix("redis://").removesuffix("/0")
    client = cq.connect(f"redis://127.0.0.1:1,{node}/0", cluster=True)
    try:
        await client.ping()
        assert await client.streams("nothing-here") == []
    finally:
        await client.close()
    with pytest.raises(ValueError, match="'nohost' in the Redis URL is not host:port"):
        cq.connect(f"redis://{node},nohost/0", cluster=True)


async def test_a_client_starting_while_a_master_is_down_works_with_the_others(
    redis_cluster: LocalCluster, prefix: str
) -> None:
    """redis-py reads the command table from the first master whenever it learns the
    slots: while that one is down, a client starting then must still serve the streams
    on the other masters (composer_queue asks them instead)."""
    probe = cq.connect(redis_cluster.url, cluster=True)
    assert isinstance(probe, cq.ClusterQueue)
    names = cq.queue_streams(prefix, "q", 16)
    try:
        masters = {n: await probe.master_of(n) for n in names}
    finally:
        await probe.close()
    first = min(masters.values(), key=lambda m: int(m.rpartition(":")[2]))
    alive = [n for n in names if masters[n] != first]
    redis_cluster.kill(int(first.rpartition(":")[2]))
    try:
        client = cq.connect(redis_cluster.every_node_url, cluster=True)
        try:
            await client.ensure_groups(names)  # the dead master's streams are left out
            await client.publish([(alive[0], message("t"))])
            [entry] = await client.read(names, "w", count=5, block_ms=1000)
            assert entry.message().task_id == "t"
            assert entry.stream == alive[0]
        finally:
            await client.close()
    finally:
        redis_cluster.restart(int(first.rpartition(":")[2]))


async def test_a_client_closed_after_a_master_died_leaves_no_socket_behind(
    redis_cluster: LocalCluster, prefix: str
) -> None:
    """redis-py's cluster client, once a node failed, waits to re-learn the slots and
    its own close does nothing meanwhile: the sockets to the live nodes would stay open
    until the garbage collector found them (a ResourceWarning in whatever runs then)."""
    client = cq.connect(redis_cluster.every_node_url, cluster=True)
    assert isinstance(client, cq.ClusterQueue)
    names = cq.queue_streams(prefix, "q", 16)
    masters = {n: await client.master_of(n) for n in names}
    await client.ensure_groups(names)  # a connection to every master
    port = int(masters[names[0]].rpartition(":")[2])
    redis_cluster.kill(port)
    try:
        with pytest.raises(cq.QueueUnavailable):
            await client.length(names[0])
        await client.close()
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            del client
            gc.collect()
        assert [str(w.message) for w in said if issubclass(w.category, ResourceWarning)] == []
    finally:
        redis_cluster.restart(port)
