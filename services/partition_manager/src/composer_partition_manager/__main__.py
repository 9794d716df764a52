"""``composer-partition-manager``: keep partitions ahead and drop expired months, daily."""

from __future__ import annotations

import logging
import sys

import composer_repo as repo
from composer_common import service
from composer_engine.runtime import serving
from composer_partition_manager.loop import PartitionManager
from composer_partition_manager.settings import PartitionSettings

log = logging.getLogger("composer.partitions")


async def serve(settings: PartitionSettings) -> None:
    async with serving(settings, pool_size=2, redis=False) as rt:
        manager = PartitionManager(
            rt.pool,
            months_ahead=settings.partitions_months_ahead,
            retention_days=settings.retention_days,
            interval_seconds=settings.partitions_interval_seconds,
        )
        await manager.run(rt.stop)


def main() -> int:
    settings = PartitionSettings()
    return service.run(
        "partition-manager",
        settings,
        lambda: serve(settings),
        startup_errors=(repo.SchemaOutdated,),
    )


if __name__ == "__main__":
    sys.exit(main())
