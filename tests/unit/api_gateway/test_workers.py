"""What GET /v1/workers says of a worker's status, and the waiting hint's words."""

from __future__ import annotations

import datetime as dt

import composer_repo as repo
from composer_api_gateway.workers import ago, hint, status_of

NOW = dt.datetime(2030, 1, 1, 12, 0, tzinfo=dt.UTC)


def worker(state: repo.WorkerState, seen_ago: float) -> repo.WorkerRecord:
    return repo.WorkerRecord(
        "w1",
        "h",
        ("q",),
        4,
        0,
        "0.1.0",
        state,
        NOW,
        NOW - dt.timedelta(seconds=seen_ago),
        None,
        NOW,
    )


def test_a_worker_is_live_while_it_beats_within_the_threshold() -> None:
    assert status_of(worker("SERVING", 10), 30) == ("SERVING", True)
    assert status_of(worker("DRAINING", 10), 30) == ("DRAINING", True)
    assert status_of(worker("SERVING", 31), 30) == ("LOST", False)
    assert status_of(worker("STOPPED", 1), 30) == ("STOPPED", False)


def test_ago_is_short() -> None:
    assert [ago(s) for s in (0, 59, 60, 300, 3600, 3660, 7200, 90000)] == [
        "0s",
        "59s",
        "1m",
        "5m",
        "1h",
        "1h01m",
        "2h",
        "1d",
    ]


def test_the_hint_says_since_when_and_what_to_do() -> None:
    never = hint(repo.UnservedQueue("payments", None, NOW))
    assert never.startswith("no worker has ever served queue 'payments': start a worker")
    lost = hint(repo.UnservedQueue("payments", NOW - dt.timedelta(minutes=5), NOW))
    assert lost.startswith(
        "no worker has served queue 'payments' for 5m (last seen 2030-01-01 11:55:00 UTC): "
    )
