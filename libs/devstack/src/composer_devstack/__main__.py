"""``make run`` / ``composer up``: the whole stack on this machine.

1. PostgreSQL and Redis: the configured ones (COMPOSER_DATABASE_URL,
   COMPOSER_REDIS_URL), or private ones under .state/ when nothing answers
   but the servers are installed.
2. The ``composer`` database, created if missing, and migrated.
3. Every service, supervised: api-gateway, coordinator, outbox-enqueuer,
   timer, lease-sweeper, partition-manager and the built-in workers.

Tokens: random ones, made on the first start and kept in <state>/tokens.env
(mode 0600; the API token, your workers' token and the built-in workers' own),
printed in the banner and reused on later starts. The other development
defaults (local servers, HTTP nodes allowed to call private addresses) and
the tokens apply only where the environment sets nothing. Each service gets
only the secrets it uses: the built-in workers hold no database URL and no
API token.
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
from composer_common.process import forbid_dumping
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
from composer_devstack._secrets import TOKENS_FILE, load_tokens, service_env, stack_env
from composer_devstack._supervisor import Supervisor

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
    env = stack_env(os.environ, load_tokens(state))
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
            child_env = service_env(name, env) | {"COMPOSER_ADMIN_PORT": str(args.admin_base + i)}
            sup.add(name, [sys.executable, "-m", module], child_env)
        if missing:
            sup.say("devstack", f"not installed, not started: {', '.join(missing)}", 33)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, sup.stop)
        banner(sup, env, state)
        await sup.run()
        sup.say("devstack", "every service stopped")
    finally:
        if private_redis is not None:
            await private_redis.stop()
        if private_pg is not None:
            await asyncio.to_thread(private_pg.stop)
    return 0


def banner(sup: Supervisor, env: dict[str, str], state: Path) -> None:
    api = f"http://127.0.0.1:{env['COMPOSER_API_PORT']}"
    token = env["COMPOSER_API_TOKENS"].split(",")[0].rpartition(":")[0]
    for line in (
        f"API       {api}   (docs: {api}/docs)",
        f"web UI    {api}/ui/   (sign in with the API token below)",
        f"API token {token}",
        f"workers   COMPOSER_WORKER_TOKEN={env['COMPOSER_WORKER_TOKEN']}   (your own workers, every queue)",
        f"tokens    kept in {state / TOKENS_FILE} (mode 0600), reused on the next start",
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
        "--state",
        default=".state",
        help="folder for the tokens and private PostgreSQL and Redis (default .state)",
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
    # it holds every token in its environment: no PYTHON node may read them (/proc/<pid>/environ)
    forbid_dumping()
    logging.basicConfig(level=logging.INFO)
    return asyncio.run(up(args, Path(args.state).resolve()))


if __name__ == "__main__":
    sys.exit(main())
