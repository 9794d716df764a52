"""Handlers as users write them, run with ``run_handler`` and its async twins (no engine,
no Redis): the output or the failure as a unit test reads it, and the Outcome a worker
would report."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

from composer_sdk import (
    PermanentError,
    TaskContext,
    TaskFailed,
    Worker,
    WorkerConfig,
    handler_outcome,
    run_handler,
    run_handler_async,
)
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


def test_run_handler_returns_the_output_and_raises_the_failure() -> None:
    # What a user's own unit test looks like: no event loop, no Outcome to unpack.
    assert run_handler(charge, {"amount": 5}, run_id="r1", node_id="charge") == {
        "charged": 5,
        "key": "r1:charge",
    }
    assert run_handler(charge, {"amount": 7})["charged"] == 7
    with pytest.raises(PermanentError, match="amount must be positive") as permanent:
        run_handler(charge, {"amount": -1})
    assert permanent.value.code == "bad_amount"
    with pytest.raises(TaskFailed, match="processor busy") as retryable:
        run_handler(charge, {"amount": 5000})
    assert (type(retryable.value), retryable.value.code) == (TaskFailed, "busy")
    with pytest.raises(PermanentError, match="input does not match Charge") as bad_input:
        run_handler(charge, {"amount": "lots"})
    assert bad_input.value.code == "bad_input"


async def test_run_handler_async_is_the_same_inside_an_event_loop() -> None:
    assert await run_handler_async(charge, {"amount": 5}) == {"charged": 5, "key": "run-test:node"}
    with pytest.raises(PermanentError, match="amount must be positive"):
        await run_handler_async(charge, {"amount": -1})
    with pytest.raises(RuntimeError, match=r"await run_handler_async\(\.\.\.\)"):
        run_handler(charge, {"amount": 5})


async def test_typed_input_and_output() -> None:
    outcome = await handler_outcome(charge, {"amount": 5}, run_id="r1", node_id="charge")
    assert outcome.status == "COMPLETED"
    assert outcome.output == {"charged": 5, "key": "r1:charge"}
    assert outcome.output_json == '{"charged":5,"key":"r1:charge"}'


async def test_input_that_does_not_match_the_model_fails_permanently() -> None:
    outcome = await handler_outcome(charge, {"amount": "lots"})
    assert (outcome.status, outcome.code, outcome.permanent) == ("FAILED", "bad_input", True)
    assert "Charge" in outcome.error


async def test_permanent_and_retryable_errors_with_codes() -> None:
    permanent = await handler_outcome(charge, {"amount": -1})
    assert (permanent.status, permanent.error, permanent.code, permanent.permanent) == (
        "FAILED",
        "amount must be positive",
        "bad_amount",
        True,
    )
    retryable = await handler_outcome(charge, {"amount": 5000})
    assert (retryable.code, retryable.permanent) == ("busy", False)


async def test_any_other_exception_is_a_retryable_failure_naming_its_type() -> None:
    async def broken(ctx: TaskContext, input: dict[str, Any]) -> None:
        raise KeyError("sku")

    outcome = await handler_outcome(broken, {})
    assert (outcome.status, outcome.error, outcome.code, outcome.permanent) == (
        "FAILED",
        "KeyError: 'sku'",
        "exception",
        False,
    )


async def test_handler_past_its_timeout_fails_the_attempt() -> None:
    async def slow(ctx: TaskContext, input: dict[str, Any]) -> None:
        await asyncio.sleep(10)

    outcome = await handler_outcome(slow, {}, timeout=0.05)
    assert (outcome.status, outcome.code, outcome.permanent) == ("FAILED", "timeout", False)


async def test_non_json_output_fails_permanently() -> None:
    async def odd(ctx: TaskContext, input: dict[str, Any]) -> object:
        return {"when": object()}

    outcome = await handler_outcome(odd, {})
    assert (outcome.status, outcome.code, outcome.permanent) == ("FAILED", "bad_output", True)


async def test_context_tells_the_last_attempt_and_a_stable_key() -> None:
    seen: list[tuple[str, bool]] = []

    async def record(ctx: TaskContext, input: dict[str, Any]) -> None:
        seen.append((ctx.idempotency_key, ctx.is_last_attempt))

    for attempt in range(3):
        await handler_outcome(record, {}, run_id="r", node_id="n", attempt=attempt, max_attempts=3)
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
