"""An SDK worker process for the recovery tests: it serves one queue with a handler
that says on stdout which attempt it started, then hangs until the test kills it.

    python hanging_worker.py REDIS_URL PREFIX COORDINATOR TOKEN QUEUE LEASE_TTL
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from composer_sdk import TaskContext, Worker, WorkerConfig


async def main(
    redis_url: str, prefix: str, coordinator: str, token: str, queue: str, ttl: str
) -> None:
    worker = Worker(
        WorkerConfig(
            redis_url=redis_url,
            coordinator=coordinator,
            token=token,
            redis_prefix=prefix,
            lease_ttl=float(ttl),
            read_block_ms=200,
        )
    )

    async def hang(ctx: TaskContext, input: Any) -> dict[str, Any]:
        print(f"started {ctx.task_id} {ctx.attempt}", flush=True)
        await asyncio.sleep(3600)
        return {}

    worker.add_handler(queue, hang)
    worker.install_signal_handlers()
    await worker.run()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:7]))
