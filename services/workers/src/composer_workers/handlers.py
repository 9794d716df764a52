"""The built-in executors as SDK handlers: an executor's failure becomes the SDK's."""

from __future__ import annotations

from typing import Any

import aiohttp

from composer_executors import ExecutionError, HttpPolicy, run_http, run_python
from composer_sdk import PermanentError, TaskContext, TaskFailed

#: A node without timeout_seconds still gets one: the worker's default.
FALLBACK_TIMEOUT = 300.0


def _failure(exc: ExecutionError) -> TaskFailed:
    kind = PermanentError if exc.permanent else TaskFailed
    return kind(exc.message, code=exc.code)


def http_handler(session: aiohttp.ClientSession, policy: HttpPolicy) -> Any:
    """The ``http`` queue's handler. Each request carries the task's idempotency key
    (the same for every attempt of the node in its run) as ``Idempotency-Key``, unless
    the node sets that header itself: a retried attempt can be recognised by the
    server it calls again."""

    async def http(ctx: TaskContext, input: dict[str, Any]) -> dict[str, Any]:
        try:
            return await run_http(
                input,
                timeout=ctx.timeout or FALLBACK_TIMEOUT,
                session=session,
                policy=policy,
                idempotency_key=ctx.idempotency_key,
            )
        except ExecutionError as exc:
            raise _failure(exc) from exc

    return http


def python_handler(memory_limit_bytes: int) -> Any:
    async def python(ctx: TaskContext, input: dict[str, Any]) -> Any:
        try:
            return await run_python(
                input,
                timeout=ctx.timeout or FALLBACK_TIMEOUT,
                memory_limit_bytes=memory_limit_bytes,
            )
        except ExecutionError as exc:
            raise _failure(exc) from exc

    return python
