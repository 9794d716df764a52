"""One hint a subscriber cannot take never ends the subscription: the gateway's
long-polls (and every loop's waker) keep getting the hints after it."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator

import pytest

import composer_queue as cq
from tests.integration.waits import until


@pytest.fixture
async def queue(redis_url: str) -> AsyncIterator[cq.RedisQueue]:
    q = cq.connect(redis_url)
    try:
        yield q
    finally:
        await q.close()


async def test_a_hint_the_callback_cannot_take_is_dropped_and_the_next_one_arrives(
    queue: cq.RedisQueue, caplog: pytest.LogCaptureFixture
) -> None:
    prefix = f"t-{uuid.uuid4().hex[:8]}"
    chan = cq.channel(prefix, cq.RUN_FINISHED)
    taken: list[str] = []
    gaps: list[None] = []

    def on_message(_channel: str, run_id: str) -> None:
        if run_id == "poison":
            raise ValueError("not a run id")
        taken.append(run_id)

    subscriber = cq.Subscriber(queue, [chan], on_message, on_gap=lambda: gaps.append(None))
    async with subscriber:
        await until(lambda: _true(subscriber.subscribed.is_set()), what="subscribed")
        await cq.send_hint(queue, prefix, cq.RUN_FINISHED, "poison")
        await queue.notify(chan, b"\xff\xfe not utf-8")  # type: ignore[arg-type]
        await cq.send_hint(queue, prefix, cq.RUN_FINISHED, "run-2")
        await until(lambda: _true("run-2" in taken), what="the hint after the poisoned ones")
    assert taken == ["\ufffd\ufffd not utf-8", "run-2"]
    assert gaps == []  # the subscription never dropped
    assert any(r.levelno > logging.ERROR and "poison" in r.getMessage() for r in caplog.records)


async def _true(value: bool) -> bool:
    return value
