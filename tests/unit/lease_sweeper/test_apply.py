"""How a sweep takes the engine's answer to one decision: one run it cannot apply to
never ends the sweep for the others; only a database outage does."""

from __future__ import annotations

import pytest

from composer_engine import NotFound, Parked, Unavailable
from composer_lease_sweeper.loop import _apply


async def raising(exc: Exception) -> bool:
    raise exc


@pytest.mark.parametrize(
    "exc",
    [
        Parked("the run is parked: sealed with key 'k1', which is not configured here"),
        NotFound("no such run"),
        RuntimeError("a bug"),
    ],
)
async def test_a_run_that_cannot_take_the_decision_is_skipped(exc: Exception) -> None:
    assert await _apply("fail the attempt", raising(exc)) is False


async def test_a_database_outage_ends_the_sweep() -> None:
    with pytest.raises(Unavailable):
        await _apply("fail the attempt", raising(Unavailable("database unavailable")))
