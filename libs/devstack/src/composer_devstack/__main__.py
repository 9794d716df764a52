"""``make run`` / ``composer up``: the whole stack on this machine.

1. PostgreSQL and Redis: the configured ones (COMPOSER_DATABASE_URL,
   COMPOSER_REDIS_URL), or private ones under .state/ when nothing answers
   but the servers are installed.
2. The ``composer`` database, created if missing, and migrated.
3. Every service, supervised: api-gateway, coordinator, outbox-enqueuer,
   timer, lease-sweeper, partition-manager and the built-in workers.

Development defaults (a dev API token, a worker token, HTTP nodes allowed
to call private addresses) apply only where the environment sets nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import logging
import os
import signal
import sys
from pathlib import Path

import composer_repo as repo
from composer_devstack._embedded import (
    PrivatePostgres,
    PrivateRedis,
    SetupError,
    host_of,
    postgres_answers,
    redis_answers,
    start_private_postgres,
    start_private_redis,
)
from composer_devstack._supervisor import Supervisor

DEV_API_TOKEN = "dev-token"
#: (name, module): every service of docs/architecture.md §1, in start order.
SERVICES = (
    ("coordinator", "composer_coordinator"),
    ("outbox-enqueuer", "composer_outbox_enqueuer"),
    ("timer", "composer_timer"),
    ("lease-sweeper", "composer_lease_sweeper"),
    ("partition-manager", "composer_partition_manager"),
    ("workers", "composer_workers"),
    ("api-gateway", "composer_api_gateway"),
)
DEFAULTS = {
    "COMPOSER_DATABASE_URL": "postgresql://postgres@127.0.0.1:5432/composer",
    "COMPOSER_REDIS_URL": "redis://127.0.0.1:6379/0",
    "COMPOSER_API_TOKENS": f"{DEV_API_TOKEN}:admin",
    # your own workers' token, for every queue
    "COMPOSER_WORKER_TOKEN": "dev-worker-token",
    # the built-in workers' own, for their queues only
    "COMPOSER_BUILTIN_WORKER_TOKEN": "dev-builtin-worker-token",
    "COMPOSER_HTTP_ALLOW_PRIVATE": "true",
    "COMPOSER_API_PORT": "8080",
    "COMPOSER_GRPC_ADDR": "127.0.0.1:50051",
    "COMPOSER_LOG_FORMAT": "human",  # the supervisor prints the lines; JSON would be for a collector
}
ADMIN_PORT_BASE = 9100

log = logging.getLogger("composer.devstack")


async def prepare(
    env: dict[str, str], state: Path, sup: Supervisor
) -> tuple[PrivatePostgres | None, PrivateRedis | None]:
    """Make sure PostgreSQL and Redis answer (starting private ones if needed), then migrate."""
    private_pg: PrivatePostgres | None = None
    private_redis: PrivateRedis | None = None
    if not await postgres_answers(env["COMPOSER_DATABASE_URL"]):
        sup.say(
            "devstack",
            f"no PostgreSQL answers at {host_of(env['COMPOSER_DATABASE_URL'])}: starting a private one under {state}/postgres",
        )
        private_pg = await asyncio.to_thread(start_private_postgres, state)
        env["COMPOSER_DATABASE_URL"] = private_pg.url
        sup.say("devstack", f"private PostgreSQL on port {private_pg.port}")
    if not await redis_answers(env["COMPOSER_REDIS_URL"]):
        sup.say(
            "devstack",
            f"no Redis answers at {host_of(env['COMPOSER_REDIS_URL'])}: starting a private one under {state}/redis",
        )
        private_redis = await start_private_redis(state)
        env["COMPOSER_REDIS_URL"] = private_redis.url
        sup.say("devstack", f"private Redis on port {private_redis.port}")
    url = env["COMPOSER_DATABASE_URL"]
    if await repo.create_database_if_missing(url):
        sup.say("devstack", f"created database {url.rsplit('/', 1)[-1]}")
    conn = await repo.connect(url)
    try:
        applied = await repo.migrate(conn)
    finally:
        await conn.close()
    sup.say(
        "devstack",
        f"database migrated ({len(applied)} new migration(s))"
        if applied
        else "database schema is up to date",
    )
    return private_pg, private_redis


async def up(args: argparse.Namespace, state: Path) -> int:
    env = {**DEFAULTS, **os.environ}
    sup = Supervisor(grace=args.grace, width=max(len(n) for n, _ in SERVICES))
    try:
        private_pg, private_redis = await prepare(env, state, sup)
    except (SetupError, repo.RepoError) as exc:
        sup.say("devstack", f"cannot start: {exc}", 31)
        return 2
    try:
        missing = []
        for i, (name, module) in enumerate(SERVICES):
            if importlib.util.find_spec(module) is None:
                missing.append(name)
                continue
            child_env = (
                env | {"COMPOSER_ADMIN_PORT": str(args.admin_base + i)} | tokens_of(name, env)
            )
            sup.add(name, [sys.executable, "-m", module], child_env)
        if missing:
            sup.say("devstack", f"not installed, not started: {', '.join(missing)}", 33)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, sup.stop)
        banner(sup, env)
        await sup.run()
        sup.say("devstack", "every service stopped")
    finally:
        if private_redis is not None:
            await private_redis.stop()
        if private_pg is not None:
            await asyncio.to_thread(private_pg.stop)
    return 0


def tokens_of(service: str, env: dict[str, str]) -> dict[str, str]:
    """The built-in workers present a token of their own, which the coordinator
    (COMPOSER_BUILTIN_WORKER_TOKEN) accepts for their queues only: http, python."""
    if service == "workers":
        return {"COMPOSER_WORKER_TOKEN": env["COMPOSER_BUILTIN_WORKER_TOKEN"]}
    return {}


def banner(sup: Supervisor, env: dict[str, str]) -> None:
    api = f"http://127.0.0.1:{env['COMPOSER_API_PORT']}"
    token = env["COMPOSER_API_TOKENS"].split(",")[0].split(":")[0]
    for line in (
        f"API       {api}   (docs: {api}/docs)",
        f"web UI    {api}/ui/   (sign in with the token below)",
        f"token     {token}",
        f'try       make demo   (or: COMPOSER_API_TOKEN={token} composer start hello --input \'{{"url": "{api}/healthz", "name": "you"}}\' --wait)',
        "stop      Ctrl-C",
    ):
        sup.say("devstack", line, 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="composer up",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--state", default=".state", help="folder for private PostgreSQL and Redis (default .state)"
    )
    parser.add_argument(
        "--grace", type=float, default=15.0, help="seconds services get to stop on Ctrl-C"
    )
    parser.add_argument(
        "--admin-base",
        type=int,
        default=ADMIN_PORT_BASE,
        help=f"admin ports (/healthz, /readyz, /metrics) are this + 0, 1, … in service order (default {ADMIN_PORT_BASE})",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    return asyncio.run(up(args, Path(args.state).resolve()))


if __name__ == "__main__":
    sys.exit(main())
