"""The timer's settings, from ``COMPOSER_*`` environment variables."""

from __future__ import annotations

from composer_service import ServiceSettings


class TimerSettings(ServiceSettings):
    #: Waits read per pass (due, or due within the lead), oldest first.
    timer_batch_size: int = 1000
    #: Groups of due waits fired at once, each group one transaction (a group commit).
    timer_concurrency: int = 2
    #: Due waits fired in one transaction.
    timer_group_size: int = 100
    #: The longest sleep without a hint: how late a wait can fire when its hint is lost.
    timer_poll_seconds: float = 5.0
    #: How soon to look again at a due wait whose run another transaction held.
    timer_busy_retry_seconds: float = 0.05
    #: How long before their time waits due together may be staged: decided under
    #: their runs' locks and committed at their time (0: each fires once due).
    timer_lead_seconds: float = 0.25
    #: The time a staged wait is given to be decided in (its bucket's is scheduled
    #: back from its time, after the buckets due before it).
    timer_stage_cost_seconds: float = 0.001
    #: Waits due within this of each other are staged as one bucket, committed at the
    #: last one's time.
    timer_bucket_seconds: float = 0.01
    #: Staged transactions at once, each holding a connection until its time.
    timer_stage_slots: int = 8
    #: Due schedules claimed per pass, and fired at once (docs/architecture.md §6.8).
    schedule_batch_size: int = 100
    #: The longest sleep between schedule passes: how late a fire can be when its
    #: schedule was written without a hint reaching the timer (a deploy).
    schedule_poll_seconds: float = 1.0
