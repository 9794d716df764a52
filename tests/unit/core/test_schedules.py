"""When schedules fire, with a fixed clock: intervals, cron in a time zone across both
DST changes, jitter, the catch-up window and the overlap policies."""

from __future__ import annotations

import datetime as dt

import pytest
from pydantic import ValidationError

from composer_core.schedules import (
    Act,
    Overlap,
    ScheduleSpec,
    due_at,
    due_fires,
    idempotency_key,
    jitter,
    next_fire,
    on_fire,
    upcoming,
)

UTC = dt.UTC


def at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_an_interval_fires_at_multiples_of_it_from_the_epoch() -> None:
    spec = ScheduleSpec(id="poll", every_seconds=30)
    assert next_fire(spec, at("2026-12-02T10:00:07")) == at("2026-12-02T10:00:30")
    assert next_fire(spec, at("2026-12-02T10:00:30")) == at("2026-12-02T10:01:00")  # strictly after
    assert next_fire(spec, at("2026-12-02T10:00:29.999")) == at("2026-12-02T10:00:30")


def test_cron_in_utc() -> None:
    spec = ScheduleSpec(id="nightly", cron="0 2 * * *")
    assert upcoming(spec, at("2026-12-02T02:00:00"), 2) == [
        at("2026-12-03T02:00:00"),
        at("2026-12-04T02:00:00"),
    ]
    assert next_fire(spec, at("2026-12-02T01:59:59.5")) == at("2026-12-02T02:00:00")


def test_a_time_the_spring_change_skips_fires_once_when_the_day_reaches_it() -> None:
    # Berlin: 2026-03-29 02:00 CET jumps to 03:00 CEST; 02:30 does not exist that day
    spec = ScheduleSpec(id="nightly", cron="30 2 * * *", timezone="Europe/Berlin")
    fires = upcoming(spec, at("2026-03-27T12:00:00"), 3)
    assert fires == [
        at("2026-03-28T01:30:00"),  # 02:30 CET
        at("2026-03-29T01:00:00"),  # 03:00 CEST: the day's 02:30 never came
        at("2026-03-30T00:30:00"),  # 02:30 CEST
    ]


def test_a_time_the_autumn_change_repeats_fires_once() -> None:
    # Berlin: 2026-10-25 03:00 CEST falls back to 02:00 CET; 02:30 happens twice
    spec = ScheduleSpec(id="nightly", cron="30 2 * * *", timezone="Europe/Berlin")
    fires = upcoming(spec, at("2026-10-23T12:00:00"), 3)
    assert fires == [
        at("2026-10-24T00:30:00"),  # 02:30 CEST
        at("2026-10-25T00:30:00"),  # the first 02:30 only
        at("2026-10-26T01:30:00"),  # 02:30 CET
    ]


def test_an_hourly_cron_keeps_every_real_hour_across_the_autumn_change() -> None:
    spec = ScheduleSpec(id="hourly", cron="0 * * * *", timezone="Europe/Berlin")
    fires = upcoming(spec, at("2026-10-24T23:30:00"), 4)
    # one hour apart in real time, the repeated hour included, none doubled
    assert [f - fires[0] for f in fires] == [dt.timedelta(hours=h) for h in range(4)]


def test_jitter_is_the_same_everywhere_and_within_its_bound() -> None:
    fire = at("2026-12-02T02:00:00")
    first = jitter("nightly", fire, 60)
    assert first == jitter("nightly", fire, 60)
    assert dt.timedelta(0) <= first < dt.timedelta(seconds=60)
    spread = {jitter("nightly", fire + dt.timedelta(days=d), 60) for d in range(20)}
    assert len(spread) > 10  # different fires get different delays
    assert jitter("nightly", fire, 0) == dt.timedelta(0)


