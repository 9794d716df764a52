"""Backoff: exponential growth with jitter, capped, reset by a success."""

from __future__ import annotations

import pytest

from composer_queue import Backoff


def test_delays_stay_within_initial_and_maximum_and_grow() -> None:
    b = Backoff(0.1, 5.0)
    delays = [b.next() for _ in range(200)]
    assert all(0.1 <= d <= 5.0 for d in delays)
    assert max(delays) > 2.0  # it grew well past the start
    assert b.failures == 200


def test_each_delay_is_at_most_three_times_the_last() -> None:
    highest = Backoff(0.1, 5.0, rand=lambda low, high: high)
    assert [round(highest.next(), 3) for _ in range(6)] == [0.3, 0.9, 2.7, 5.0, 5.0, 5.0]


def test_jitter_spreads_retries_of_many_clients() -> None:
    firsts = {round(Backoff(0.1, 5.0).next(), 6) for _ in range(50)}
    seconds = set()
    for _ in range(50):
        b = Backoff(0.1, 5.0)
        b.next()
        seconds.add(round(b.next(), 6))
    assert len(seconds) > 25 and len(firsts) > 25


def test_reset_starts_over() -> None:
    b = Backoff(0.1, 5.0, rand=lambda low, high: high)
    for _ in range(5):
        b.next()
    b.reset()
    assert (round(b.next(), 3), b.failures) == (0.3, 1)


@pytest.mark.parametrize(("initial", "maximum"), [(0, 1), (-1, 1), (2, 1)])
def test_nonsense_bounds_are_refused(initial: float, maximum: float) -> None:
    with pytest.raises(ValueError, match="0 < initial <= maximum"):
        Backoff(initial, maximum)
