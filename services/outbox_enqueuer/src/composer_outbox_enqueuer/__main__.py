"""``composer-outbox-enqueuer``: publish committed outbox rows until SIGTERM."""

from __future__ import annotations

import logging
import sys

from composer_engine.sealing import sealer_from
from composer_executors import HttpPolicy, parse_networks
from composer_outbox_enqueuer.loop import Enqueuer
from composer_outbox_enqueuer.settings import EnqueuerSettings
from composer_service import StartupError, run, serving
from composer_service.tokens import check_tokens

log = logging.getLogger("composer.outbox")


async def serve(settings: EnqueuerSettings) -> None:
    try:
        allow_networks = parse_networks(settings.http_allow_networks)
        sealer = sealer_from(settings.encryption_keys)
    except ValueError as exc:
        raise StartupError(str(exc)) from None
    if settings.webhook_secret:  # a placeholder or short secret signs nothing worth checking
        for warning in check_tokens(
            [("COMPOSER_WEBHOOK_SECRET", settings.webhook_secret)], dev_mode=settings.dev_mode
        ):
            log.warning("%s", warning)
    async with serving(
        settings.runtime("outbox-enqueuer", pool_size=4, engine=settings.engine_config())
    ) as rt:
        enqueuer = Enqueuer(
            rt.engine,
            rt.queue,
            prefix=settings.redis_prefix,
            batch_size=settings.batch_size,
            grace=settings.outbox_grace_seconds,
            poll_seconds=settings.poll_seconds,
            webhook_batch_size=settings.webhook_batch_size,
            webhook_timeout=settings.webhook_timeout_seconds,
            webhook_give_up=settings.webhook_give_up_seconds,
            webhook_secret=settings.webhook_secret,
            sealer=sealer,
            run_events=True,  # the events between runs their committer did not deliver
            http_policy=HttpPolicy(
                allow_private=settings.http_allow_private, allow_networks=allow_networks
            ),
        )
        log.info(
            "publishing the outbox to %s streams (%d shards)",
            settings.redis_prefix,
            settings.shards,
        )
        await enqueuer.run(rt.stop)  # the runtime closes the engine, then the pool
        log.info("stopped after publishing %d dispatch(es)", enqueuer.published)


def main() -> int:
    settings = EnqueuerSettings()
    return run("outbox-enqueuer", lambda: serve(settings))


if __name__ == "__main__":
    sys.exit(main())
