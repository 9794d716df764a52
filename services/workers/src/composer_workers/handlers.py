"""The built-in executors as SDK handlers: an executor's failure becomes the SDK's."""

from __future__ import annotations

from typing import Any

import aiohttp

from composer_executors import (
    ErrorCode,
    ExecutionError,
    HttpPolicy,
    Sandbox,
    SecretSource,
    run_http,
    run_python,
)
from composer_sdk import PermanentError, TaskContext, TaskFailed, TaskLogger

#: A node without timeout_seconds still gets one: the worker's default.
FALLBACK_TIMEOUT = 300.0


def _failure(exc: ExecutionError) -> TaskFailed:
    kind = PermanentError if exc.permanent else TaskFailed
    return kind(exc.message, code=exc.code)


def http_handler(
    session: aiohttp.ClientSession, policy: HttpPolicy, secrets: SecretSource | None = None
) -> Any:
    """The ``http`` queue's handler. Each request carries the task's idempotency key
    (the same for every attempt of the node in its run) as ``Idempotency-Key``, unless
    the node sets that header itself: a retried attempt can be recognised by the
    server it calls again. ``secrets`` resolves the node's secret references."""

    async def http(ctx: TaskContext, input: dict[str, Any]) -> dict[str, Any]:
        try:
            return await run_http(
                input,
                timeout=ctx.timeout or FALLBACK_TIMEOUT,
                session=session,
                policy=policy,
                idempotency_key=ctx.idempotency_key,
                secrets=secrets,
            )
        except ExecutionError as exc:
            raise _failure(exc) from exc

    return http


def python_handler(
    memory_limit_bytes: int,
    *,
    max_processes: int = 64,
    max_file_bytes: int = 16 * 1024 * 1024,
    max_open_files: int = 256,
    uid: int | None = None,
    secrets: SecretSource | None = None,
    sandbox: Sandbox | None = None,
    refusal: str | None = None,
) -> Any:
    """The ``python`` queue's handler; ``secrets`` resolves the node's secret references.
    The lines the node's code prints are kept with the attempt (its task log).

    Nodes run in ``sandbox`` (None: unsandboxed, COMPOSER_PYTHON_SANDBOX=off). A
    ``refusal`` (why the sandbox cannot work here, found at start) fails every node
    for good with that message instead of running it unsandboxed.
    """

    async def python(ctx: TaskContext, input: dict[str, Any]) -> Any:
        if refusal is not None:
            raise PermanentError(refusal, code=ErrorCode.SANDBOX_UNAVAILABLE)
        printed = ctx.logger.write if isinstance(ctx.logger, TaskLogger) else None
        try:
            return await run_python(
                input,
                timeout=ctx.timeout or FALLBACK_TIMEOUT,
                memory_limit_bytes=memory_limit_bytes,
                max_processes=max_processes,
                max_file_bytes=max_file_bytes,
                max_open_files=max_open_files,
                uid=uid,
                secrets=secrets,
                output=printed,
                sandbox=sandbox,
            )
        except ExecutionError as exc:
            raise _failure(exc) from exc

    return python
