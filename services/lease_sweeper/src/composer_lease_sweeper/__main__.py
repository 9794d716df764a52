"""``composer-lease-sweeper``: recover what is stuck, every few seconds, until SIGTERM."""

from __future__ import annotations

import logging
import sys

from composer_engine import Engine
from composer_engine.sealing import sealer_from
from composer_lease_sweeper.loop import Sweeper
from composer_lease_sweeper.settings import SweeperSettings
from composer_service import StartupError, run, serving

log = logging.getLogger("composer.sweeper")


async def serve(settings: SweeperSettings) -> None:
    try:
        sealer = sealer_from(settings.encryption_keys)
    except ValueError as exc:
        raise StartupError(str(exc)) from None
    # One connection holds the singleton lock through a sweep; the rest apply events.
    async with serving(settings.runtime("lease-sweeper", pool_size=4)) as rt:
        engine = Engine(
            rt.pool,
            redis=rt.queue,
            redis_prefix=settings.redis_prefix,
            shards=settings.shards,
            max_node_input_bytes=settings.max_node_input_bytes,
            sealer=sealer,
        )
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
        try:
            await sweeper.run(rt.stop)
        finally:
            await engine.aclose()
        log.info("stopped after %d sweep(s): %s", sweeper.sweeps, sweeper.totals)


def main() -> int:
    settings = SweeperSettings()
    return run("lease-sweeper", lambda: serve(settings))


if __name__ == "__main__":
    sys.exit(main())
