"""``composer-outbox-enqueuer``: publish committed outbox rows until SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

import composer_repo as repo
from composer_common import streams
from composer_common.logs import setup_logging
from composer_executors import HttpPolicy
from composer_outbox_enqueuer.loop import Enqueuer
from composer_outbox_enqueuer.settings import EnqueuerSettings

log = logging.getLogger("composer.outbox")


async def serve(settings: EnqueuerSettings) -> None:
    pool = await repo.create_pool(settings.database_url, max_size=4)
    redis = streams.connect(settings.redis_url)
    try:
        async with repo.transaction(pool) as conn:
            await repo.require_schema(conn)
        enqueuer = Enqueuer(
            pool,
            redis,
            prefix=settings.redis_prefix,
            shards=settings.shards,
            batch_size=settings.batch_size,
            poll_seconds=settings.poll_seconds,
            webhook_batch_size=settings.webhook_batch_size,
            webhook_timeout=settings.webhook_timeout_seconds,
            webhook_give_up=settings.webhook_give_up_seconds,
            http_policy=HttpPolicy(allow_private=settings.http_allow_private),
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        log.info(
            "publishing the outbox to %s streams (%d shards)",
            settings.redis_prefix,
            settings.shards,
        )
        await enqueuer.run(stop)
        log.info("stopped after publishing %d dispatch(es)", enqueuer.published)
    finally:
        await redis.aclose()
        await pool.close()


def main() -> int:
    settings = EnqueuerSettings()
    setup_logging("outbox-enqueuer", settings.log_level)
    try:
        asyncio.run(serve(settings))
    except repo.SchemaOutdated as exc:
        log.error("%s", exc)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
