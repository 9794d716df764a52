"""The engine's metrics, recorded only after the transaction that decided them commits.

Instruments come from the global meter (composer_common.telemetry): without
``setup_telemetry`` they are no-ops, so libraries and tests pay nothing.
"""

from __future__ import annotations

import threading
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
        self.attempts_held: Counter = m.create_counter(
            "composer_attempts_held",
            description="Task attempts the admission step held, by limit kind (queue, "
            "node_concurrency, rate_limit) and key (at most MAX_KEY_LABELS keys a "
            "process, the others as 'other')",
        )
        self.attempts_released: Counter = m.create_counter(
            "composer_attempts_released",
            description="Held task attempts released, by limit kind and key (as "
            "composer_attempts_held; held minus released, summed over processes: waiting)",
        )


@cache
def instruments() -> _Instruments:
    return _Instruments()


#: The most distinct keys a process labels a limit metric with; the keys after them
#: (in the order the process first meets them) are counted under ``other``, so a
#: template rendering a key per customer cannot grow the series without bound.
MAX_KEY_LABELS = 100
OTHER = "other"


class KeyLabels:
    """The label of each limit key: its own for the first ``cap`` keys met, then
    ``other``."""

    def __init__(self, cap: int = MAX_KEY_LABELS) -> None:
        self._cap = cap
        self._known: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, key: str) -> str:
        if key in self._known:
            return key
        with self._lock:
            if len(self._known) < self._cap:
                self._known.add(key)
                return key
        return OTHER


@cache
def key_labels() -> KeyLabels:
    return KeyLabels()


def limit_of(name: str) -> tuple[str, str]:
    """A held attempt's limit as metrics label it: (kind, key) from a queue name, a node
    concurrency key (``global:…``, ``workflow:…:…``) or a rate key (``rate:…``)."""
    if name.startswith("rate:"):
        return "rate_limit", name.partition(":")[2]
    if ":" in name:
        return "node_concurrency", name
    return "queue", name


def count_limits(counter: Counter, names: list[str], labels: KeyLabels | None = None) -> None:
    """Add one per name to ``counter``, labelled by its limit's kind and bounded key
    (``labels``: the process's)."""
    if not names:
        return
    labels = labels or key_labels()
    tally: dict[tuple[str, str], int] = {}
    for name in names:
        kind, key = limit_of(name)
        label = (kind, key if labels(f"{kind}|{key}") != OTHER else OTHER)
        tally[label] = tally.get(label, 0) + 1
    for (kind, key), n in tally.items():
        counter.add(n, {"kind": kind, "key": key})
