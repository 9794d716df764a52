"""The gateway's metrics, on the OpenTelemetry meter every service exports.

They are read where every other metric is, on the admin port's /metrics
(and pushed over OTLP when configured). Routes are labelled by their
template (``/v1/runs/{run_id}``), never by the raw path, so label
cardinality stays bounded.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from weakref import WeakSet

from opentelemetry.metrics import CallbackOptions, Counter, Histogram, Observation

from composer_api_gateway.waiters import RunWaiters
from composer_common.telemetry import meter


class _Instruments:
    def __init__(self) -> None:
        m = meter()
        #: The long-poll waiters of every app served in this process (one, outside tests).
        self.waiters: WeakSet[RunWaiters] = WeakSet()
        self.requests: Counter = m.create_counter(
            "composer_api_requests", description="HTTP requests answered, by route and status"
        )
        self.request_duration: Histogram = m.create_histogram(
            "composer_api_request_duration_seconds",
            unit="s",
            description="Time to answer a request, by route",
        )
        m.create_observable_gauge(
            "composer_api_result_waiters",
            callbacks=[self._waiting],
            description="Requests long-polling for a run's result now",
        )
        m.create_observable_counter(
            "composer_api_run_finished_hints",
            callbacks=[self._hints],
            description="Run-finished hints received over the shared subscription",
        )

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.add(1, {"method": method, "route": route, "status": status})
        self.request_duration.record(seconds, {"method": method, "route": route})

    def _waiting(self, options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(sum(w.waiting for w in self.waiters))]

    def _hints(self, options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(sum(w.hints_received for w in self.waiters))]


@cache
def instruments() -> _Instruments:
    return _Instruments()
