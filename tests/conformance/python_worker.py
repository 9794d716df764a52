"""The conformance worker for the Python SDK: one queue, served by a handler whose
input says what to do (``{"do": ...}``): the same behaviours, on the same inputs, as
sdks/typescript/conformance/worker.ts, so the scenarios in test_sdks.py run
unchanged against either SDK.

Configured by the environment (tests/conformance/conftest.py sets it): COMPOSER_GRPC_ADDR,
COMPOSER_REDIS_URL, COMPOSER_REDIS_PREFIX, COMPOSER_WORKER_TOKEN, COMPOSER_GRPC_TLS_CA, CONFORMANCE_QUEUE,
CONFORMANCE_LEASE_TTL, and COMPOSER_WORKER_TAKE_NEXT (the SDK's own default). It says on stdout, one line each, ``started <task> <attempt>``
when a handler starts and ``aborted <task> <attempt>`` when one is stopped unfinished.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from composer_sdk import PermanentError, TaskContext, Worker, WorkerConfig


def say(line: str) -> None:
    print(line, flush=True)


async def conform(ctx: TaskContext, input: dict[str, Any]) -> Any:
    say(f"started {ctx.task_id} {ctx.attempt}")
    try:
        return await behave(ctx, input)
    except asyncio.CancelledError:
        say(f"aborted {ctx.task_id} {ctx.attempt}")
        raise


async def behave(ctx: TaskContext, input: dict[str, Any]) -> Any:
    do = input.get("do")
    if do == "echo":
        caller = ctx.caller
        return {
            "input": input,
            "attempt": ctx.attempt,
            "idempotency_key": ctx.idempotency_key,
            "caller": None
            if caller is None
            else {"name": caller.name, "role": caller.role, "metadata": dict(caller.metadata)},
        }
    if do == "fail_until":
        if ctx.attempt < input["attempt"]:
            raise RuntimeError(f"attempt {ctx.attempt} fails on purpose")
        return {"attempt": ctx.attempt}
    if do == "permanent":
        raise PermanentError(input["message"], code=input["code"])
    if do == "sleep":
        await asyncio.sleep(input["seconds"])
        return {"slept": input["seconds"]}
    if do == "hang_first":
        ctx.logger.info("attempt %d", ctx.attempt)  # kept only if the attempt reports
        if ctx.attempt == 0:
            await asyncio.sleep(3600)
        return {"attempt": ctx.attempt}
    if do == "big":
        return {"data": "x" * input["bytes"]}
    if do == "log":
        for i in range(input["lines"]):
            ctx.logger.info("line %d of %d", i + 1, input["lines"])
        ctx.logger.warning("done")
        return {"logged": input["lines"]}
    raise PermanentError(f"unknown behaviour {do!r}", code="bad_behaviour")


async def main() -> None:
    logging.basicConfig(level=logging.INFO)
    env = os.environ
    worker = Worker(
        WorkerConfig(
            redis_url=env["COMPOSER_REDIS_URL"],
            coordinator=env["COMPOSER_GRPC_ADDR"],
            coordinators=env.get("COMPOSER_COORDINATORS", ""),
            token=env["COMPOSER_WORKER_TOKEN"],
            redis_prefix=env["COMPOSER_REDIS_PREFIX"],
            coordinator_tls_ca=env.get("COMPOSER_GRPC_TLS_CA") or None,
            lease_ttl=float(env.get("CONFORMANCE_LEASE_TTL", "5")),
            read_block_ms=200,
            drain_seconds=float(env.get("CONFORMANCE_DRAIN_SECONDS", "10")),
            presence_seconds=1.0,
        )
    )
    worker.add_handler(env["CONFORMANCE_QUEUE"], conform)
    worker.install_signal_handlers()
    await worker.run()


if __name__ == "__main__":
    asyncio.run(main())
