"""The partition-manager's settings, from ``COMPOSER_*`` environment variables."""

from __future__ import annotations

from composer_service import ServiceSettings


class PartitionSettings(ServiceSettings):
    #: Months created ahead of the current one (runs of a month need its partition).
    partitions_months_ahead: int = 3
    #: Run data is kept this many days after its month ends, then the month is dropped
    #: (never one that still has PENDING or RUNNING runs). 0 keeps everything forever.
    retention_days: int = 0
    #: Seconds between passes (one at start, then daily).
    partitions_interval_seconds: float = 86_400.0
