"""The coordinator's side of heartbeats: what a beat records (only the queues its token
covers), what it refuses, and at most one write per worker per ``write_every``."""

from __future__ import annotations

import datetime as dt
import uuid

import grpc
import grpc.aio
import pytest

import composer_repo as repo
from composer_coordinator.presence import Presence
from composer_coordinator.server import start_server
from composer_rpc.v1 import worker_pb2 as pb
from composer_rpc.v1.worker_pb2_grpc import WorkerServiceStub
from tests.integration.e2e.conftest import TOKEN, Stack

#: A worker token that covers the queue "team-a" only.
TEAM_A = "team-a-presence-token"
STARTED = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)


def beat(
    worker_id: str, *queues: str, state: pb.WorkerState.ValueType = pb.WORKER_STATE_SERVING
) -> pb.HeartbeatRequest:
    return pb.HeartbeatRequest(
        worker_id=worker_id,
        host="h",
        queues=list(queues),
        concurrency=4,
        in_flight=1,
        sdk_version="test",
        state=state,
        started_at=1.7e9,
    )


async def recorded(stack: Stack, worker_id: str) -> repo.WorkerRecord | None:
    async with repo.transaction(stack.pool) as conn:
        return {w.worker_id: w for w in await repo.list_workers(conn)}.get(worker_id)


async def test_a_beat_records_only_the_queues_its_token_covers(stack: Stack) -> None:
    server, port = await start_server(
        stack.engine, address="127.0.0.1:0", tokens=f"{TOKEN}:*,{TEAM_A}:team-a"
    )
    worker_id = f"w-{uuid.uuid4().hex[:8]}"
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            answer = await WorkerServiceStub(channel).Heartbeat(
                beat(worker_id, "team-a", "team-b"),
                metadata=(("authorization", f"Bearer {TEAM_A}"),),
            )
    finally:
        await server.stop(0)
    assert answer.recorded
    row = await recorded(stack, worker_id)
    assert row is not None and row.queues == ("team-a",)
    assert (row.concurrency, row.in_flight, row.state) == (4, 1, "SERVING")


async def test_a_beat_without_a_worker_id_or_state_is_refused(stack: Stack) -> None:
    async with grpc.aio.insecure_channel(stack.grpc_target) as channel:
        stub = WorkerServiceStub(channel)
        auth = (("authorization", f"Bearer {TOKEN}"),)
        for bad, names in (
            (beat("", "q"), "worker_id"),
            (beat("w", "q", state=pb.WORKER_STATE_UNSPECIFIED), "state"),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.Heartbeat(bad, metadata=auth)
            assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert names in (refused.value.details() or "")


async def test_a_worker_is_written_at_most_every_write_every_unless_it_stops(
    stack: Stack,
) -> None:
    now = [100.0]
    presence = Presence(stack.engine, write_every=5.0, clock=lambda: now[0])
    worker_id = f"w-{uuid.uuid4().hex[:8]}"

    def serving(in_flight: int) -> repo.WorkerBeat:
        return repo.WorkerBeat(worker_id, "h", ("q",), 4, in_flight, "test", "SERVING", STARTED)

    assert await presence.record(serving(1))
    now[0] += 1.0
    assert not await presence.record(serving(2))  # too soon: dropped
    row = await recorded(stack, worker_id)
    assert row is not None and row.in_flight == 1
    now[0] += 5.0
    assert await presence.record(serving(3))
    now[0] += 0.1
    stopped = repo.WorkerBeat(worker_id, "h", ("q",), 4, 0, "test", "STOPPED", STARTED)
    assert await presence.record(stopped)  # a change of state is never held back

    row = await recorded(stack, worker_id)
    assert row is not None and row.state == "STOPPED" and row.stopped_at is not None


async def test_writing_a_beat_now_and_then_forgets_workers_unseen_for_a_day(
    stack: Stack,
) -> None:
    old, new = f"w-{uuid.uuid4().hex[:8]}", f"w-{uuid.uuid4().hex[:8]}"
    async with repo.transaction(stack.pool) as conn:
        await repo.record_worker_heartbeat(
            conn, repo.WorkerBeat(old, "h", ("q",), 1, 0, "test", "SERVING", STARTED)
        )
        await conn.execute(
            "UPDATE workers SET last_seen_at = now() - interval '25 hours' WHERE id = $1", old
        )
    presence = Presence(stack.engine)

    assert await presence.record(
        repo.WorkerBeat(new, "h", ("q",), 1, 0, "test", "SERVING", STARTED)
    )

    assert await recorded(stack, old) is None
    assert await recorded(stack, new) is not None
