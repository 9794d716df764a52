"""The lease-sweeper's settings, from ``COMPOSER_*`` environment variables."""

from __future__ import annotations

import composer_queue as cq
from composer_common.settings import CommonSettings


class SweeperSettings(CommonSettings):
    shards: int = cq.DEFAULT_SHARDS
    #: Seconds between sweeps (one replica sweeps at a time).
    sweeper_interval_seconds: float = 5.0
    #: The workers' lease TTL (the same variable they read): a stream entry pending
    #: longer than this on a consumer is on a dead one and is claimed back.
    lease_ttl_seconds: float = 30.0
    #: A PENDING/QUEUED attempt with no outbox row and no stream entry for this long
    #: lost its dispatch (Redis lost its streams, say) and is dispatched again.
    sweeper_lost_after_seconds: float = 60.0
    #: An attempt delivered this many times without a result fails for good.
    sweeper_max_deliveries: int = 10
    #: Rows or entries handled per step of a sweep.
    sweeper_batch_size: int = 200
