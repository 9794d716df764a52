"""Composer worker SDK: typed handlers for a queue, run with leases and reports.

worker = Worker(WorkerConfig(token=...))

@worker.handler("payments")
async def charge(ctx: TaskContext, input: Charge) -> dict:
    if input.amount <= 0:
        raise PermanentError("amount must be positive", code="bad_amount")
    return {"charged": input.amount, "key": ctx.idempotency_key}

await worker.run()

``run_handler(charge, {"amount": 5})`` runs a handler with no engine and returns its
output (``composer_sdk.testing``: unit tests).

``ctx.caller`` (a ``Caller``: name, role, metadata; None when the run has none) says
who started the run and the request metadata they passed.
"""

from composer_common.caller import Caller
from composer_sdk._handler import Outcome, TaskContext
from composer_sdk._worker import Worker, WorkerConfig
from composer_sdk.errors import CoordinatorUnavailable, PermanentError, SdkError, TaskFailed
from composer_sdk.testing import handler_outcome, run_handler, run_handler_async

__all__ = [
    "Caller",
    "CoordinatorUnavailable",
    "Outcome",
    "PermanentError",
    "SdkError",
    "TaskContext",
    "TaskFailed",
    "Worker",
    "WorkerConfig",
    "handler_outcome",
    "run_handler",
    "run_handler_async",
]
