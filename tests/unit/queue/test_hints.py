"""The one hint subscriber: routes messages, reconnects, and says when hints may be lost."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import composer_queue as cq
from composer_queue.testing import FakeQueue


async def until(check: Callable[[], bool], what: str) -> None:
    deadline = asyncio.get_running_loop().time() + 5
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        await asyncio.sleep(0.002)


async def test_a_dropped_subscription_reconnects_and_reports_the_gap() -> None:
    queue = FakeQueue()
    got: list[str] = []
    gaps: list[int] = []
    chan = cq.channel("p", cq.RUN_FINISHED)
    subscriber = cq.Subscriber(
        queue,
        [chan],
        lambda _c, m: got.append(m),
        on_gap=lambda: gaps.append(1),
        backoff=cq.Backoff(0.001, 0.002),
    )
    async with subscriber:
        await asyncio.wait_for(subscriber.subscribed.wait(), 5)
        await queue.notify(chan, "a")
        await until(lambda: got == ["a"], "the first hint arrived")

        queue.down = True  # Redis goes away: the subscription drops, reconnects fail
        await until(lambda: len(gaps) >= 2, "the subscriber retried while Redis was down")
        assert not subscriber.subscribed.is_set()
        queue.down = False
        await asyncio.wait_for(subscriber.subscribed.wait(), 5)
        await queue.notify(chan, "b")
        await until(lambda: got == ["a", "b"], "a hint after the reconnect arrived")
    assert subscriber.received == 2
    assert await queue.subscribers(chan) == 0


async def test_a_failing_callback_does_not_end_the_subscription() -> None:
    queue = FakeQueue()
    got: list[str] = []

    def on_message(_channel: str, message: str) -> None:
        if message == "bad":
            raise RuntimeError("a bug in the callback")
        got.append(message)

    gaps: list[int] = []
    chan = cq.channel("p", cq.TIMER)
    async with cq.Subscriber(
        queue,
        [chan],
        on_message,
        on_gap=lambda: gaps.append(1),
        backoff=cq.Backoff(0.001, 0.002),
    ) as subscriber:
        await asyncio.wait_for(subscriber.subscribed.wait(), 5)
        await queue.notify(chan, "bad")
        await queue.notify(chan, "good")
        await until(lambda: got == ["good"], "the next hint arrived")
    assert gaps == []  # the one bad hint was dropped; the subscription never dropped


async def test_a_waker_looks_once_after_a_gap() -> None:
    queue = FakeQueue()
    async with cq.Waker(queue, "p", cq.ENQUEUER) as waker:
        await asyncio.wait_for(waker.subscribed.wait(), 5)
        assert await waker.wait(0.001) is False
        queue.drop_subscriptions()  # a hint may have been missed meanwhile
        assert await waker.wait(5) is True


async def test_send_hint_swallows_an_outage() -> None:
    queue = FakeQueue()
    queue.down = True
    await cq.send_hint(queue, "p", cq.ENQUEUER)  # logged, not raised: the poll covers it
    queue.down = False
    await cq.send_hint(queue, "p", cq.ENQUEUER, cq.WEBHOOK)
    assert queue.notified == [(cq.channel("p", cq.ENQUEUER), cq.WEBHOOK)]
