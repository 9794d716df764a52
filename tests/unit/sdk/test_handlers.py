"""Handlers as users write them, run with ``run_handler`` (no engine, no Redis)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

from composer_sdk import PermanentError, TaskContext, TaskFailed, Worker, WorkerConfig, run_handler
from composer_sdk.errors import SdkError


class Charge(BaseModel):
    amount: int
    currency: str = "EUR"


class Receipt(BaseModel):
    charged: int
    key: str


async def charge(ctx: TaskContext, input: Charge) -> Receipt:
    if input.amount <= 0:
        raise PermanentError("amount must be positive", code="bad_amount")
    if input.amount > 1000:
        raise TaskFailed("processor busy", code="busy")
    return Receipt(charged=input.amount, key=ctx.idempotency_key)


async def test_typed_input_and_output() -> None:
    outcome = await run_handler(charge, {"amount": 5}, run_id="r1", node_id="charge")
    assert outcome.status == "COMPLETED"
    assert outcome.output == {"charged": 5, "key": "r1:charge"}
    assert outcome.output_json == '{"charged":5,"key":"r1:charge"}'


async def test_input_that_does_not_match_the_model_fails_permanently() -> None:
    outcome = await run_handler(charge, {"amount": "lots"})
    assert (outcome.status, outcome.code, outcome.permanent) == ("FAILED", "bad_input", True)
    assert "Charge" in outcome.error


async def test_permanent_and_retryable_errors_with_codes() -> None:
    permanent = await run_handler(charge, {"amount": -1})
    assert (permanent.status, permanent.error, permanent.code, permanent.permanent) == (
        "FAILED",
        "amount must be positive",
        "bad_amount",
        True,
    )
    retryable = await run_handler(charge, {"amount": 5000})
    assert (retryable.code, retryable.permanent) == ("busy", False)


async def test_any_other_exception_is_a_retryable_failure_naming_its_type() -> None:
    async def broken(ctx: TaskContext, input: dict[str, Any]) -> None:
        raise KeyError("sku")

    outcome = await run_handler(broken, {})
    assert (outcome.status, outcome.error, outcome.code, outcome.permanent) == (
        "FAILED",
        "KeyError: 'sku'",
        "exception",
        False,
    )


async def test_handler_past_its_timeout_fails_the_attempt() -> None:
    async def slow(ctx: TaskContext, input: dict[str, Any]) -> None:
        await asyncio.sleep(10)

    outcome = await run_handler(slow, {}, timeout=0.05)
    assert (outcome.status, outcome.code, outcome.permanent) == ("FAILED", "timeout", False)


async def test_non_json_output_fails_permanently() -> None:
    async def odd(ctx: TaskContext, input: dict[str, Any]) -> object:
        return {"when": object()}

    outcome = await run_handler(odd, {})
    assert (outcome.status, outcome.code, outcome.permanent) == ("FAILED", "bad_output", True)


async def test_context_tells_the_last_attempt_and_a_stable_key() -> None:
    seen: list[tuple[str, bool]] = []

    async def record(ctx: TaskContext, input: dict[str, Any]) -> None:
        seen.append((ctx.idempotency_key, ctx.is_last_attempt))

    for attempt in range(3):
        await run_handler(record, {}, run_id="r", node_id="n", attempt=attempt, max_attempts=3)
    assert seen == [("r:n", False), ("r:n", False), ("r:n", True)]


def test_registration_refuses_what_cannot_run() -> None:
    worker = Worker(WorkerConfig())

    def sync(ctx: TaskContext, input: dict[str, Any]) -> None:
        return None

    async def one_arg(input: dict[str, Any]) -> None:
        return None

    with pytest.raises(TypeError, match="async def"):
        worker.add_handler("q", sync)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"\(ctx, input\)"):
        worker.add_handler("q", one_arg)
    worker.add_handler("q", charge)
    with pytest.raises(SdkError, match="already has a handler"):
        worker.add_handler("q", charge)
