"""Composer worker SDK: typed handlers for a queue, run with leases and reports.

worker = Worker(WorkerConfig(token=...))

@worker.handler("payments")
async def charge(ctx: TaskContext, input: Charge) -> dict:
    if input.amount <= 0:
        raise PermanentError("amount must be positive", code="bad_amount")
    return {"charged": input.amount, "key": ctx.idempotency_key}

await worker.run()
"""

from composer_sdk._handler import Outcome, TaskContext
from composer_sdk._worker import Worker, WorkerConfig
from composer_sdk.errors import CoordinatorUnavailable, PermanentError, SdkError, TaskFailed
from composer_sdk.testing import run_handler

__all__ = [
    "CoordinatorUnavailable",
    "Outcome",
    "PermanentError",
    "SdkError",
    "TaskContext",
    "TaskFailed",
    "Worker",
    "WorkerConfig",
    "run_handler",
]
