"""Schedules: when a schedule fires, and what a fire does when the last one still runs
(docs/architecture.md §6.8).

Pure: the caller passes the time (``now``), and nothing here reads a clock or
makes an id. Fire times are computed, never stored one by one: a cron
expression by cronsim (its maintainer runs Healthchecks.io on it; it follows
Debian cron across DST changes: a time the spring change skips fires when the
day reaches it again, a time the autumn change repeats fires once), an
interval from the Unix epoch (``every_seconds: 30`` fires at :00 and :30 of
every minute, whoever computes it). Jitter is a hash of the schedule and the
fire time, so every replica delays a fire by the same amount. Time zones come
from the standard library's ``zoneinfo`` (the system's tz database, read
once per zone: data, like a module).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError
from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator, model_validator

UTC = dt.UTC
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
#: A schedule id: like a workflow id.
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
#: The longest interval, window and jitter: a year.
MAX_SCHEDULE_SECONDS = 366 * 24 * 3600
#: How many fires one pass starts for one schedule; the rest wait for the next pass.
MAX_FIRES_PER_PASS = 100
#: How many missed fires are counted one by one; more is reported as "at least".
MAX_MISSED_COUNTED = 10_000


class Overlap(StrEnum):
    """What a fire does while the schedule's last run is still going."""

    #: The fire is skipped (recorded).
    SKIP = "skip"
    #: One fire waits for the running one to end, then starts; further ones are skipped.
    BUFFER_ONE = "buffer_one"
    #: Every fire starts a run, whatever still runs.
    ALLOW_ALL = "allow_all"
    #: The running run is cancelled and the fire starts a new one.
    CANCEL_OTHER = "cancel_other"


