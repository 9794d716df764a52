"""Run a handler with no engine, no Redis and no coordinator.

outcome = await run_handler(charge, {"amount": 5}, attempt=2, max_attempts=3)
assert outcome.status == "FAILED" and outcome.permanent
"""

from __future__ import annotations

import logging
from typing import Any

from composer_common.caller import Caller
from composer_sdk._handler import Handler, HandlerFn, Outcome, TaskContext
from composer_sdk._tasklog import AttemptLines, TaskLogger


async def run_handler(
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
    (``caller``: the ``ctx.caller`` it sees), with what it logged through ``ctx.logger``
    (``outcome.log_lines``, bounded as a worker's default)."""
    handler = Handler.of("test", fn)
    lines = AttemptLines()
    ctx = TaskContext(
        task_id,
        run_id,
        node_id,
        attempt,
        max_attempts,
        workflow_id,
        workflow_version,
        timeout,
        TaskLogger(logging.getLogger("composer.task.test"), lines),
        caller=caller,
    )
    outcome = await handler.invoke(ctx, input, timeout)
    return outcome.with_log(lines)
