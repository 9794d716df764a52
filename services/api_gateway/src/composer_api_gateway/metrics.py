"""A minimal Prometheus text exposition of the gateway's own counters.

Deliberately small and dependency-free: observability proper (OpenTelemetry,
engine and queue metrics) is a later piece of work and will replace this.
Routes are labelled by their template (``/v1/runs/{run_id}``), never by the
raw path, so label cardinality stays bounded.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Metrics:
    def __init__(self) -> None:
        self._requests: defaultdict[tuple[str, str, int], int] = defaultdict(int)
        self._buckets: defaultdict[tuple[str, str], list[int]] = defaultdict(
            lambda: [0] * (len(_BUCKETS) + 1)
        )
        self._sums: defaultdict[tuple[str, str], float] = defaultdict(float)
        #: Gauges read at scrape time (name → (help, read)).
        self.gauges: dict[str, tuple[str, Callable[[], float]]] = {}

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        self._requests[(method, route, status)] += 1
        buckets = self._buckets[(method, route)]
        for i, bound in enumerate(_BUCKETS):
            if seconds <= bound:
                buckets[i] += 1
        buckets[-1] += 1
        self._sums[(method, route)] += seconds

    def render(self) -> str:
        lines = [
            "# HELP composer_api_requests_total HTTP requests answered, by route and status.",
            "# TYPE composer_api_requests_total counter",
        ]
        for (method, route, status), n in sorted(self._requests.items()):
            lines.append(
                f'composer_api_requests_total{{method="{method}",route="{_esc(route)}",status="{status}"}} {n}'
            )
        lines += [
            "# HELP composer_api_request_seconds Time to answer a request, by route.",
            "# TYPE composer_api_request_seconds histogram",
        ]
        for (method, route), buckets in sorted(self._buckets.items()):
            labels = f'method="{method}",route="{_esc(route)}"'
            for bound, n in zip(_BUCKETS, buckets, strict=False):
                lines.append(f'composer_api_request_seconds_bucket{{{labels},le="{bound}"}} {n}')
            lines.append(f'composer_api_request_seconds_bucket{{{labels},le="+Inf"}} {buckets[-1]}')
            lines.append(
                f"composer_api_request_seconds_sum{{{labels}}} {self._sums[(method, route)]}"
            )
            lines.append(f"composer_api_request_seconds_count{{{labels}}} {buckets[-1]}")
        for name, (help_text, read) in sorted(self.gauges.items()):
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", f"{name} {read()}"]
        return "\n".join(lines) + "\n"


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
