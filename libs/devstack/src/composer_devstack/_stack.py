"""What one stack owns on this machine, so a second ``make run`` can run beside the first.

A stack listens on its API port, the coordinator's gRPC port and one admin port
per service, and keeps its data in one PostgreSQL database and under one Redis
key prefix. With COMPOSER_PORT_BASE unset those are the standard ones (8080,
50051, 9100…, database ``composer``, prefix ``composer``); with
COMPOSER_PORT_BASE=N every one follows N: the API on N, gRPC on N+1, the admin
ports from N+2 in service order, database ``composer_N``, prefix
``composer-N``. A variable the environment sets (COMPOSER_API_PORT,
COMPOSER_GRPC_ADDR, COMPOSER_DATABASE_URL, COMPOSER_REDIS_PREFIX) still wins.

Two stacks must not share a database or a Redis prefix unless asked to: each
would run the other's workflows. So a running stack holds a lock on each (a
file lock in the temporary folder, released by the kernel however the stack
ends), and a second stack asking for the same is refused with the way out.

Where the stack listens is written to ``<state>/stack.env`` at each start, for
``make demo`` and a shell (``set -a; . .state/stack.env; set +a``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import composer_repo as repo
from composer_devstack._embedded import SetupError, free_port

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
#: The API, gRPC and one admin port per service (its first replica's: the others take
#: spare ports, see ``replica_ports``).
PORTS_PER_STACK = 2 + len(SERVICES)
STANDARD_API_PORT = 8080
STANDARD_GRPC_PORT = 50051
STANDARD_ADMIN_BASE = 9100
STACK_FILE = "stack.env"
#: The exit code of a service whose port another process holds
#: (composer_service.EXIT_PORT_IN_USE; the dev stack does not import the services' kit).
EXIT_PORT_IN_USE = 3
BASE_HINT = (
    "for a second stack on this machine set COMPOSER_PORT_BASE (README, "
    '"Two stacks on one machine"), e.g. COMPOSER_PORT_BASE=8200 make run'
)


@dataclass(frozen=True, slots=True)
class Layout:
    """Where a stack listens and what it keeps its data in."""

    base: int | None
    api_port: int
    grpc_port: int
    #: One per service, in SERVICES order.
    admin_ports: tuple[int, ...]
    #: The database name and Redis prefix the stack uses unless the environment says.
    database: str
    redis_prefix: str

    def ports(self) -> list[int]:
        return [self.api_port, self.grpc_port, *self.admin_ports]


def parse_base(value: str | None) -> int | None:
    """COMPOSER_PORT_BASE's value: None when unset or empty; SetupError naming it if bad."""
    if value is None or not value.strip():
        return None
    highest = 65535 - PORTS_PER_STACK + 1
    try:
        base = int(value)
    except ValueError:
        base = -1
    if not 1024 <= base <= highest:
        raise SetupError(
            f"COMPOSER_PORT_BASE={value!r} is not a port from 1024 to {highest}: the stack "
            f"takes {PORTS_PER_STACK} ports from it"
        )
    return base


def parse_replicas(text: str | None) -> dict[str, int]:
    """``--replicas`` / ``make run REPLICAS=…``: ``coordinator=2,timer=2`` (commas or
    spaces); ``all=N`` sets every service and later entries override it
    (``all=2 api-gateway=1``); one of each otherwise. SetupError naming a bad entry."""
    counts = dict.fromkeys((name for name, _ in SERVICES), 1)
    for entry in (text or "").replace(",", " ").split():
        name, sep, value = entry.partition("=")
        if not sep or not value.isdigit() or int(value) < 1:
            raise SetupError(f"replicas: {entry!r} is not <service>=<count of 1 or more>")
        if name == "all":
            counts = dict.fromkeys(counts, int(value))
        elif name in counts:
            counts[name] = int(value)
        else:
            raise SetupError(f"replicas: {name!r} is not a service (all, {', '.join(counts)})")
    return counts


def replica_name(service: str, index: int, count: int) -> str:
    """What the supervisor prefixes a replica's lines with: the service's name alone, or
    ``coordinator-1``, ``coordinator-2``… when it runs more than one."""
    return service if count == 1 else f"{service}-{index + 1}"


