"""Group commit (composer_common.batching): what users of the coordinator and the SDK
rely on — no delay when idle, batches that grow under load, each item its own answer."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from composer_common.batching import Batcher


async def settle() -> None:
    """Let every ready task run until all wait (a few turns of the loop)."""
    for _ in range(5):
        await asyncio.sleep(0)


class Recorder:
    """A batch function that holds each batch until released, and records them."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.release = asyncio.Event()

    async def __call__(self, items: Sequence[int]) -> list[int | BaseException]:
        self.batches.append(list(items))
        await self.release.wait()
        return [ValueError(f"odd {i}") if i % 2 else i * 10 for i in items]


async def test_the_first_item_goes_at_once_and_what_arrives_meanwhile_goes_together() -> None:
    run = Recorder()
    batcher: Batcher[int, int] = Batcher(run, max_size=3, max_in_flight=1)
    first = asyncio.create_task(batcher.submit(0))
    await settle()
    assert run.batches == [[0]]  # no window: an idle batcher sends at once
    later = [asyncio.create_task(batcher.submit(i)) for i in (2, 4, 6, 8)]
    await settle()
    assert run.batches == [[0]]  # they wait for the batch in flight
    run.release.set()
    assert await first == 0
    assert [await t for t in later] == [20, 40, 60, 80]
    assert run.batches == [[0], [2, 4, 6], [8]]  # at most max_size per batch, in order


async def test_each_item_gets_its_own_answer_or_its_own_error() -> None:
    run = Recorder()
    run.release.set()
    batcher: Batcher[int, int] = Batcher(run)
    results = await asyncio.gather(*(batcher.submit(i) for i in range(4)), return_exceptions=True)
    assert results[0] == 0 and results[2] == 20
    assert isinstance(results[1], ValueError) and str(results[1]) == "odd 1"
    assert isinstance(results[3], ValueError) and str(results[3]) == "odd 3"


async def test_a_failed_batch_fails_its_items_and_the_next_batch_runs() -> None:
    calls = 0

    async def flaky(items: Sequence[int]) -> list[int | BaseException]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionError("lost")
        return list(items)

    batcher: Batcher[int, int] = Batcher(flaky)
    with pytest.raises(ConnectionError):
        await batcher.submit(1)
    assert await batcher.submit(2) == 2


async def test_a_caller_that_goes_away_does_not_disturb_the_others() -> None:
    run = Recorder()
    batcher: Batcher[int, int] = Batcher(run, max_in_flight=1)
    blocker = asyncio.create_task(batcher.submit(0))
    await settle()
    gone = asyncio.create_task(batcher.submit(2))
    kept = asyncio.create_task(batcher.submit(4))
    await settle()
    gone.cancel()
    run.release.set()
    assert await blocker == 0 and await kept == 40
    assert gone.cancelled()


async def test_several_batches_may_be_in_flight() -> None:
    run = Recorder()
    batcher: Batcher[int, int] = Batcher(run, max_in_flight=2)
    tasks = [asyncio.create_task(batcher.submit(i)) for i in (0, 2, 4)]
    await settle()
    assert run.batches[:2] == [[0], [2]]  # two at once; the third waits
    run.release.set()
    assert [await t for t in tasks] == [0, 20, 40]


def test_bounds_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_size"):
        Batcher(Recorder(), max_size=0)


async def test_items_of_one_key_are_never_in_two_batches_at_once() -> None:
    """The coordinator's reports, keyed by run: a batch in flight holds a run, and that
    run's next reports wait for it, in order, while other runs' go ahead."""
    in_flight: list[set[str]] = []
    seen: list[list[tuple[str, int]]] = []
    release = asyncio.Event()

    async def run(items: Sequence[tuple[str, int]]) -> list[int]:
        keys = {k for k, _ in items}
        assert all(not keys & other for other in in_flight), "a key in two batches at once"
        in_flight.append(keys)
        seen.append(list(items))
        await release.wait()
        in_flight.remove(keys)
        return [n for _, n in items]

    batcher: Batcher[tuple[str, int], int] = Batcher(run, max_in_flight=2, key=lambda item: item[0])

    async def settle() -> None:  # let every ready task run (no time passes)
        for _ in range(10):
            await asyncio.sleep(0)

    first = asyncio.ensure_future(batcher.submit(("a", 1)))
    await settle()  # the first batch is in flight, holding "a"
    rest = [asyncio.ensure_future(batcher.submit(item)) for item in [("a", 2), ("b", 1), ("a", 3)]]
    await settle()
    assert seen == [[("a", 1)], [("b", 1)]]  # "b" went ahead; "a" waits, in order
    release.set()
    assert await asyncio.gather(first, *rest) == [1, 2, 1, 3]
    assert seen[2:] == [[("a", 2), ("a", 3)]]


async def test_with_linger_requests_made_together_go_in_one_batch() -> None:
    seen: list[list[int]] = []

    async def run(items: Sequence[int]) -> list[int]:
        seen.append(list(items))
        return [i * 2 for i in items]

    eager: Batcher[int, int] = Batcher(run, max_size=10, max_in_flight=4)
    assert await asyncio.gather(*(eager.submit(i) for i in range(3))) == [0, 2, 4]
    assert seen[0] == [0]  # without linger the first goes alone
    seen.clear()
    lingering: Batcher[int, int] = Batcher(run, max_size=10, max_in_flight=4, linger=True)
    assert await asyncio.gather(*(lingering.submit(i) for i in range(3))) == [0, 2, 4]
    assert seen == [[0, 1, 2]]


async def test_settle_waits_for_the_batches_of_callers_that_gave_up() -> None:
    """A caller cancelled (an RPC gone) leaves its batch applying; a process that closes
    its connections waits for it with settle(), and for the batch queued behind it."""
    run = Recorder()
    batcher: Batcher[int, int] = Batcher(run, max_size=1, max_in_flight=1)
    first = asyncio.create_task(batcher.submit(0))
    second = asyncio.create_task(batcher.submit(2))
    await settle()
    first.cancel()
    second.cancel()
    settled = asyncio.create_task(batcher.settle())
    await settle()
    assert not settled.done()  # the first batch holds
    run.release.set()
    await asyncio.wait_for(settled, 5)
    assert run.batches == [[0], [2]]  # both applied, though nobody waits for them
    assert batcher.items == 2
