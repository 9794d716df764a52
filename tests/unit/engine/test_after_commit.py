"""What a transaction does after its commit (engine/_tx.py): the hints it asked for go
each once, together, after the other after-commit work (which may ask for more); the
counters it bumped are added once per label set. Nothing goes before the commit."""

from __future__ import annotations

from typing import Any, cast

import composer_queue as cq
from composer_engine._tx import Tx
from composer_queue.testing import FakeQueue


class Recorder:
    """A counter's ``add``, as the metrics SDK is called."""

    def __init__(self) -> None:
        self.added: list[tuple[int, dict[str, Any]]] = []

    def add(self, n: int, attributes: dict[str, Any] | None = None) -> None:
        self.added.append((n, dict(attributes or {})))


def a_tx() -> Tx:
    return Tx(cast(Any, None))  # no statement runs here


async def test_each_hint_goes_once_after_the_commit_with_those_asked_for_after_it() -> None:
    redis, tx = FakeQueue(), a_tx()
    for run_id in ("run-1", "run-2", "run-1"):
        tx.hint(redis, "p", cq.RUN_FINISHED, run_id)
    tx.hint(redis, "p", cq.ENQUEUER)
    # an after-commit function that decides on a hint then (as the enqueuer's wake-up does)
    tx.after_commit(lambda: tx.hint(redis, "p", cq.ENQUEUER, cq.WEBHOOK))
    assert redis.notified == []  # not before the commit

    await tx.run_after_commit()

    finished, enqueuer = cq.channel("p", cq.RUN_FINISHED), cq.channel("p", cq.ENQUEUER)
    assert redis.notified == [
        (finished, "run-1 run-2"),  # one message names the runs
        (enqueuer, ""),
        (enqueuer, cq.WEBHOOK),
    ]


async def test_a_hundred_finished_runs_a_message() -> None:
    redis, tx = FakeQueue(), a_tx()
    run_ids = [f"run-{i}" for i in range(cq.RUN_IDS_PER_HINT * 2 + 1)]
    for run_id in run_ids:
        tx.hint(redis, "p", cq.RUN_FINISHED, run_id)
    await tx.run_after_commit()
    messages = [cq.finished_runs(m) for _, m in redis.notified]
    assert [len(m) for m in messages] == [cq.RUN_IDS_PER_HINT, cq.RUN_IDS_PER_HINT, 1]
    assert [r for m in messages for r in m] == run_ids


async def test_a_failing_after_commit_function_does_not_stop_the_hints() -> None:
    redis, tx = FakeQueue(), a_tx()

    def broken() -> None:
        raise RuntimeError("a metric exporter's bug")

    tx.after_commit(broken)
    tx.hint(redis, "p", cq.TIMER)
    await tx.run_after_commit()
    assert redis.notified == [(cq.channel("p", cq.TIMER), "")]


async def test_a_lost_hint_is_swallowed() -> None:
    redis, tx = FakeQueue(), a_tx()
    redis.down = True
    tx.hint(redis, "p", cq.TIMER)
    await tx.run_after_commit()  # the timer's poll covers it
    assert redis.notified == []


async def test_counters_are_added_once_per_label_set_after_the_commit() -> None:
    finished, events = Recorder(), Recorder()
    tx = a_tx()
    for _ in range(25):
        tx.count(cast(Any, finished), 1, {"status": "SUCCEEDED", "workflow_id": "w"})
    tx.count(cast(Any, finished), 1, {"status": "FAILED", "workflow_id": "w"})
    tx.count(cast(Any, events), 3)
    assert finished.added == [] and events.added == []  # not before the commit

    await tx.run_after_commit()

    assert finished.added == [
        (25, {"status": "SUCCEEDED", "workflow_id": "w"}),
        (1, {"status": "FAILED", "workflow_id": "w"}),
    ]
    assert events.added == [(3, {})]
