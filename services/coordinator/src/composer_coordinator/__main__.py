"""``composer-coordinator``: serve the worker protocol until SIGTERM, then drain."""

from __future__ import annotations

import logging
import sys

from composer_coordinator.server import start_server
from composer_coordinator.settings import CoordinatorSettings
from composer_coordinator.tokens import TokenConfigError, WorkerTokens
from composer_engine import Engine
from composer_service import StartupError, run, serving

log = logging.getLogger("composer.coordinator")


async def serve(settings: CoordinatorSettings) -> None:
    try:  # before connecting to anything: a bad token list is a configuration error
        WorkerTokens.parse(
            settings.worker_token, settings.worker_tokens, settings.builtin_worker_token
        )
    except TokenConfigError as exc:
        raise StartupError(str(exc)) from exc
    async with serving(settings.runtime("coordinator", pool_size=settings.pool_size)) as rt:
        engine = Engine(
            rt.pool,
            redis=rt.queue,
            redis_prefix=settings.redis_prefix,
            shards=settings.shards,
            batch_size=settings.batch_size,
            batches_in_flight=settings.batches_in_flight,
            max_node_input_bytes=settings.max_node_input_bytes,
            max_output_bytes=settings.max_output_bytes,
        )
        server, port = await start_server(
            engine,
            address=settings.grpc_addr,
            token=settings.worker_token,
            tokens=settings.worker_tokens,
            builtin_token=settings.builtin_worker_token,
            max_lease_seconds=settings.max_lease_seconds,
        )
        log.info("serving the worker protocol on %s (port %d)", settings.grpc_addr, port)
        await rt.stop.wait()
        log.info("stopping: draining in-flight calls for up to %.0fs", settings.drain_seconds)
        await server.stop(settings.drain_seconds)
        await engine.aclose()  # the outbox rows of what was published, deleted


def main() -> int:
    settings = CoordinatorSettings()
    return run("coordinator", lambda: serve(settings))


if __name__ == "__main__":
    sys.exit(main())