def test_due_fires_start_those_inside_the_window_and_count_the_missed() -> None:
    spec = ScheduleSpec(id="poll", every_seconds=10, catchup_window_seconds=30)
    now = at("2026-12-02T10:01:05")
    due = due_fires(spec, at("2026-12-02T10:00:00"), now)
    assert due.fires == [
        at("2026-12-02T10:00:40"),
        at("2026-12-02T10:00:50"),
        at("2026-12-02T10:01:00"),
    ]
    assert due.missed is not None
    assert (due.missed.count, due.missed.at_least) == (4, False)  # :00, :10, :20, :30
    assert (due.missed.first, due.missed.last) == (
        at("2026-12-02T10:00:00"),
        at("2026-12-02T10:00:30"),
    )
    assert due.next_fire_at == at("2026-12-02T10:01:10")


def test_a_long_outage_is_counted_up_to_a_bound_and_jumped_over() -> None:
    spec = ScheduleSpec(id="fast", every_seconds=1, catchup_window_seconds=5)
    due = due_fires(spec, at("2026-12-01T00:00:00"), at("2026-12-02T00:00:00"))
    assert due.missed is not None and due.missed.at_least
    assert due.fires == [at("2026-12-01T23:59:55") + dt.timedelta(seconds=s) for s in range(6)]


def test_a_fire_is_due_only_once_its_jitter_has_passed() -> None:
    spec = ScheduleSpec(id="jittery", every_seconds=60, jitter_seconds=30)
    fire = at("2026-12-02T10:00:00")
    delay = jitter("jittery", fire, 30)
    assert delay > dt.timedelta(0)  # this fire's delay (fixed by the hash)
    assert due_fires(spec, fire, fire + delay - dt.timedelta(milliseconds=1)).fires == []
    assert due_fires(spec, fire, due_at(spec, fire)).fires == [fire]


def test_nothing_is_due_before_the_fire_time() -> None:
    spec = ScheduleSpec(id="poll", every_seconds=10)
    due = due_fires(spec, at("2026-12-02T10:00:10"), at("2026-12-02T10:00:09"))
    assert (due.fires, due.missed, due.next_fire_at) == ([], None, at("2026-12-02T10:00:10"))


@pytest.mark.parametrize(
    ("overlap", "running", "buffered", "act"),
    [
        (Overlap.SKIP, False, False, Act.START),
        (Overlap.SKIP, True, False, Act.SKIP),
        (Overlap.BUFFER_ONE, True, False, Act.BUFFER),
        (Overlap.BUFFER_ONE, True, True, Act.SKIP),
        (Overlap.ALLOW_ALL, True, False, Act.START),
        (Overlap.CANCEL_OTHER, True, False, Act.CANCEL_AND_START),
        ("buffer_all", True, True, Act.BUFFER),
    ],
)
def test_overlap_policies(overlap: Overlap, running: bool, buffered: bool, act: Act) -> None:
    assert on_fire(overlap, running=running, buffered=buffered) is act


def test_the_idempotency_key_names_the_schedule_and_the_fire_time_in_utc() -> None:
    berlin = dt.datetime(2026, 12, 2, 3, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    assert idempotency_key("nightly", berlin) == "schedule:nightly:2026-12-02T02:00:00+00:00"


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"cron": "0 2 * *"}, "is not a cron expression"),
        ({"cron": "61 * * * *"}, "is not a cron expression"),
        ({"cron": "0 2 * * *", "every_seconds": 5}, "exactly one of cron and every_seconds"),
        ({}, "exactly one of cron and every_seconds"),
        ({"every_seconds": 0}, "greater than or equal to 1"),
        ({"every_seconds": 10, "jitter_seconds": 10}, "must be less than every_seconds"),
        ({"cron": "0 2 * * *", "timezone": "Mars/Olympus"}, "is not a time zone"),
        ({"every_seconds": 10, "overlap": "buffer_all"}, "overlap"),
        ({"every_seconds": 10, "id": "-bad"}, "is not a schedule id"),
    ],
)
def test_a_bad_schedule_is_refused_with_the_reason(fields: dict[str, object], problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        ScheduleSpec.model_validate({"id": "s", **fields})