def replica_env(
    service: str, count: int, admin_port: int, coordinators: list[str]
) -> list[dict[str, str]]:
    """What each of the ``count`` replicas of ``service`` gets of its own: the first one
    the stack's ports (its admin port, the API port, the gRPC address), every other one
    spare ports; with more than one coordinator, the built-in workers get every
    coordinator's address, one list for all, and send each run's calls to one of them
    (COMPOSER_COORDINATORS), to the next while that one is away."""
    own: list[dict[str, str]] = [
        {"COMPOSER_ADMIN_PORT": str(admin_port if r == 0 else free_port())} for r in range(count)
    ]
    for r, extra in enumerate(own):
        if service == "api-gateway" and r:
            extra["COMPOSER_API_PORT"] = str(free_port())
        elif service == "coordinator" and r:
            extra["COMPOSER_GRPC_ADDR"] = coordinators[r]
        elif service == "workers" and len(coordinators) > 1:
            extra["COMPOSER_COORDINATORS"] = ",".join(coordinators)
    return own


def describe_replica(own: dict[str, str]) -> str:
    """A replica's own ports, for the banner."""
    parts = []
    if "COMPOSER_API_PORT" in own:
        parts.append(f"API http://127.0.0.1:{own['COMPOSER_API_PORT']}")
    if "COMPOSER_GRPC_ADDR" in own:
        parts.append(f"gRPC {own['COMPOSER_GRPC_ADDR']}")
    parts.append(f"admin {own['COMPOSER_ADMIN_PORT']}")
    return ", ".join(parts)


def layout(base: int | None, admin_base: int | None = None) -> Layout:
    """The standard stack (``base`` None) or the one every port of which follows ``base``;
    ``admin_base`` (``--admin-base``) moves the admin ports alone."""
    if base is None:
        first_admin = STANDARD_ADMIN_BASE if admin_base is None else admin_base
        return Layout(
            None,
            STANDARD_API_PORT,
            STANDARD_GRPC_PORT,
            tuple(range(first_admin, first_admin + len(SERVICES))),
            "composer",
            "composer",
        )
    first_admin = base + 2 if admin_base is None else admin_base
    return Layout(
        base,
        base,
        base + 1,
        tuple(range(first_admin, first_admin + len(SERVICES))),
        f"composer_{base}",
        f"composer-{base}",
    )


def layout_env(plan: Layout, default_database_url: str) -> dict[str, str]:
    """The stack's defaults that follow ``plan`` (the environment overrides each)."""
    return {
        "COMPOSER_API_PORT": str(plan.api_port),
        "COMPOSER_GRPC_ADDR": f"127.0.0.1:{plan.grpc_port}",
        "COMPOSER_DATABASE_URL": repo.database_url(default_database_url, plan.database),
        "COMPOSER_REDIS_PREFIX": plan.redis_prefix,
    }


#: What ``stack.env`` carries from the stack's environment, when set: what a client of the
#: stack needs (the CLI, ``composer migrate``, an SDK worker's WorkerConfig defaults).
STACK_FILE_KEYS = (
    "COMPOSER_GRPC_ADDR",
    "COMPOSER_GRPC_TLS_CA",
    "COMPOSER_REDIS_URL",
    "COMPOSER_REDIS_PREFIX",
    "COMPOSER_DATABASE_URL",
    "COMPOSER_WORKER_TOKEN",
)