class ScheduleSpec(BaseModel):
    """One schedule as a definition's ``schedules:`` or ``POST /v1/schedules`` has it."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    id: str = Field(
        description="unique among all schedules: letters, digits, '_', '-' or '.', "
        "starting with a letter or digit, at most 64 characters"
    )
    cron: str | None = Field(
        default=None,
        description='a cron expression of 5 fields (minute hour day month weekday, "0 2 * * *") '
        "or 6 (seconds first), in the schedule's timezone; exactly one of cron and "
        "every_seconds",
    )
    every_seconds: int | None = Field(
        default=None,
        ge=1,
        le=MAX_SCHEDULE_SECONDS,
        description="fire every so many seconds, counted from the Unix epoch (30: at :00 and "
        ":30 of every minute)",
    )
    timezone: str = Field(
        default="UTC",
        description="an IANA time zone (Europe/Berlin) the cron expression is read in; a "
        "time the spring DST change skips fires when the clock reaches it again (03:00 for "
        "02:30), one it repeats fires once",
    )
    input: dict[str, Any] = Field(
        default_factory=dict, description="the input of every run the schedule starts"
    )
    overlap: Overlap = Field(
        default=Overlap.SKIP,
        description="a fire while the last run still goes: skip (default), buffer_one "
        "(start it when that run ends; one at most), allow_all, cancel_other (cancel that run)",
    )
    catchup_window_seconds: int = Field(
        default=3600,
        ge=0,
        le=MAX_SCHEDULE_SECONDS,
        description="a fire found late (the timer was down) still starts if it is at most "
        "this old; older ones are skipped and recorded as missed",
    )
    jitter_seconds: int = Field(
        default=0,
        ge=0,
        le=MAX_SCHEDULE_SECONDS,
        description="delay each fire by up to this many seconds (the same delay on every "
        "replica: a hash of the schedule and the fire time)",
    )
    paused: StrictBool = Field(default=False, description="a paused schedule does not fire")

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        if not _ID.match(value):
            raise ValueError(
                f"{value!r} is not a schedule id: letters, digits, '_', '-' or '.', "
                "starting with a letter or digit, at most 64 characters"
            )
        return value

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, value: str) -> str:
        zone(value)
        return value

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                CronSim(value, _EPOCH)
            except (CronSimError, ValueError, IndexError) as exc:
                raise ValueError(f"{value!r} is not a cron expression: {exc}") from None
        return value

    @model_validator(mode="after")
    def _one_kind(self) -> ScheduleSpec:
        if (self.cron is None) == (self.every_seconds is None):
            raise ValueError("give exactly one of cron and every_seconds")
        if self.every_seconds is not None and self.jitter_seconds >= self.every_seconds:
            raise ValueError(
                f"jitter_seconds ({self.jitter_seconds}) must be less than every_seconds "
                f"({self.every_seconds}), or fires would pass each other"
            )
        return self


def zone(name: str) -> dt.tzinfo:
    """The time zone named ``name``; ValueError naming it when there is none."""
    if name.upper() == "UTC":
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(
            f"{name!r} is not a time zone: give an IANA name such as Europe/Berlin or UTC"
        ) from exc


def next_fire(spec: ScheduleSpec, after: dt.datetime) -> dt.datetime:
    """The schedule's first fire time strictly after ``after`` (aware, in UTC)."""
    if spec.every_seconds is not None:
        step = spec.every_seconds
        since = (after - _EPOCH) // dt.timedelta(seconds=1)  # whole seconds, floored
        return _EPOCH + dt.timedelta(seconds=(since // step + 1) * step)
    assert spec.cron is not None
    local = after.astimezone(zone(spec.timezone))
    fire = next(iter(CronSim(spec.cron, local)))
    # CronSim drops the microseconds: a fire equal to ``after`` once they are gone
    while fire.astimezone(UTC) <= after:
        fire = next(iter(CronSim(spec.cron, fire)))
    return fire.astimezone(UTC)


def upcoming(spec: ScheduleSpec, after: dt.datetime, count: int) -> list[dt.datetime]:
    """The next ``count`` fire times after ``after``, for a person."""
    fires: list[dt.datetime] = []
    at = after
    for _ in range(count):
        at = next_fire(spec, at)
        fires.append(at)
    return fires


def jitter(schedule_id: str, fire_at: dt.datetime, jitter_seconds: int) -> dt.timedelta:
    """How long the fire at ``fire_at`` waits: the same on every replica, up to
    ``jitter_seconds`` (whole milliseconds)."""
    if jitter_seconds <= 0:
        return dt.timedelta(0)
    digest = hashlib.sha256(f"{schedule_id}|{fire_at.isoformat()}".encode()).digest()
    fraction = int.from_bytes(digest[:8], "big") / 2**64
    return dt.timedelta(milliseconds=int(fraction * jitter_seconds * 1000))


def due_at(spec: ScheduleSpec, fire_at: dt.datetime) -> dt.datetime:
    """When the fire at ``fire_at`` is started: its time plus its jitter."""
    return fire_at + jitter(spec.id, fire_at, spec.jitter_seconds)


@dataclass(frozen=True, slots=True)
class Missed:
    """Fires found older than the catch-up window: skipped, never started."""

    count: int
    #: ``count`` is a lower bound (more were missed than were counted).
    at_least: bool
    first: dt.datetime
    last: dt.datetime


@dataclass(frozen=True, slots=True)
class Due:
    """What a pass does with a schedule: the fires to start now, in order, those it
    missed, and the next fire time after them (its ``due_at`` may be later)."""

    fires: list[dt.datetime]
    missed: Missed | None
    next_fire_at: dt.datetime


def due_fires(
    spec: ScheduleSpec,
    next_fire_at: dt.datetime,
    now: dt.datetime,
    *,
    limit: int = MAX_FIRES_PER_PASS,
) -> Due:
    """The fires from ``next_fire_at`` on that are due at ``now``: those inside the
    catch-up window to start (at most ``limit``: the rest next pass), those before it
    missed. A fire is due once its jittered time has come."""
    window = dt.timedelta(seconds=spec.catchup_window_seconds)
    at = next_fire_at
    missed: Missed | None = None
    if now - at > window:
        first, last, count = at, at, 0
        oldest_kept = now - window
        while at < oldest_kept and count < MAX_MISSED_COUNTED:
            last, count = at, count + 1
            at = next_fire(spec, at)
        if at < oldest_kept:  # too many to count: jump to the window
            at = next_fire(spec, oldest_kept - dt.timedelta(microseconds=1))
            missed = Missed(count, True, first, last)
        else:
            missed = Missed(count, False, first, last)
    fires: list[dt.datetime] = []
    while due_at(spec, at) <= now and len(fires) < limit:
        fires.append(at)
        at = next_fire(spec, at)
    return Due(fires, missed, at)


class Act(Enum):
    """What one fire does, given whether the schedule's last run still goes."""

    START = "start"
    SKIP = "skip"
    #: Kept for when the running run ends (buffer_one).
    BUFFER = "buffer"
    #: Cancel the running run, then start.
    CANCEL_AND_START = "cancel_and_start"


def on_fire(overlap: Overlap | Literal["buffer_all"], *, running: bool, buffered: bool) -> Act:
    """The overlap policy for one fire. ``buffered``: a fire already waits (buffer_one
    keeps one). ``buffer_all`` (backfills only) waits for every previous run."""
    if not running:
        return Act.START
    match overlap:
        case Overlap.ALLOW_ALL:
            return Act.START
        case Overlap.CANCEL_OTHER:
            return Act.CANCEL_AND_START
        case Overlap.BUFFER_ONE:
            return Act.SKIP if buffered else Act.BUFFER
        case "buffer_all":
            return Act.BUFFER
        case _:
            return Act.SKIP


def idempotency_key(schedule_id: str, fire_at: dt.datetime) -> str:
    """The start's idempotency key for one fire time: a fire starts one run, whoever
    fires it, however often."""
    return f"schedule:{schedule_id}:{fire_at.astimezone(UTC).isoformat()}"
