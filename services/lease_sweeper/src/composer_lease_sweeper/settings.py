"""The lease-sweeper's settings, from ``COMPOSER_*`` environment variables.

The shards and the lease TTL are the shared ones of ``composer_service.ServiceSettings``.
"""

from __future__ import annotations

from composer_service import ServiceSettings


class SweeperSettings(ServiceSettings):
    #: Seconds between sweeps (one replica sweeps at a time).
    sweeper_interval_seconds: float = 5.0
    #: A PENDING/QUEUED attempt with no outbox row and no stream entry for this long
    #: lost its dispatch (Redis lost its streams, say) and is dispatched again.
    sweeper_lost_after_seconds: float = 60.0
    #: An attempt delivered this many times without a result fails for good.
    sweeper_max_deliveries: int = 10
    #: Rows or entries handled per step of a sweep.
    sweeper_batch_size: int = 200
    #: Bulk operations (POST /v1/runs/bulk/cancel, /bulk/retry): runs settled per
    #: second at most, so a bulk action never crowds out the runs still going.
    operations_runs_per_second: float = 20.0
    #: Seconds between the bulk operations' ticks.
    operations_interval_seconds: float = 1.0
