"""A no-op SDK worker process for the stack benchmark.

``python -m tests.bench._noop_worker OUT QUEUE[,QUEUE…]`` with the COMPOSER_*
settings a worker reads (redis url and prefix, coordinator address, worker
token, concurrency). It appends to OUT, flushed every 100 ms and at exit:

- ``S <tab> task_id <tab> time.time()`` when a handler starts;
- ``A <tab> task_id <tab> time.time()`` when the answer to that task's
  ReportTaskResult (or batched ReportTaskResults) call arrives (the report's transaction has committed by then).

so the benchmark can measure the step gap (a task's report → the next task's
handler starting). The worker's gRPC channel carries an interceptor that counts
every call it makes to the coordinator (retries included) and every answer it
gets; the counts are rewritten to ``OUT.rpc.json`` at each flush:
``{"requests": {method: n}, "responses": {method: n}}``, method as in
``AcquireTaskLease``. The worker's only RPCs are unary: one request message and,
unless the call fails, one response message each.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TextIO

import grpc.aio
import uvloop

from composer_rpc.v1.worker_pb2_grpc import WorkerServiceStub
from composer_sdk import TaskContext, Worker, WorkerConfig

# The SDK's own client, given a stub on our channel (the parameter its tests use).
from composer_sdk._client import Coordinator, CoordinatorClient
from composer_sdk._routing import RunRoutedCoordinators, parse_coordinators
from composer_service import ServiceSettings
from composer_service.logs import setup_logging


class Counting(grpc.aio.UnaryUnaryClientInterceptor):
    """Counts requests and answers by method; notes when a report's answer arrives."""

    def __init__(self, acked: Callable[[str, float], None]) -> None:
        self.requests: Counter[str] = Counter()
        self.responses: Counter[str] = Counter()
        self._acked = acked

    async def intercept_unary_unary(
        self,
        continuation: Callable[[Any, Any], Awaitable[Any]],
        client_call_details: Any,
        request: Any,
    ) -> Any:
        method = client_call_details.method
        if isinstance(method, bytes):
            method = method.decode()
        name = str(method).rsplit("/", 1)[-1]
        self.requests[name] += 1
        call = await continuation(client_call_details, request)
        try:
            await call  # the answer (awaiting the call again later gives it again)
        except grpc.aio.AioRpcError:
            return call  # the caller gets the same error when it awaits the call
        self.responses[name] += 1
        if name == "ReportTaskResult":
            self._acked(request.task_id, time.time())
        elif name == "ReportTaskResults":  # the SDK's batched call: each item's answer
            now = time.time()
            for item in request.items:
                self._acked(item.task_id, now)
        return call


async def serve(out: TextIO, rpc_path: Path, queues: list[str]) -> None:
    env = os.environ
    pending: list[str] = []

    def acked(task_id: str, at: float) -> None:
        pending.append(f"A\t{task_id}\t{at:.6f}\n")

    counting = Counting(acked)
    config = WorkerConfig(
        redis_url=env["COMPOSER_REDIS_URL"],
        coordinator=env["COMPOSER_GRPC_ADDR"],
        coordinators=env.get("COMPOSER_COORDINATORS", ""),
        token=env["COMPOSER_WORKER_TOKEN"],
        redis_prefix=env["COMPOSER_REDIS_PREFIX"],
        concurrency=int(env.get("COMPOSER_CONCURRENCY", "64")),
        lease_ttl=30.0,
        read_block_ms=1000,
        drain_seconds=5.0,
    )

    channels: list[grpc.aio.Channel] = []

    def counted(target: str) -> CoordinatorClient:
        channel = grpc.aio.insecure_channel(target, interceptors=[counting])
        channels.append(channel)
        return CoordinatorClient(
            target,
            config.token,
            attempts=config.coordinator_attempts,
            stub=WorkerServiceStub(channel),
        )

    # as the SDK builds it (WorkerConfig.coordinators), with the calls counted
    client: Coordinator = (
        RunRoutedCoordinators([counted(t) for t in parse_coordinators(config.coordinators)])
        if config.coordinators
        else counted(config.coordinator)
    )
    worker = Worker(config, coordinator=client)

    async def noop(ctx: TaskContext, input: Any) -> dict[str, Any]:
        pending.append(f"S\t{ctx.task_id}\t{time.time():.6f}\n")
        return {}

    for queue in queues:
        worker.add_handler(queue, noop)

    written: tuple[int, int] = (0, 0)

    def flush() -> None:
        nonlocal written
        if pending:
            out.writelines(pending)
            pending.clear()
            out.flush()
        totals = (counting.requests.total(), counting.responses.total())
        if totals != written:
            tmp = rpc_path.with_suffix(".tmp")
            tmp.write_text(
                json.dumps({"requests": counting.requests, "responses": counting.responses})
            )
            tmp.replace(rpc_path)
            written = totals

    async def flusher() -> None:
        while True:
            await asyncio.sleep(0.1)
            flush()

    flushing = asyncio.create_task(flusher(), name="flush-records")
    worker.install_signal_handlers()
    try:
        await worker.run()
    finally:
        flushing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await flushing
        flush()
        for channel in channels:
            await channel.close()


def main() -> int:
    out_path, queues = sys.argv[1], sys.argv[2].split(",")
    setup_logging("bench-worker", os.environ.get("COMPOSER_LOG_LEVEL", "INFO"), json_lines=False)
    # the event loop the services run on (COMPOSER_UVLOOP, as composer_service.run reads it)
    loop_factory = uvloop.new_event_loop if ServiceSettings().uvloop else None
    with (
        open(out_path, "a", encoding="utf-8") as out,
        asyncio.Runner(loop_factory=loop_factory) as runner,
    ):
        runner.run(serve(out, Path(out_path + ".rpc.json"), queues))
    return 0


if __name__ == "__main__":
    sys.exit(main())