def write_stack_file(state: Path, env: Mapping[str, str], plan: Layout) -> Path:
    """``<state>/stack.env``: what a client of the stack now starting needs, so that a shell
    that loaded it (with tokens.env, for the API token) reaches this stack and no other:
    the CLI (COMPOSER_API_URL), ``composer migrate`` (COMPOSER_DATABASE_URL) and an SDK
    worker, whose WorkerConfig reads the gRPC address, the Redis URL and prefix and the
    worker token from the environment. Mode 0600: a private Redis's URL holds its
    password, and the worker token is a secret."""
    admin = ", ".join(
        f"{name} {port}" for (name, _), port in zip(SERVICES, plan.admin_ports, strict=True)
    )
    lines = [
        "# Written by `make run` at each start: how to reach this stack (private, mode 0600).",
        "# `make demo` reads it; load it into a shell (with the tokens) for the CLI, `composer",
        "# migrate` and your own workers (WorkerConfig's defaults come from these):",
        "#   set -a; . .state/tokens.env; . .state/stack.env; set +a",
    ]
    if plan.base is not None:
        lines.append(f"COMPOSER_PORT_BASE={plan.base}")
    lines.append(f"COMPOSER_API_URL=http://127.0.0.1:{env['COMPOSER_API_PORT']}")
    lines += [f"{key}={env[key]}" for key in STACK_FILE_KEYS if env.get(key)]
    lines.append(f"# admin ports (/healthz /readyz /metrics): {admin}")
    path = state / STACK_FILE
    state.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(temporary, path)
    return path


#: What stack.env holds that follows the port base: loaded into a shell for one stack, it
#: must not pull a stack started on another base onto the first one's gRPC port, database
#: or Redis prefix.
_FOLLOW_THE_BASE = ("COMPOSER_GRPC_ADDR", "COMPOSER_DATABASE_URL", "COMPOSER_REDIS_PREFIX")


def loaded_from_another_stack(environ: Mapping[str, str], state: Path, plan: Layout) -> list[str]:
    """The variables of ``environ`` that a shell loaded from ``<state>/stack.env`` when it
    was written for another port base (``set -a; . .state/stack.env`` for the stack on
    8400, then ``COMPOSER_PORT_BASE=8500 make run``): each still has the value the file
    gives it, so it was loaded, not set for this stack. The stack ignores them."""
    try:
        text = (state / STACK_FILE).read_text()
    except OSError:
        return []
    written = dict(
        line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#")
    )
    base = None if plan.base is None else str(plan.base)
    if written.get("COMPOSER_PORT_BASE") == base:
        return []
    return [key for key in _FOLLOW_THE_BASE if key in written and environ.get(key) == written[key]]


def _lock_folder() -> Path:
    folder = Path(tempfile.gettempdir()) / f"composer-devstack-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


def database_name(url: str) -> str:
    """The database ``url`` names (its path, without a query)."""
    return urlsplit(url).path.lstrip("/")


def database_key(url: str) -> str:
    """The database ``url`` names, as host:port/name (what two stacks must not share)."""
    parts = urlsplit(url)
    return f"{parts.hostname or 'localhost'}:{parts.port or 5432}/{database_name(url)}"


def redis_key(url: str, prefix: str) -> str:
    """The Redis keys ``url`` and ``prefix`` name, as host:port/db and the prefix."""
    parts = urlsplit(url)
    db = parts.path.lstrip("/") or "0"
    return f"{parts.hostname or 'localhost'}:{parts.port or 6379}/{db} prefix {prefix!r}"


@contextlib.contextmanager
def claimed(env: Mapping[str, str], state: Path) -> Iterator[None]:
    """Hold the stack's database and Redis prefix for the block; SetupError when another
    stack on this machine holds either (it names that stack and the way out)."""
    owned = (
        (
            f"the database {database_key(env['COMPOSER_DATABASE_URL'])}",
            "COMPOSER_DATABASE_URL",
        ),
        (
            f"the Redis {redis_key(env['COMPOSER_REDIS_URL'], env['COMPOSER_REDIS_PREFIX'])}",
            "COMPOSER_REDIS_PREFIX",
        ),
    )
    folder = _lock_folder()
    with contextlib.ExitStack() as held:
        for what, setting in owned:
            key = what
            path = folder / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.lock"
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            held.callback(os.close, fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "unknown"
                raise SetupError(
                    f"{what} is in use by another running stack ({holder}): two stacks "
                    f"sharing it would run each other's workflows. Stop that one, or give "
                    f"this one its own: set COMPOSER_PORT_BASE (its ports, database and Redis "
                    f"prefix follow it) or {setting}"
                ) from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()}, state {state}".encode(), 0)
        yield
