"""``composer-lease-sweeper``: recover what is stuck, every few seconds, and run the
bulk operations on runs, until SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import sys

from composer_lease_sweeper.loop import Sweeper
from composer_lease_sweeper.operations import OperationRunner
from composer_lease_sweeper.settings import SweeperSettings
from composer_service import run, serving

log = logging.getLogger("composer.sweeper")


async def serve(settings: SweeperSettings) -> None:
    async with serving(
        settings.runtime("lease-sweeper", pool_size=4, engine=settings.engine_config())
    ) as rt:
        engine = rt.engine
        sweeper = Sweeper(
            engine,
            rt.queue,
            prefix=settings.redis_prefix,
            shards=settings.shards,
            interval_seconds=settings.sweeper_interval_seconds,
            lease_ttl=settings.lease_ttl_seconds,
            lost_after=settings.sweeper_lost_after_seconds,
            max_deliveries=settings.sweeper_max_deliveries,
            batch_size=settings.sweeper_batch_size,
        )
        log.info(
            "sweeping every %.1fs (lease TTL %.0fs, lost after %.0fs, at most %d deliveries)",
            settings.sweeper_interval_seconds,
            settings.lease_ttl_seconds,
            settings.sweeper_lost_after_seconds,
            settings.sweeper_max_deliveries,
        )
        operations = OperationRunner(
            engine,
            prefix=settings.redis_prefix,
            runs_per_second=settings.operations_runs_per_second,
            interval_seconds=settings.operations_interval_seconds,
        )
        # the runtime closes the engine, then the pool
        await asyncio.gather(sweeper.run(rt.stop), operations.run(rt.stop))
        log.info(
            "stopped after %d sweep(s): %s; %d run(s) settled by bulk operations",
            sweeper.sweeps,
            sweeper.totals,
            operations.settled,
        )


def main() -> int:
    settings = SweeperSettings()
    return run("lease-sweeper", lambda: serve(settings))


if __name__ == "__main__":
    sys.exit(main())
