"""Run a handler with no engine, no Redis and no coordinator, for unit tests.

    def test_charge() -> None:
        assert run_handler(charge, {"amount": 5})["charged"] == 5
        with pytest.raises(PermanentError, match="positive"):
            run_handler(charge, {"amount": 0})

``run_handler`` is synchronous: it runs the handler in an event loop of its own
and returns its output, or raises how the attempt failed. Inside an event loop
(an ``async def`` test), ``await run_handler_async(...)`` does the same.
``await handler_outcome(...)`` returns the Outcome a worker would report
instead, to check its error code, its permanence or its JSON.
"""

from __future__ import annotations

import asyncio
from typing import Any

from composer_common.caller import Caller
from composer_sdk._handler import Handler, HandlerFn, Outcome, TaskContext
from composer_sdk.errors import PermanentError, TaskFailed


async def handler_outcome(
    fn: HandlerFn,
    input: Any,
    *,
    run_id: str = "run-test",
    node_id: str = "node",
    task_id: str = "task-test",
    attempt: int = 0,
    max_attempts: int = 3,
    workflow_id: str = "test-workflow",
    workflow_version: int = 1,
    timeout: float | None = None,
    caller: Caller | None = None,
) -> Outcome:
    """Invoke ``fn`` exactly as a worker would and return the Outcome it would report
    (``caller``: the ``ctx.caller`` it sees)."""
    handler = Handler.of("test", fn)
    ctx = TaskContext(
        task_id,
        run_id,
        node_id,
        attempt,
        max_attempts,
        workflow_id,
        workflow_version,
        timeout,
        caller=caller,
    )
    return await handler.invoke(ctx, input, timeout)


async def run_handler_async(
    fn: HandlerFn,
    input: Any,
    *,
    run_id: str = "run-test",
    node_id: str = "node",
    task_id: str = "task-test",
    attempt: int = 0,
    max_attempts: int = 3,
    workflow_id: str = "test-workflow",
    workflow_version: int = 1,
    timeout: float | None = None,
    caller: Caller | None = None,
) -> Any:
    """``run_handler`` for code already inside an event loop (an ``async def`` test)."""
    outcome = await handler_outcome(
        fn,
        input,
        run_id=run_id,
        node_id=node_id,
        task_id=task_id,
        attempt=attempt,
        max_attempts=max_attempts,
        workflow_id=workflow_id,
        workflow_version=workflow_version,
        timeout=timeout,
        caller=caller,
    )
    return _output_of(outcome)


def run_handler(
    fn: HandlerFn,
    input: Any,
    *,
    run_id: str = "run-test",
    node_id: str = "node",
    task_id: str = "task-test",
    attempt: int = 0,
    max_attempts: int = 3,
    workflow_id: str = "test-workflow",
    workflow_version: int = 1,
    timeout: float | None = None,
    caller: Caller | None = None,
) -> Any:
    """Run ``fn`` once as a worker would, in an event loop of its own, and return its output
    as the worker would report it (a pydantic model as its JSON-ready dict).

    A failed attempt raises what the worker would report: ``PermanentError`` when no
    retry can help (the handler raised one, the input does not match its model, the
    output cannot be stored), else ``TaskFailed`` (another exception, as
    ``"KeyError: 'sku'"`` with code ``exception``, or the timeout); ``code`` says which.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError(
            "run_handler runs the handler in an event loop of its own, and this code already "
            "runs in one: use `await run_handler_async(...)` here"
        )
    return asyncio.run(
        run_handler_async(
            fn,
            input,
            run_id=run_id,
            node_id=node_id,
            task_id=task_id,
            attempt=attempt,
            max_attempts=max_attempts,
            workflow_id=workflow_id,
            workflow_version=workflow_version,
            timeout=timeout,
            caller=caller,
        )
    )


def _output_of(outcome: Outcome) -> Any:
    if outcome.status == "COMPLETED":
        return outcome.output
    failure = PermanentError if outcome.permanent else TaskFailed
    raise failure(outcome.error, code=outcome.code)
