"""``make run`` / ``composer up``: the whole stack on this machine.

1. PostgreSQL and Redis: the configured ones (COMPOSER_DATABASE_URL,
   COMPOSER_REDIS_URL), or private ones under .state/ when nothing answers
   but the servers are installed (the private Redis requires a password, kept
   in .state/redis/password).
2. The ``composer`` database, created if missing, and migrated.
3. Every service, supervised: api-gateway, coordinator, outbox-enqueuer,
   timer, lease-sweeper, partition-manager and the built-in workers.

Tokens: random ones, made on the first start and kept in <state>/tokens.env
(mode 0600; the API token, your workers' token for every queue — none when
COMPOSER_WORKER_TOKENS is set — and the built-in workers' own), printed in the
banner and reused on later starts. The other development defaults (local
servers) and the tokens apply only where the environment sets nothing. HTTP
nodes and webhooks keep the SSRF guard: the stack's own API port is the one
local address they may call. Each service gets only the secrets it uses: the
built-in workers hold no database URL and no API token.

Ports: the standard ones (API 8080, gRPC 50051, admin 9100…), or with
COMPOSER_PORT_BASE=N every one from N, and with them the database and Redis
prefix (``_stack.py``), so a second stack runs beside the first; where it
listens goes to <state>/stack.env. A port another process holds stops the
stack with one line naming the setting. The services stop with this process,
even when it is SIGKILLed.

Replicas: ``--replicas coordinator=2,timer=2`` (``make run REPLICAS="…"``) runs that
many of a service, each supervised and logged as ``coordinator-1``,
``coordinator-2``…; the first takes the ports above, the others spare ones,
printed at the start (another gateway's API, another coordinator's gRPC
address, which the built-in workers are given too, and their admin ports).
Every service is safe with replicas (docs/architecture.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import logging
import os
import signal
import sys
from pathlib import Path

import composer_repo as repo
from composer_common.process import forbid_dumping
from composer_common.supervised import die_with_parent
from composer_devstack._embedded import (
    PrivatePostgres,
    PrivateRedis,
    SetupError,
    free_port,
    host_of,
    postgres_answers,
    redis_answers,
    start_private_postgres,
    start_private_redis,
)
from composer_devstack._secrets import (
    DEFAULTS,
    TOKENS_FILE,
    load_tokens,
    scoped_workers,
    service_env,
    stack_env,
)
from composer_devstack._stack import (
    BASE_HINT,
    EXIT_PORT_IN_USE,
    PORTS_PER_STACK,
    SERVICES,
    STACK_FILE,
    STANDARD_ADMIN_BASE,
    Layout,
    claimed,
    database_name,
    describe_replica,
    layout,
    layout_env,
    loaded_from_another_stack,
    parse_base,
    parse_replicas,
    replica_env,
    replica_name,
    write_stack_file,
)
from composer_devstack._supervisor import Supervisor

__all__ = ["SERVICES", "main"]

log = logging.getLogger("composer.devstack")


async def servers(
    env: dict[str, str], state: Path, sup: Supervisor
) -> tuple[PrivatePostgres | None, PrivateRedis | None]:
    """Make sure PostgreSQL and Redis answer, starting private ones if needed (the
    stack's database name kept)."""
    private_pg: PrivatePostgres | None = None
    private_redis: PrivateRedis | None = None
    if not await postgres_answers(env["COMPOSER_DATABASE_URL"]):
        sup.say(
            "devstack",
            f"no PostgreSQL answers at {host_of(env['COMPOSER_DATABASE_URL'])}: starting a private one under {state}/postgres",
        )
        private_pg = await asyncio.to_thread(start_private_postgres, state)
        database = database_name(env["COMPOSER_DATABASE_URL"])
        env["COMPOSER_DATABASE_URL"] = repo.database_url(private_pg.url, database)
        sup.say("devstack", f"private PostgreSQL on port {private_pg.port}")
    if not await redis_answers(env["COMPOSER_REDIS_URL"]):
        sup.say(
            "devstack",
            f"no Redis answers at {host_of(env['COMPOSER_REDIS_URL'])}: starting a private one under {state}/redis",
        )
        private_redis = await start_private_redis(state)
        env["COMPOSER_REDIS_URL"] = private_redis.url
        sup.say(
            "devstack",
            f"private Redis on port {private_redis.port}, password in {private_redis.password_file}",
        )
    return private_pg, private_redis


async def migrate(url: str, sup: Supervisor) -> None:
    """Create the stack's database if missing and bring its schema up to date."""
    if await repo.create_database_if_missing(url):
        sup.say("devstack", f"created database {database_name(url)}")
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


async def up(args: argparse.Namespace, state: Path) -> int:
    sup = Supervisor(
        grace=args.grace,
        width=max(len(n) for n, _ in SERVICES),
        fatal={EXIT_PORT_IN_USE: f"a port of this stack is taken: stopping the stack; {BASE_HINT}"},
    )
    try:
        plan = layout(parse_base(args.port_base), args.admin_base)
        counts = parse_replicas(args.replicas)
    except SetupError as exc:
        sup.say("devstack", f"cannot start: {exc}", 31)
        return 2
    defaults = layout_env(plan, DEFAULTS["COMPOSER_DATABASE_URL"])
    tokens = load_tokens(state, every_queue=not scoped_workers(os.environ))
    stale = loaded_from_another_stack(os.environ, state, plan)
    if stale:
        sup.say(
            "devstack",
            f"ignoring {', '.join(stale)}: loaded from {state / STACK_FILE}, written for "
            "another port base; this stack takes its own",
            33,
        )
    environ = {k: v for k, v in os.environ.items() if k not in stale}
    env = stack_env(environ, tokens, defaults)
    private_pg: PrivatePostgres | None = None
    private_redis: PrivateRedis | None = None
    try:
        with contextlib.ExitStack() as held:
            try:
                private_pg, private_redis = await servers(env, state, sup)
                held.enter_context(claimed(env, state))
                await migrate(env["COMPOSER_DATABASE_URL"], sup)
            except (SetupError, repo.RepoError) as exc:
                sup.say("devstack", f"cannot start: {exc}", 31)
                return 2
            missing = []
            extras = []
            coordinators = [env["COMPOSER_GRPC_ADDR"]] + [
                f"127.0.0.1:{free_port()}" for _ in range(counts["coordinator"] - 1)
            ]
            for i, (name, module) in enumerate(SERVICES):
                if importlib.util.find_spec(module) is None:
                    missing.append(name)
                    continue
                replicas = replica_env(name, counts[name], plan.admin_ports[i], coordinators)
                for r, own in enumerate(replicas):
                    label = replica_name(name, r, counts[name])
                    sup.add(label, [sys.executable, "-m", module], service_env(name, env) | own)
                    if r:
                        extras.append(f"{label} {describe_replica(own)}")
            if missing:
                sup.say("devstack", f"not installed, not started: {', '.join(missing)}", 33)
            loop = asyncio.get_running_loop()
            # SIGHUP: the terminal closed; stop the services as on Ctrl-C
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                loop.add_signal_handler(sig, sup.stop)
            write_stack_file(state, env, plan)
            banner(sup, env, state, plan)
            if extras:
                sup.say("devstack", f"replicas  {'; '.join(extras)}", 1)
            await sup.run()
            sup.say("devstack", "every service stopped")
    finally:
        if private_redis is not None:
            await private_redis.stop()
        if private_pg is not None:
            await asyncio.to_thread(private_pg.stop)
    return sup.failure or 0


def banner(sup: Supervisor, env: dict[str, str], state: Path, plan: Layout) -> None:
    api = f"http://127.0.0.1:{env['COMPOSER_API_PORT']}"
    token = env["COMPOSER_API_TOKENS"].split(",")[0].rpartition(":")[0]
    admin = plan.admin_ports
    url = "" if plan.base is None else f"COMPOSER_API_URL={api} "
    workers = (
        f"workers   COMPOSER_WORKER_TOKEN={env['COMPOSER_WORKER_TOKEN']}   (your own workers, every queue)"
        if env.get("COMPOSER_WORKER_TOKEN")
        else "workers   the tokens of your COMPOSER_WORKER_TOKENS (no token for every queue "
        "unless it lists one as <token>:*)"
    )
    for line in (
        f"API       {api}   (docs: {api}/docs)",
        f"web UI    {api}/ui/   (sign in with the API token below)",
        f"API token {token}",
        workers,
        f"gRPC      {env['COMPOSER_GRPC_ADDR']}   (your workers' coordinator address)",
        f"admin     ports {admin[0]}-{admin[-1]} (/healthz /readyz /metrics), in service order",
        f"stack     database {database_name(env['COMPOSER_DATABASE_URL'])}, Redis prefix {env['COMPOSER_REDIS_PREFIX']}"
        f"; URLs in {state / STACK_FILE}",
        f"tokens    kept in {state / TOKENS_FILE} (mode 0600), reused on the next start",
        f'try       make demo   (or: {url}COMPOSER_API_TOKEN={token} composer start hello --input \'{{"url": "{api}/healthz", "name": "you"}}\' --wait)',
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
        "--port-base",
        default=os.environ.get("COMPOSER_PORT_BASE"),
        help=f"every port of the stack from this one: API +0, gRPC +1, admin ports +2… "
        f"({PORTS_PER_STACK} in all), and database composer_<base>, Redis prefix "
        "composer-<base> (default: COMPOSER_PORT_BASE; unset: API 8080, gRPC 50051, "
        f"admin {STANDARD_ADMIN_BASE}…, database and prefix composer)",
    )
    parser.add_argument(
        "--admin-base",
        type=int,
        default=None,
        help="admin ports (/healthz, /readyz, /metrics) are this + 0, 1, … in service order "
        f"(default: the port base + 2, or {STANDARD_ADMIN_BASE})",
    )
    parser.add_argument(
        "--replicas",
        default=None,
        metavar="SERVICE=N,…",
        help="replicas per service, e.g. coordinator=2,timer=2 (commas or spaces; all=2 for "
        "every service, later entries override it); one of each by default. The first "
        "replica takes the stack's ports, the others spare ones (printed at the start); "
        '`make run REPLICAS="coordinator=2 timer=2"` passes it',
    )
    parser.add_argument(
        "--parent-pid",
        type=int,
        default=None,
        help="stop the stack when this process, our parent, dies (even by SIGKILL): "
        "`make run` passes its own pid",
    )
    args = parser.parse_args(argv)
    if args.parent_pid is not None and not die_with_parent(args.parent_pid, grace=args.grace + 5):
        print(f"composer up: its parent (pid {args.parent_pid}) is gone", file=sys.stderr)
        return 1
    # it holds every token in its environment: no PYTHON node may read them (/proc/<pid>/environ)
    forbid_dumping()
    logging.basicConfig(level=logging.INFO)
    return asyncio.run(up(args, Path(args.state).resolve()))


if __name__ == "__main__":
    sys.exit(main())
