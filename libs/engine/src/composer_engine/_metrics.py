"""The engine's metrics, recorded only after the transaction that decided them commits.

Instruments come from the global meter (composer_common.telemetry): without
``setup_telemetry`` they are no-ops, so libraries and tests pay nothing.
"""

from __future__ import annotations

from functools import cache

from opentelemetry.metrics import Counter, Histogram

from composer_common.telemetry import meter


class _Instruments:
    def __init__(self) -> None:
        m = meter()
        self.runs_started: Counter = m.create_counter(
            "composer_runs_started", description="Runs started"
        )
        self.runs_finished: Counter = m.create_counter(
            "composer_runs_finished", description="Runs that reached a terminal status, by status"
        )
        self.run_duration: Histogram = m.create_histogram(
            "composer_run_duration_seconds", unit="s", description="Run start to terminal status"
        )
        self.tasks_created: Counter = m.create_counter(
            "composer_tasks_created", description="Tasks created, by node type and state"
        )
        self.tasks_completed: Counter = m.create_counter(
            "composer_tasks_completed", description="Task attempts completed"
        )
        self.tasks_failed: Counter = m.create_counter(
            "composer_tasks_failed", description="Tasks failed for good"
        )
        self.tasks_retried: Counter = m.create_counter(
            "composer_tasks_retried", description="Failed attempts retried"
        )
        self.task_duration: Histogram = m.create_histogram(
            "composer_task_duration_seconds",
            unit="s",
            description="A task attempt's lease start to its report",
        )
        self.schedule_fires: Counter = m.create_counter(
            "composer_schedule_fires",
            description="Schedule fire times, by outcome: started, skipped (overlap or "
            "refused), missed (older than the catch-up window)",
        )
        self.events: Counter = m.create_counter(
            "composer_events", description="Events applied, by type and outcome"
        )


@cache
def instruments() -> _Instruments:
    return _Instruments()
