"""The recovery policy, rule by rule, on plain values: no database, no Redis, no clock."""

from __future__ import annotations

import datetime as dt

import pytest

import composer_repo as repo
from composer_core.model import TaskState
from composer_engine import (
    Acknowledge,
    ClaimedEntry,
    GiveBack,
    GiveUp,
    Leave,
    RecoveryLimits,
    Redeliver,
    Redispatch,
    Unserved,
    lost_before,
    lost_dispatch,
    settle_entry,
    watch_queue,
)
from composer_rpc.codes import ErrorCode

LIMITS = RecoveryLimits(lease_ttl=30, lost_after=60, max_deliveries=3, max_scan=1000)
NOW = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)


def task(state: TaskState, attempt: int = 0) -> repo.TaskAttempt:
    return repo.TaskAttempt("run", "t1", state, attempt)


def entry(attempt: int = 0, deliveries: int = 1) -> ClaimedEntry:
    return ClaimedEntry("t1", attempt, deliveries)


def candidate(attempt: int = 0) -> repo.LostDispatch:
    return repo.LostDispatch(
        "run", "t1", "work", attempt, TaskState.QUEUED, NOW - dt.timedelta(minutes=5), "q"
    )


# -- claimed entries -------------------------------------------------------------


@pytest.mark.parametrize("state", [TaskState.PENDING, TaskState.QUEUED])
def test_an_attempt_still_waiting_for_a_worker_is_delivered_again(state: TaskState) -> None:
    assert settle_entry(entry(deliveries=1), task(state), LIMITS) == Redeliver(2)
    assert settle_entry(entry(deliveries=2), task(state), LIMITS) == Redeliver(3)


@pytest.mark.parametrize(
    "state",
    [TaskState.RUNNING, TaskState.COMPLETED, TaskState.FAILED, TaskState.WAITING],
)
def test_an_attempt_no_longer_waiting_for_a_worker_is_acknowledged_away(
    state: TaskState,
) -> None:
    decision = settle_entry(entry(deliveries=99), task(state), LIMITS)
    assert isinstance(decision, Acknowledge)  # never given up: a result is on its way or in
    assert state.value in decision.why


def test_an_entry_of_an_earlier_attempt_or_a_vanished_task_is_acknowledged_away() -> None:
    moved_on = settle_entry(entry(attempt=0), task(TaskState.QUEUED, attempt=1), LIMITS)
    assert moved_on == Acknowledge("the task moved on to attempt 1")
    assert isinstance(settle_entry(entry(), None, LIMITS), Acknowledge)


def test_an_attempt_delivered_max_deliveries_times_is_given_up_with_the_reason() -> None:
    decision = settle_entry(entry(deliveries=3), task(TaskState.QUEUED), LIMITS)
    assert isinstance(decision, GiveUp)
    assert decision.code == ErrorCode.DELIVERY_LIMIT
    assert "delivered 3 times" in decision.reason and "the limit is 3" in decision.reason
    # past the limit too (the limit was lowered between sweeps)
    assert isinstance(settle_entry(entry(deliveries=7), task(TaskState.PENDING), LIMITS), GiveUp)


@pytest.mark.parametrize("deliveries", [1, 3, 7])
@pytest.mark.parametrize("state", [TaskState.PENDING, TaskState.QUEUED])
def test_a_waiting_entry_a_live_worker_left_is_given_back_uncounted_at_any_count(
    state: TaskState, deliveries: int
) -> None:
    """Only a worker that is gone (its heartbeat ran out) costs a delivery: a live one
    that could not lease the attempt never brings it nearer the limit."""
    alive = ClaimedEntry("t1", 0, deliveries, holder_gone=False)
    assert settle_entry(alive, task(state), LIMITS) == GiveBack()


def test_a_live_workers_entry_that_means_nothing_any_more_is_acknowledged_away() -> None:
    alive = ClaimedEntry("t1", 0, 1, holder_gone=False)
    assert isinstance(settle_entry(alive, task(TaskState.RUNNING), LIMITS), Acknowledge)
    assert isinstance(settle_entry(alive, None, LIMITS), Acknowledge)


def test_with_a_limit_of_one_the_first_delivery_is_the_last() -> None:
    once = RecoveryLimits(max_deliveries=1)
    assert isinstance(settle_entry(entry(deliveries=1), task(TaskState.QUEUED), once), GiveUp)


# -- lost dispatches ----------------------------------------------------------------


def test_a_candidate_without_an_entry_in_its_stream_is_dispatched_again() -> None:
    assert lost_dispatch(candidate(), live=set()) == Redispatch()
    assert lost_dispatch(candidate(attempt=1), live={("t1", 0), ("t2", 1)}) == Redispatch()


def test_a_candidate_still_in_its_stream_is_left_alone() -> None:
    assert lost_dispatch(candidate(), live={("t1", 0)}) == Leave("its entry is still in the stream")


def test_a_stream_too_long_to_search_counts_as_holding_every_candidate() -> None:
    assert isinstance(lost_dispatch(candidate(), live=None), Leave)


def test_lost_means_dispatched_longer_ago_than_lost_after() -> None:
    assert lost_before(NOW, LIMITS) == NOW - dt.timedelta(seconds=60)


# -- queues nobody serves ------------------------------------------------------------


def test_a_queue_with_work_and_no_consumer_is_paged_for_once_after_lost_after() -> None:
    seen, page = watch_queue(2, 0, None, NOW, LIMITS)
    assert seen == Unserved(NOW) and not page
    seen, page = watch_queue(2, 0, seen, NOW + dt.timedelta(seconds=60), LIMITS)
    assert not page  # not for longer than lost_after yet
    seen, page = watch_queue(2, 0, seen, NOW + dt.timedelta(seconds=61), LIMITS)
    assert page and seen == Unserved(NOW, alerted=True)
    seen, page = watch_queue(5, 0, seen, NOW + dt.timedelta(seconds=600), LIMITS)
    assert not page and seen is not None  # once, not once per sweep


@pytest.mark.parametrize(("waiting", "consumers"), [(0, 0), (3, 1), (0, 2)])
def test_a_served_or_empty_queue_is_forgotten(waiting: int, consumers: int) -> None:
    assert watch_queue(waiting, consumers, Unserved(NOW, alerted=True), NOW, LIMITS) == (
        None,
        False,
    )


@pytest.mark.parametrize(
    "bad",
    [
        {"lease_ttl": 0},
        {"lost_after": -1},
        {"max_deliveries": 0},
        {"max_scan": 0},
    ],
)
def test_limits_that_cannot_work_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must be"):
        RecoveryLimits(**bad)  # type: ignore[arg-type]


def test_the_policy_does_no_io_and_reads_no_clock() -> None:
    """Read with ``ast``: no coroutine, no await, no clock call, no I/O library."""
    import ast
    import inspect

    from composer_engine import _recovery

    tree = ast.parse(inspect.getsource(_recovery))
    kinds = {type(node) for node in ast.walk(tree)}
    assert not kinds & {ast.AsyncFunctionDef, ast.Await, ast.AsyncFor, ast.AsyncWith}
    calls = {
        node.func.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    }
    assert not calls & {"now", "utcnow", "today", "time", "monotonic"}
    imported = {
        (node.module or "").split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
    } | {
        a.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for a in node.names
    }
    assert not imported & {"asyncio", "asyncpg", "redis", "time", "random", "os", "socket"}
