"""``serving()``: what a service holds while it serves, opened and closed in one place.

Every service's entry point reads its settings, opens ``serving(config)`` and
runs its loop inside the block. ``serving`` sets up the logs and telemetry,
opens the database pool and refuses an outdated schema (the fix named) before
anything runs, opens the Redis client, installs the stop signals and serves the
admin port with a readiness check for each of them; it closes them in reverse
order, whichever way the block ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

import composer_queue
import composer_repo as repo
from composer_engine import Engine
from composer_service.admin import Check, serve_admin
from composer_service.engines import EngineConfig, build_engine
from composer_service.errors import StartupError
from composer_service.hosts import LOOPBACK_HOSTS
from composer_service.logs import setup_logging
from composer_service.signals import stop_on_signals
from composer_service.telemetry import setup_telemetry

log = logging.getLogger("composer.service")


@dataclass(frozen=True, slots=True)
class RuntimeConfig:
    """What ``serving()`` opens, as plain values (``ServiceSettings.runtime`` builds it)."""

    #: The service's name in logs and telemetry (``api-gateway``, ``timer`` …).
    name: str
    #: None: the service needs no database.
    database_url: str | None = None
    pool_size: int = 4
    #: How old a statement's plan may grow on a pooled connection (repo.create_pool).
    plan_seconds: int = repo.PLAN_SECONDS
    #: Pooled connections plan with index probes and nested loops (repo.create_pool).
    index_plans: bool = True
    #: None: the service needs no Redis.
    redis_url: str | None = None
    #: ``redis_url`` is any node of a Redis Cluster.
    redis_cluster: bool = False
    #: None: no admin port; 0: any free port (tests).
    admin_port: int | None = None
    admin_host: str = "127.0.0.1"
    #: The Host names the admin port answers for (COMPOSER_ALLOWED_HOSTS), and IP addresses.
    allowed_hosts: tuple[str, ...] = LOOPBACK_HOSTS
    log_level: str = "INFO"
    #: None: JSON unless stderr is a terminal.
    json_logs: bool | None = None
    otlp_endpoint: str | None = None
    #: Set up the root logger (a test that reads its own log capture says False).
    logs: bool = True
    #: Install the OpenTelemetry SDK's providers (once per process).
    telemetry: bool = True
    #: The engine to build on the pool (and the Redis client, if any); None: none.
    engine: EngineConfig | None = None
    #: How long to wait for an unreachable database at start before giving up.
    startup_wait_seconds: float = 60.0


@dataclass(frozen=True, slots=True)
class Runtime:
    """What is open inside ``serving()``."""

    name: str
    #: Set by SIGTERM or SIGINT: the service's loop returns when it is.
    stop: asyncio.Event
    #: The admin port bound (None: none was asked for).
    admin_port: int | None
    _pool: repo.Pool | None
    _queue: composer_queue.RedisQueue | None
    _engine: Engine | None = None

    @property
    def pool(self) -> repo.Pool:
        if self._pool is None:
            raise RuntimeError(f"{self.name} was served without a database: give database_url")
        return self._pool

    @property
    def engine(self) -> Engine:
        """The engine ``RuntimeConfig.engine`` described (composer_service.engines)."""
        if self._engine is None:
            raise RuntimeError(f"{self.name} was served without an engine: give engine")
        return self._engine

    @property
    def queue(self) -> composer_queue.RedisQueue:
        """The queue client: streams and hints on Redis."""
        if self._queue is None:
            raise RuntimeError(f"{self.name} was served without Redis: give redis_url")
        return self._queue


@contextlib.asynccontextmanager
async def serving(
    config: RuntimeConfig, *, checks: Mapping[str, Check] | None = None
) -> AsyncIterator[Runtime]:
    """Open what ``config`` asks for, for the block; ``checks`` are readiness checks of the
    service's own, served on /readyz beside the database's and Redis's.

    Raises ``repo.SchemaOutdated`` before serving when the database is behind this code,
    StartupError for an engine whose COMPOSER_ENCRYPTION_KEYS are malformed or for a
    database that did not answer within ``startup_wait_seconds``.
    """
    if config.logs:
        setup_logging(config.name, config.log_level, json_lines=config.json_logs)
    if config.telemetry:
        setup_telemetry(config.name, otlp_endpoint=config.otlp_endpoint)
    ready: dict[str, Check] = {}
    async with contextlib.AsyncExitStack() as opened:
        pool: repo.Pool | None = None
        if config.database_url is not None:
            pool = await _open_pool(config)
            opened.push_async_callback(pool.close)
            ready["database"] = _database_check(pool)
        client: composer_queue.RedisQueue | None = None
        if config.redis_url is not None:
            client = composer_queue.connect(config.redis_url, cluster=config.redis_cluster)
            opened.push_async_callback(client.close)
            ready["redis"] = client.ping
        engine: Engine | None = None
        if config.engine is not None:
            if pool is None:
                raise RuntimeError(f"{config.name}: an engine needs a database: give database_url")
            engine = build_engine(pool, client, config.engine)
            # closed before the pool: it deletes the outbox rows of what it published
            opened.push_async_callback(engine.aclose)
        ready |= checks or {}
        stop = opened.enter_context(stop_on_signals())
        port = await opened.enter_async_context(
            serve_admin(
                config.admin_port,
                ready,
                host=config.admin_host,
                allowed_hosts=config.allowed_hosts,
            )
        )
        yield Runtime(config.name, stop, port, pool, client, engine)


async def _open_pool(config: RuntimeConfig) -> repo.Pool:
    """The pool, once the database answers: a service started beside its database (a
    deploy, a reboot, a PostgreSQL restart) waits for it, up to
    ``startup_wait_seconds``, instead of exiting with a traceback for its supervisor to
    restart. An outdated schema or bad credentials are not waited for."""
    assert config.database_url is not None
    deadline = asyncio.get_running_loop().time() + config.startup_wait_seconds
    backoff = composer_queue.Backoff(0.2, 5.0)
    while True:
        try:
            pool = await repo.create_pool(
                config.database_url,
                min_size=1,
                max_size=config.pool_size,
                plan_seconds=config.plan_seconds,
                index_plans=config.index_plans,
            )
        except (repo.Transient, OSError) as exc:
            problem: Exception = exc
        else:
            try:
                await repo.check_ready(pool)
                return pool
            except (repo.Transient, OSError) as exc:
                await pool.close()
                problem = exc
            except BaseException:
                await pool.close()
                raise
        wait = min(backoff.next(), deadline - asyncio.get_running_loop().time())
        if wait <= 0:
            raise StartupError(
                f"{config.name}: the database did not answer within "
                f"{config.startup_wait_seconds:g}s ({problem}): check COMPOSER_DATABASE_URL "
                "and that PostgreSQL is up"
            ) from problem
        log.warning(
            "%s: the database does not answer yet (%s); trying again in %.1fs",
            config.name,
            problem,
            wait,
        )
        await asyncio.sleep(wait)


def _database_check(pool: repo.Pool) -> Check:
    return lambda: repo.check_ready(pool)
