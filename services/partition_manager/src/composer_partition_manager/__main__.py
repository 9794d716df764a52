"""``composer-partition-manager``: keep partitions ahead and drop expired months, daily."""

from __future__ import annotations

import logging
import sys

import composer_repo as repo
from composer_common import service
from composer_common.admin import serve_admin
from composer_partition_manager.loop import PartitionManager
from composer_partition_manager.settings import PartitionSettings

log = logging.getLogger("composer.partitions")


async def serve(settings: PartitionSettings) -> None:
    pool = await repo.create_pool(settings.database_url, min_size=1, max_size=2)
    try:
        await repo.check_ready(pool)
        manager = PartitionManager(
            pool,
            months_ahead=settings.partitions_months_ahead,
            retention_days=settings.retention_days,
            interval_seconds=settings.partitions_interval_seconds,
        )
        stop = service.stop_on_signals()
        async with serve_admin(
            settings.admin_port,
            {"database": lambda: repo.check_ready(pool)},
            host=settings.admin_host,
        ):
            await manager.run(stop)
    finally:
        await pool.close()


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
