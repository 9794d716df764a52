"""``composer-api-gateway``: serve the REST API until SIGTERM, then drain.

The API port serves the API, its documents and a liveness /healthz; readiness
and metrics are on the admin port (COMPOSER_ADMIN_PORT) like every service's.
"""

from __future__ import annotations

import logging
import sys

from aiohttp import web

from composer_api_gateway.app import create_app
from composer_api_gateway.auth import parse_tokens
from composer_api_gateway.hosts import parse_hosts
from composer_api_gateway.settings import GatewaySettings
from composer_api_gateway.state import GatewayConfig
from composer_engine.sealing import sealer_from
from composer_service import StartupError, listen_error, run, serving
from composer_service.tokens import check_tokens

log = logging.getLogger("composer.api")


def check_settings(settings: GatewaySettings) -> list[str]:
    """Refuse, before connecting to anything, a malformed or weak COMPOSER_API_TOKENS
    (composer_service.tokens) and an empty COMPOSER_ALLOWED_HOSTS (StartupError); returns
    the warnings to log (weak tokens that COMPOSER_DEV_MODE lets through)."""
    try:
        tokens = parse_tokens(settings.api_tokens)
        parse_hosts(settings.allowed_hosts)
        sealer_from(settings.encryption_keys)
    except ValueError as exc:
        raise StartupError(str(exc)) from exc
    return check_tokens(
        (
            (f"COMPOSER_API_TOKENS entry {i} ({token.role.label})", token.secret.decode())
            for i, token in enumerate(tokens, 1)
        ),
        dev_mode=settings.dev_mode,
    )


def config_from(settings: GatewaySettings) -> GatewayConfig:
    return GatewayConfig(
        redis_prefix=settings.redis_prefix,
        tokens=settings.api_tokens,
        max_body_bytes=settings.api_max_body_bytes,
        max_run_input_bytes=settings.max_run_input_bytes,
        max_signal_bytes=settings.max_signal_bytes,
        max_context_bytes=settings.max_context_bytes,
        max_wait_seconds=settings.api_max_wait_seconds,
        result_poll_seconds=settings.api_result_poll_seconds,
        allowed_hosts=parse_hosts(settings.allowed_hosts),
        worker_live_seconds=settings.worker_live_seconds,
        examples=settings.api_examples,
    )


async def serve(settings: GatewaySettings) -> None:
    warnings = check_settings(settings)
    async with serving(
        settings.runtime(
            "api-gateway",
            pool_size=settings.pool_size,
            engine=settings.engine_config(prepare_templates=True),
        )
    ) as rt:
        for warning in warnings:
            log.warning("%s", warning)
        app = create_app(config_from(settings), engine=rt.engine, redis=rt.queue)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=settings.drain_seconds)
        await runner.setup()
        try:
            site = web.TCPSite(
                runner, settings.api_host, settings.api_port, reuse_port=settings.api_share_port
            )
            try:
                await site.start()
            except OSError as exc:
                raise listen_error(
                    exc, settings.api_host, settings.api_port, "COMPOSER_API_PORT"
                ) from exc
            log.info(
                "serving the REST API on http://%s:%d%s",
                settings.api_host,
                settings.api_port,
                " (shared with the other api-gateways on it)" if settings.api_share_port else "",
            )
            await rt.stop.wait()
            log.info(
                "stopping: draining in-flight requests for up to %.0fs", settings.drain_seconds
            )
        finally:
            await runner.cleanup()


def main() -> int:
    settings = GatewaySettings()
    return run("api-gateway", lambda: serve(settings))


if __name__ == "__main__":
    sys.exit(main())
