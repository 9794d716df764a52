"""Issue 30, item 2: `make run REPLICAS="…"` / `composer up --replicas` runs two of a
service, and both serve.

A stack with two coordinators, two built-in workers and two api-gateways: every
replica answers on its own admin port and logs under its own name; a beat sent
to each coordinator is recorded, and read back through the second gateway; a
run started through the first gateway finishes (the workers lease from either
coordinator) and its result comes from the second.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import aiohttp
import grpc.aio

from composer_rpc.v1.worker_pb2_grpc import WorkerServiceStub
from tests.integration.devstack.conftest import (
    SERVICES,
    free_port,
    free_range,
    ready,
    saved_tokens,
    stack_environ,
    start_stack,
)
from tests.integration.devstack.test_stack_life import run_hello, wait_for
from tests.integration.e2e.test_presence import beat


async def test_two_of_a_service_both_serve(
    database_url: str, redis_url: str, tmp_path: Path
) -> None:
    api_port, admin_base = free_port(), free_range(len(SERVICES))
    grpc_addr = f"127.0.0.1:{free_port()}"
    env = stack_environ(
        database_url,
        redis_url,
        COMPOSER_REDIS_PREFIX=f"replicas-{uuid.uuid4().hex[:8]}",
        COMPOSER_API_PORT=str(api_port),
        COMPOSER_GRPC_ADDR=grpc_addr,
    )
    admin_ports = list(range(admin_base, admin_base + len(SERVICES)))
    stack = await start_stack(
        env,
        tmp_path,
        api_port,
        admin_ports,
        "--admin-base",
        str(admin_base),
        "--replicas",
        "coordinator=2 workers=2,api-gateway=2",
    )
    try:
        await wait_for(
            lambda: "replicas  " in stack.text or stack.process.returncode is not None,
            "the banner's replicas line",
            60,
        )
        lines = [x for x in stack.output if "replicas  " in x]
        assert lines, stack.text[-3000:]
        line = lines[0]
        extra = dict(re.findall(r"(\S+-2) ([^;]+)", line))
        assert set(extra) == {"coordinator-2", "workers-2", "api-gateway-2"}, line
        second_api = re.search(r"API (http://\S+),", extra["api-gateway-2"])
        second_grpc = re.search(r"gRPC (\S+),", extra["coordinator-2"])
        assert second_api and second_grpc, line
        assert second_api[1] != stack.api and second_grpc[1] != grpc_addr
        extra_admin = [int(re.findall(r"admin (\d+)", v)[0]) for v in extra.values()]
        assert not set(extra_admin) & set(admin_ports)

        async with aiohttp.ClientSession() as session:
            for port in [*admin_ports, *extra_admin]:
                await ready(session, f"http://127.0.0.1:{port}/readyz", timeout=90)
            for api in (stack.api, second_api[1]):
                await ready(session, f"{api}/healthz")

            # each coordinator records a beat; the second gateway reads both
            token = saved_tokens(tmp_path)["COMPOSER_WORKER_TOKEN"]
            beaten = []
            for addr in (grpc_addr, second_grpc[1]):
                worker_id = f"beat-via-{addr}"
                async with grpc.aio.insecure_channel(addr) as channel:
                    answer = await WorkerServiceStub(channel).Heartbeat(
                        beat(worker_id, "replicas"),
                        metadata=(("authorization", f"Bearer {token}"),),
                    )
                assert answer.recorded, addr
                beaten.append(worker_id)
            auth = {"Authorization": f"Bearer {saved_tokens(tmp_path)['COMPOSER_API_TOKEN']}"}
            async with session.get(f"{second_api[1]}/v1/workers", headers=auth) as r:
                assert r.status == 200, await r.text()
                listed = {w["worker_id"] for w in (await r.json())["workers"]}
            assert set(beaten) <= listed, listed

            # a run started on the first gateway, its result from the second
            result = await run_hello(session, stack, 21, result_api=second_api[1])
            assert result["status"] == "SUCCEEDED", result
            assert result["output"] == {"n": 42}, result
    finally:
        await stack.stop()
    output = stack.text
    for name in ("coordinator-1", "coordinator-2", "workers-1", "workers-2", "api-gateway-2"):
        assert re.search(rf"^{name}\s+\|", output, re.M), f"no line from {name}"
    assert "restarting" not in output, output[-3000:]
