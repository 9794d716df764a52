"""``composer-partition-manager``: keep partitions ahead and drop expired months, daily."""

from __future__ import annotations

import sys

from composer_partition_manager.loop import PartitionManager
from composer_partition_manager.settings import PartitionSettings
from composer_service import run, serving


async def serve(settings: PartitionSettings) -> None:
    async with serving(
        settings.runtime(
            "partition-manager", pool_size=2, redis=False, engine=settings.engine_config()
        )
    ) as rt:
        manager = PartitionManager(
            rt.engine,
            months_ahead=settings.partitions_months_ahead,
            retention_days=settings.retention_days,
            interval_seconds=settings.partitions_interval_seconds,
        )
        await manager.run(rt.stop)


def main() -> int:
    settings = PartitionSettings()
    return run("partition-manager", lambda: serve(settings))


if __name__ == "__main__":
    sys.exit(main())
