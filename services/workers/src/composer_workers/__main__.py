"""``composer-workers``: serve the built-in http and python queues until SIGTERM."""

from __future__ import annotations

import logging
import sys

import composer_queue
from composer_common import service
from composer_common.admin import serve_admin
from composer_executors import HttpPolicy, create_http_session
from composer_sdk import SdkError, Worker, WorkerConfig
from composer_workers.handlers import http_handler, python_handler
from composer_workers.settings import WorkersSettings

log = logging.getLogger("composer.workers")


async def serve(settings: WorkersSettings) -> None:
    queues = {q.strip() for q in settings.queues.split(",") if q.strip()}
    unknown = queues - {"http", "python"}
    if unknown:
        raise service.StartupError(
            f"COMPOSER_QUEUES names unknown built-in queues: {', '.join(sorted(unknown))} (http, python)"
        )
    worker = Worker(
        WorkerConfig(
            redis_url=settings.redis_url,
            coordinator=settings.grpc_addr,
            token=settings.worker_token,
            redis_prefix=settings.redis_prefix,
            shards=settings.shards,
            concurrency=settings.concurrency,
            lease_ttl=settings.lease_ttl_seconds,
        )
    )
    policy = HttpPolicy(
        allow_private=settings.http_allow_private,
        max_response_bytes=settings.http_max_response_bytes,
    )
    redis = composer_queue.connect(settings.redis_url)
    try:
        async with (
            create_http_session(policy) as session,
            serve_admin(
                settings.admin_port,
                {"redis": redis.ping},
                host=settings.admin_host,
            ),
        ):
            if "http" in queues:
                worker.add_handler("http", http_handler(session, policy))
            if "python" in queues:
                worker.add_handler("python", python_handler(settings.python_memory_limit_bytes))
            worker.install_signal_handlers()
            await worker.run()
    finally:
        await redis.close()


def main() -> int:
    settings = WorkersSettings()
    return service.run("workers", settings, lambda: serve(settings), startup_errors=(SdkError,))


if __name__ == "__main__":
    sys.exit(main())
