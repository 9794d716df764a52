"""The stack on a Redis Cluster (COMPOSER_REDIS_CLUSTER=true): runs go through it as
on one server, and a master killed with tasks in its streams loses none of them
(PostgreSQL holds the truth: the lease-sweeper sends what the master lost again).

The session's cluster has three masters and no replicas, so a dead master's slots
have nobody to serve them until it is back (the cluster says CLUSTERDOWN meanwhile:
every service backs off and polls); it comes back empty, as a master without
persistence does, and what its streams held is found missing and dispatched again.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

import composer_queue as cq
from composer_core.model import RunStatus
from composer_sdk import TaskContext
from tests.integration.e2e.conftest import Stack, open_stack
from tests.integration.redis_cluster import LocalCluster
from tests.integration.waits import until


@pytest.fixture
async def stack(database_url: str, redis_cluster: LocalCluster) -> AsyncIterator[Stack]:
    async with open_stack(
        database_url, redis_cluster.every_node_url, cluster=True, timer=True, sweeper=True
    ) as s:
        yield s


async def step(ctx: TaskContext, input: Any) -> dict[str, Any]:
    return {"node": ctx.node_id}


async def spread_queue(s: Stack, name: str) -> str:
    """A queue name whose shard streams are on more than one master (which master holds
    a stream depends on the stack's random prefix: the first of a few candidates does)."""
    assert isinstance(s.redis, cq.ClusterQueue)
    for n in range(20):
        queue = f"{name}-{n}"
        streams = cq.queue_streams(s.prefix, queue, cq.DEFAULT_SHARDS)
        if len({await s.redis.master_of(stream) for stream in streams}) > 1:
            return queue
    raise AssertionError(f"no queue {name}-N of {s.prefix} spreads over the masters")


async def test_runs_go_through_the_stack_on_a_cluster(stack: Stack) -> None:
    s = stack
    queue = await spread_queue(s, "clustered")
    fan = [f"f{i}" for i in range(8)]
    await s.deploy(
        {
            "id": "on-a-cluster",
            "nodes": [
                {"id": "start", "type": "TASK", "queue": queue, "spec": {}},
                *[{"id": f, "type": "TASK", "queue": queue, "spec": {}} for f in fan],
                {"id": "pause", "type": "WAIT", "spec": {"duration_seconds": 0.2}},
                {"id": "end", "type": "TASK", "queue": queue, "spec": {}},
            ],
            "edges": [
                *[{"from": "start", "to": f} for f in fan],
                *[{"from": f, "to": "pause"} for f in fan],
                {"from": "pause", "to": "end"},
            ],
        }
    )
    s.worker({queue: step})
    runs = [(await s.engine.start("on-a-cluster")).run_id for _ in range(5)]
    for run_id in runs:
        run = await s.wait_run(run_id, timeout=30)
        assert run.status is RunStatus.SUCCEEDED, run
        tasks = await s.tasks_of(run_id)
        assert set(tasks) == {"start", *fan, "pause", "end"}
    # its streams (every priority band of each shard: the worker waits on them all), on
    # several masters, are listed as the sweeper lists them
    assert sorted(await s.redis.streams(s.prefix)) == sorted(
        band for shard in cq.queue_streams(s.prefix, queue, 4) for _, band in cq.band_streams(shard)
    )


async def test_a_master_killed_with_tasks_in_its_stream_loses_none(
    stack: Stack, redis_cluster: LocalCluster
) -> None:
    s = stack
    assert isinstance(s.redis, cq.ClusterQueue)
    queue = await spread_queue(s, "held")
    await s.deploy(
        {
            "id": "killed-master",
            "nodes": [{"id": "only", "type": "TASK", "queue": queue, "spec": {}}],
        }
    )
    # No worker yet: every task waits in a stream (each start published before it
    # returned), the queue's shards spread over the masters.
    runs = [(await s.engine.start("killed-master")).run_id for _ in range(16)]
    streams = cq.queue_streams(s.prefix, queue, 4)
    lengths = {n: await s.redis.length(n) for n in streams}
    assert sum(lengths.values()) == len(runs)
    victim_stream = max(lengths, key=lambda n: lengths[n])
    victim = await s.redis.master_of(victim_stream)
    on_victim = {n for n in streams if await s.redis.master_of(n) == victim}
    elsewhere = [n for n in streams if n not in on_victim]
    assert elsewhere, "every shard is on one master"
    waiting_elsewhere = sum(lengths[n] for n in elsewhere)

    redis_cluster.kill(int(victim.rpartition(":")[2]))
    try:
        # While it is down the tasks in the other masters' streams are served...
        worker = s.worker({queue: step}, lease_ttl=1.0)

        async def others_done() -> bool:
            return worker.completed >= waiting_elsewhere

        await until(others_done, timeout=30, what="the tasks on the live masters done")
    finally:
        # ...and it comes back empty (no persistence): what it held is lost from Redis
        redis_cluster.restart(int(victim.rpartition(":")[2]))
    # the lease-sweeper finds those tasks QUEUED with no entry and sends them again
    for run_id in runs:
        run = await s.wait_run(run_id, timeout=60)
        assert run.status is RunStatus.SUCCEEDED, run
