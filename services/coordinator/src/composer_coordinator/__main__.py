"""``composer-coordinator``: serve the worker protocol until SIGTERM, then drain."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from composer_coordinator.server import ServerTls, start_server
from composer_coordinator.settings import CoordinatorSettings
from composer_coordinator.tokens import TokenConfigError, WorkerTokens
from composer_service import StartupError, listen_error, run, serving

log = logging.getLogger("composer.coordinator")


def tls_of(settings: CoordinatorSettings) -> ServerTls | None:
    """The TLS identity COMPOSER_GRPC_TLS_CERT and COMPOSER_GRPC_TLS_KEY name, read now;
    StartupError for one without the other or a file that cannot be read."""
    cert, key = settings.grpc_tls_cert, settings.grpc_tls_key
    if not cert and not key:
        return None
    if not cert or not key:
        missing = "COMPOSER_GRPC_TLS_KEY" if cert else "COMPOSER_GRPC_TLS_CERT"
        raise StartupError(
            f"{missing} is not set: serving TLS takes both COMPOSER_GRPC_TLS_CERT (the "
            "certificate chain, PEM) and COMPOSER_GRPC_TLS_KEY (its private key, PEM)"
        )
    pem = {}
    for variable, path in (("COMPOSER_GRPC_TLS_CERT", cert), ("COMPOSER_GRPC_TLS_KEY", key)):
        try:
            pem[variable] = Path(path).read_bytes()
        except OSError as exc:
            raise StartupError(
                f"{variable}={path} cannot be read ({exc.strerror}): point it at a PEM file "
                "this process may read"
            ) from exc
    return ServerTls(pem["COMPOSER_GRPC_TLS_CERT"], pem["COMPOSER_GRPC_TLS_KEY"])


async def serve(settings: CoordinatorSettings) -> None:
    try:  # before connecting to anything: bad or weak tokens are a configuration error
        tokens = WorkerTokens.parse(
            settings.worker_token, settings.worker_tokens, settings.builtin_worker_token
        )
    except TokenConfigError as exc:
        raise StartupError(str(exc)) from exc
    warnings = tokens.check_strength(dev_mode=settings.dev_mode)
    tls = tls_of(settings)
    engine_config = settings.engine_config(
        batch_size=settings.batch_size,
        batches_in_flight=settings.batches_in_flight,
        prepare_templates=True,
    )
    async with serving(
        settings.runtime("coordinator", pool_size=settings.pool_size, engine=engine_config)
    ) as rt:
        for warning in warnings:
            log.warning("%s", warning)
        engine = rt.engine
        try:
            server, port = await start_server(
                engine,
                address=settings.grpc_addr,
                token=settings.worker_token,
                tokens=settings.worker_tokens,
                builtin_token=settings.builtin_worker_token,
                max_lease_seconds=settings.max_lease_seconds,
                tls=tls,
                heartbeat_write_seconds=settings.heartbeat_write_seconds,
            )
        except (OSError, RuntimeError) as exc:  # grpc: RuntimeError("Failed to bind to address …")
            host, _, port_text = settings.grpc_addr.rpartition(":")
            raise listen_error(exc, host.strip("[]"), int(port_text), "COMPOSER_GRPC_ADDR") from exc
        log.info(
            "serving the worker protocol on %s (port %d, %s)",
            settings.grpc_addr,
            port,
            "TLS" if tls else "plaintext",
        )
        await rt.stop.wait()
        log.info("stopping: draining in-flight calls for up to %.0fs", settings.drain_seconds)
        await server.stop(settings.drain_seconds)


def main() -> int:
    settings = CoordinatorSettings()
    return run("coordinator", lambda: serve(settings))


if __name__ == "__main__":
    sys.exit(main())
