"""The versioned worker protocol against a real coordinator: GetCapabilities says
which versions it speaks and what it has, behind the worker token like every call;
a value of an enum it does not know (a newer SDK's) is read, not refused."""

from __future__ import annotations

import uuid

import grpc
import grpc.aio
import pytest

from composer_rpc import protocol
from composer_rpc.v1 import worker_pb2 as pb
from composer_rpc.v1.worker_pb2_grpc import WorkerServiceStub
from tests.integration.e2e.conftest import TOKEN, Stack
from tests.integration.e2e.test_presence import beat, recorded

AUTH = (("authorization", f"Bearer {TOKEN}"),)


async def test_the_coordinator_says_its_versions_and_features(stack: Stack) -> None:
    async with grpc.aio.insecure_channel(stack.grpc_target) as channel:
        answer = await WorkerServiceStub(channel).GetCapabilities(
            pb.GetCapabilitiesRequest(protocol_version=1, sdk="test"), metadata=AUTH
        )
    assert answer.protocol_version == protocol.PROTOCOL_VERSION
    assert answer.min_protocol_version == protocol.MIN_PROTOCOL_VERSION
    assert set(answer.features) >= {"batched_calls", "heartbeat", "lease_tokens", "task_logs"}
    assert answer.server_version


async def test_capabilities_need_the_worker_token(stack: Stack) -> None:
    async with grpc.aio.insecure_channel(stack.grpc_target) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await WorkerServiceStub(channel).GetCapabilities(pb.GetCapabilitiesRequest())
    assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED


async def test_a_worker_state_the_coordinator_does_not_know_reads_as_serving(
    stack: Stack,
) -> None:
    worker_id = f"w-{uuid.uuid4().hex[:8]}"
    newer = beat(worker_id, "q")
    newer.state = 7  # type: ignore[assignment]  # a value a newer SDK might send
    async with grpc.aio.insecure_channel(stack.grpc_target) as channel:
        answer = await WorkerServiceStub(channel).Heartbeat(newer, metadata=AUTH)
    assert answer.recorded
    row = await recorded(stack, worker_id)
    assert row is not None and row.state == "SERVING"
