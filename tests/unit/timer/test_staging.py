"""Which waits a timer pass stages ahead of their time, and when it looks again: a
thousand waits due at one moment must all be decided before it, and one lone wait
must not hold its run's lock for long (services/timer, docs/architecture.md §3.1)."""

from __future__ import annotations

import asyncio
import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from composer_engine.records import DueWait
from composer_timer.loop import Pass, Timer

T = dt.datetime(2026, 12, 4, 12, 0, tzinfo=dt.UTC)


def ms(n: float) -> dt.timedelta:
    return dt.timedelta(milliseconds=n)


def waits(n: int, at: dt.datetime, *, spread_ms: float = 0.0) -> list[DueWait]:
    return [
        DueWait(f"run-{at:%S%f}-{i}", f"task-{at:%S%f}-{i}", "nap", at + ms(spread_ms * i / n))
        for i in range(n)
    ]


@dataclass
class FakeEngine:
    """The engine's calls the timer makes, over a list of waiting timers: every fire
    fires (no busy run); what each group was, and its ``at``, is kept."""

    pending: list[DueWait]
    groups: list[tuple[list[str], dt.datetime | None]] = field(default_factory=list)
    #: When set, a staged group waits for it before it commits (its time has not come).
    hold: asyncio.Event | None = None

    @property
    def upkeep(self) -> FakeEngine:
        return self

    async def due_waits(self, *, limit: int, now: dt.datetime) -> list[DueWait]:
        return sorted((w for w in self.pending if w.wake_at <= now), key=lambda w: w.wake_at)[
            :limit
        ]

    async def next_wake_at(self) -> dt.datetime | None:
        return min((w.wake_at for w in self.pending), default=None)

    async def fire_timers(
        self, group: list[tuple[str, str, str]], *, at: dt.datetime | None = None
    ) -> list[bool]:
        if at is not None and self.hold is not None:
            await self.hold.wait()
        tasks = {task_id for _, task_id, _ in group}
        self.pending = [w for w in self.pending if w.task_id not in tasks]
        self.groups.append(([task_id for _, task_id, _ in group], at))
        return [True] * len(group)


def timer(engine: FakeEngine, now: dt.datetime, **options: Any) -> Timer:
    options.setdefault("lead_seconds", 1.0)  # the scheduling below, with room to show it
    return Timer(engine, redis=None, clock=lambda: now, **options)  # type: ignore[arg-type]


async def one_pass(engine: FakeEngine, now: dt.datetime, **options: Any) -> tuple[Timer, Pass]:
    """A pass at ``now``, once what it staged has committed."""
    t = timer(engine, now, **options)
    result = await t.fire_due()
    await t.settled()
    return t, result


async def test_a_thousand_waits_due_together_are_staged_back_from_their_time() -> None:
    engine = FakeEngine(waits(1000, T))
    early, first = await one_pass(engine, T - ms(1100))

    # four buckets of 250, 1 ms a wait, scheduled back from T and 20 ms more each:
    # the last starts at T - 270 ms, the first at T - 1,020, capped at the 1 s lead
    assert engine.groups == []
    assert first.next_stage_at == T - ms(1000)
    assert early._sleep_for(first) == 0.1

    fired = 0
    for n, start in enumerate((1000, 770, 520, 270), 1):
        await one_pass(engine, T - ms(start + 51))  # not yet: the window is 50 ms
        assert len(engine.groups) == n - 1
        t, _ = await one_pass(engine, T - ms(start))
        fired += t.staged
        assert [len(tasks) for tasks, _ in engine.groups] == [250] * n
    assert {at for _, at in engine.groups} == {T}  # each commits at its waits' time
    assert fired == 1000 and engine.pending == []


async def test_one_wait_is_staged_only_its_own_short_lead_ahead() -> None:
    engine = FakeEngine(waits(1, T))

    _, result = await one_pass(engine, T - ms(500))

    assert engine.groups == []
    assert result.next_stage_at == T - ms(21)  # the margin and one wait's cost

    await one_pass(engine, T - ms(20))

    assert engine.groups == [(["task-00000000-0"], T)]


async def test_a_bucket_commits_at_its_last_waits_time_and_is_at_most_the_bucket_wide() -> None:
    # 30 waits over 25 ms: buckets of 10 ms, each committed at the time of its last;
    # the last bucket's lead is 50 ms (30 waits and the margin), so all go by T - 20 ms
    engine = FakeEngine(waits(30, T, spread_ms=25))

    await one_pass(engine, T - ms(20))

    assert len(engine.groups) == 3
    for tasks, at in engine.groups:
        wake = [w.wake_at for w in waits(30, T, spread_ms=25) if w.task_id in tasks]
        assert at == max(wake)
        assert max(wake) - min(wake) <= ms(10)


async def test_due_waits_fire_at_once_and_count_in_the_lead_of_the_staged() -> None:
    due = waits(300, T - ms(5))
    ahead = waits(10, T + ms(100))
    engine = FakeEngine(due + ahead)

    # 10 waits alone would be staged 30 ms ahead; behind 300 due ones, 330 ms
    await one_pass(engine, T)

    assert sorted((len(tasks), at or T) for tasks, at in engine.groups) == [
        (10, T + ms(100)),
        (100, T),
        (100, T),
        (100, T),
    ]


async def test_staged_transactions_are_bounded_and_the_rest_looked_at_next() -> None:
    engine = FakeEngine(waits(1000, T))
    # late: every bucket's start has come, and two slots
    slow, result = await one_pass(engine, T - ms(200), stage_slots=2)

    assert [len(tasks) for tasks, _ in engine.groups] == [250, 250]
    assert slow._sleep_for(result) == slow.busy_retry_seconds  # soon, for the other two

    await one_pass(engine, T - ms(150), stage_slots=2)

    assert [len(tasks) for tasks, _ in engine.groups] == [250] * 4 and engine.pending == []


async def test_a_pass_does_not_wait_for_its_staged_groups_and_never_reads_them_twice() -> None:
    engine = FakeEngine(waits(500, T), hold=asyncio.Event())
    t = timer(engine, T - ms(270))  # 500 waits: from 520 and 270 ms ahead

    await t.fire_due()  # stages both buckets, which wait for their time (the hold)
    engine.pending += waits(3, T - ms(280))  # meanwhile, three waits came due
    await t.fire_due()

    assert engine.groups == [([w.task_id for w in waits(3, T - ms(280))], None)]
    engine.hold.set()  # type: ignore[union-attr]
    await t.settled()
    assert [len(tasks) for tasks, _ in engine.groups] == [3, 250, 250]
    assert t.fired == 503 and t.staged == 500


async def test_with_no_lead_a_wait_fires_only_once_due() -> None:
    engine = FakeEngine(waits(5, T))

    _, result = await one_pass(engine, T - ms(1), lead_seconds=0.0)

    assert engine.groups == [] and result.next_stage_at is None
    await one_pass(engine, T, lead_seconds=0.0)
    assert engine.groups == [([w.task_id for w in waits(5, T)], None)]
