"""What sweeps did: the counts, and the metrics they feed."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, fields

from opentelemetry.metrics import CallbackOptions, Counter, ObservableGauge, Observation

from composer_common.telemetry import meter


@dataclass
class SweepReport:
    """What one sweep (or all of them, in ``Sweeper.totals``) did."""

    #: Attempts failed because their lease expired.
    expired: int = 0
    #: Attempts dispatched again because their dispatch was lost.
    redispatched: int = 0
    #: Stream entries delivered again (their consumer was gone: a delivery counted),
    #: entries a live worker left, put back uncounted, and entries acknowledged away.
    redelivered: int = 0
    returned: int = 0
    acked: int = 0
    #: Attempts failed for good for being delivered too often.
    given_up: int = 0
    #: Held attempts released: their queue had room (the admission step, §4.12).
    released: int = 0

    def add(self, other: SweepReport) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))


#: Entries waiting per stream at the last sweep (read by the gauge's callback).
PENDING: dict[str, int] = {}


@functools.cache
def _instruments() -> tuple[Counter, ObservableGauge]:
    m = meter()
    actions = m.create_counter(
        "composer_recovery_actions",
        description="Lease-sweeper recoveries, by kind (expired = lease expiries)",
    )

    def pending(options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(count, {"stream": stream}) for stream, count in PENDING.items()]

    gauge = m.create_observable_gauge(
        "composer_stream_pending",
        callbacks=[pending],
        description="Entries waiting or unacknowledged per queue stream",
    )
    return actions, gauge


def record(report: SweepReport) -> None:
    actions, _ = _instruments()
    for f in fields(report):
        count = getattr(report, f.name)
        if count:
            actions.add(count, {"kind": f.name})
