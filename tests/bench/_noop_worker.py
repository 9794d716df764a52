"""A no-op SDK worker process for the stack benchmark.

``python -m tests.bench._noop_worker OUT QUEUE[,QUEUE…]`` with the COMPOSER_*
settings a worker reads (redis url and prefix, coordinator address, worker
token, concurrency). Every handler call appends ``task_id <tab> time.time()``
(the moment the handler starts) to OUT, flushed every 100 ms and at exit, so
the benchmark can measure the step gap: a task's report committed → the next
task's handler starting.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from typing import Any, TextIO

from composer_sdk import TaskContext, Worker, WorkerConfig
from composer_service.logs import setup_logging


async def serve(out: TextIO, queues: list[str]) -> None:
    env = os.environ
    worker = Worker(
        WorkerConfig(
            redis_url=env["COMPOSER_REDIS_URL"],
            coordinator=env["COMPOSER_GRPC_ADDR"],
            token=env["COMPOSER_WORKER_TOKEN"],
            redis_prefix=env["COMPOSER_REDIS_PREFIX"],
            concurrency=int(env.get("COMPOSER_CONCURRENCY", "64")),
            lease_ttl=30.0,
            read_block_ms=1000,
            drain_seconds=5.0,
        )
    )
    pending: list[str] = []

    async def noop(ctx: TaskContext, input: Any) -> dict[str, Any]:
        pending.append(f"{ctx.task_id}\t{time.time():.6f}\n")
        return {}

    for queue in queues:
        worker.add_handler(queue, noop)

    def flush() -> None:
        if pending:
            out.writelines(pending)
            pending.clear()
            out.flush()

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


def main() -> int:
    out_path, queues = sys.argv[1], sys.argv[2].split(",")
    setup_logging("bench-worker", os.environ.get("COMPOSER_LOG_LEVEL", "INFO"), json_lines=False)
    with open(out_path, "a", encoding="utf-8") as out:
        asyncio.run(serve(out, queues))
    return 0


if __name__ == "__main__":
    sys.exit(main())
