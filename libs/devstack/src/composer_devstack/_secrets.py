"""The stack's tokens and who holds them.

``make run`` ships no token: on the first start it makes three random ones (the
API's admin token, your own workers' token, the built-in workers' own) and keeps
them in ``.state/tokens.env`` (mode 0600), reused on every later start; the
environment still overrides each. So the services need no development mode to
accept them, and a token is not the same on every developer's machine.

Your own workers' token serves every queue. Whoever sets COMPOSER_WORKER_TOKENS
(tokens scoped to queues) gets no such token: none is made, one kept from an
earlier start is dropped from the file, and the coordinator is given none, so a
token for every queue exists only where that list says ``token:*`` (issue 25).

Each service gets only the secrets it uses (``service_env``): the API tokens go
to the api-gateway alone, the worker tokens to the coordinator, and the built-in
workers — whose PYTHON nodes run whatever a definition says — get their own
token and neither the database URL nor any API token.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

TOKENS_FILE = "tokens.env"
#: (variable in the file, what it is), in the file's order.
_FILE_KEYS = (
    (
        "COMPOSER_API_TOKEN",
        "the API's admin token: the CLI's COMPOSER_API_TOKEN, the web UI's sign-in",
    ),
    ("COMPOSER_WORKER_TOKEN", "your own workers' token (every queue): WorkerConfig(token=...)"),
    ("COMPOSER_BUILTIN_WORKER_TOKEN", "the built-in workers' own (the http and python queues)"),
)

DEFAULTS = {
    "COMPOSER_DATABASE_URL": "postgresql://postgres@127.0.0.1:5432/composer",
    "COMPOSER_REDIS_URL": "redis://127.0.0.1:6379/0",
    "COMPOSER_API_PORT": "8080",
    "COMPOSER_GRPC_ADDR": "127.0.0.1:50051",
    "COMPOSER_LOG_FORMAT": "human",  # the supervisor prints the lines; JSON would be for a collector
    # the shop examples/price-check.yaml calls, on the stack's own API port (offline)
    "COMPOSER_API_EXAMPLES": "true",
}

#: A secret → the services that get it; every other service starts without it.
_HOLDERS: dict[str, frozenset[str]] = {
    "COMPOSER_API_TOKENS": frozenset({"api-gateway"}),
    "COMPOSER_API_TOKEN": frozenset(),  # the CLI's, if your shell exports it
    "COMPOSER_WORKER_TOKENS": frozenset({"coordinator"}),
    "COMPOSER_BUILTIN_WORKER_TOKEN": frozenset({"coordinator"}),
    # the workers get COMPOSER_BUILTIN_WORKER_TOKEN under this name (service_env)
    "COMPOSER_WORKER_TOKEN": frozenset({"coordinator"}),
}
#: What the built-in workers never hold, beyond _HOLDERS: a COMPOSER_* variable whose
#: name has one of these (a secret some other service uses: the database URL, a webhook
#: signing secret, the payload keys, …), and libpq's PG* variables (PGPASSWORD, PGSERVICEFILE, …).
_NOT_FOR_WORKERS = ("DATABASE", "TOKEN", "SECRET", "PASSWORD", "KEY")


@dataclass(frozen=True, slots=True)
class Tokens:
    api: str
    #: Your own workers' token, for every queue; None when COMPOSER_WORKER_TOKENS is set.
    worker: str | None
    builtin_worker: str


def new_token() -> str:
    """43 random URL-safe characters (256 bits), which the services' rule accepts."""
    return secrets.token_urlsafe(32)


def scoped_workers(environ: Mapping[str, str]) -> bool:
    """Whether the user configured worker tokens scoped to queues (COMPOSER_WORKER_TOKENS)."""
    return bool(environ.get("COMPOSER_WORKER_TOKENS", "").strip(" ,"))


def load_tokens(state: Path, *, every_queue: bool = True) -> Tokens:
    """The tokens in ``state``/tokens.env, made (and written, mode 0600) where missing.

    ``every_queue`` False (COMPOSER_WORKER_TOKENS is set): no token for every queue is
    made, and one the file holds is removed from it."""
    path = state / TOKENS_FILE
    found: dict[str, str] = {}
    if path.exists():
        if stat.S_IMODE(path.stat().st_mode) & 0o077:
            path.chmod(0o600)  # it holds an admin token: nobody else may read it
        for line in path.read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep and not key.startswith("#") and value.strip():
                found[key.strip()] = value.strip()
    keys = [key for key, _ in _FILE_KEYS if every_queue or key != "COMPOSER_WORKER_TOKEN"]
    values = {key: found.get(key) or new_token() for key in keys}
    if any(found.get(key) != value for key, value in values.items()) or set(found) - set(keys):
        _write(path, values)
    return Tokens(
        values["COMPOSER_API_TOKEN"],
        values.get("COMPOSER_WORKER_TOKEN"),
        values["COMPOSER_BUILTIN_WORKER_TOKEN"],
    )


def _write(path: Path, values: Mapping[str, str]) -> None:
    """Replace the file at once, created 0600 (never readable by others, not even briefly)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        "# Made by `make run` on its first start and reused after; the environment overrides",
        "# each. Private (mode 0600). Load into a shell: set -a; . .state/tokens.env; set +a",
    ]
    for key, meaning in _FILE_KEYS:
        if key in values:
            lines += [f"# {meaning}", f"{key}={values[key]}"]
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(temporary, path)


def stack_env(
    environ: Mapping[str, str], tokens: Tokens, layout: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The stack's environment: the development defaults, the ports, database and Redis
    prefix of its ``layout`` (``_stack.layout_env``) and the generated tokens, under
    whatever ``environ`` sets.

    HTTP nodes and webhooks keep the SSRF guard on: of this machine's addresses they may
    call the stack's own API port only (127.0.0.1:<COMPOSER_API_PORT>, which ``make
    demo``'s workflow calls), added to whatever COMPOSER_HTTP_ALLOW_NETWORKS the
    environment names; the admin ports' /metrics, the database and every other local
    port stay refused (issue 25). COMPOSER_HTTP_ALLOW_PRIVATE=true in the environment
    still turns the guard off."""
    generated = {
        "COMPOSER_API_TOKENS": f"{tokens.api}:admin",
        "COMPOSER_BUILTIN_WORKER_TOKEN": tokens.builtin_worker,
    }
    if tokens.worker is not None:
        generated["COMPOSER_WORKER_TOKEN"] = tokens.worker
    env = {**DEFAULTS, **(layout or {}), **generated, **environ}
    own_api = f"127.0.0.1:{env['COMPOSER_API_PORT']}"
    given = env.get("COMPOSER_HTTP_ALLOW_NETWORKS", "").strip(" ,")
    env["COMPOSER_HTTP_ALLOW_NETWORKS"] = f"{given},{own_api}" if given else own_api
    return env


def _workflow_secret(key: str) -> bool:
    """A secret workflows reference (``{{ secret.NAME }}``, docs/secrets.md), or where
    they are mounted: the built-in workers resolve them, and only they hold them."""
    return key.startswith("COMPOSER_SECRET_") or key == "COMPOSER_SECRETS_DIR"


def service_env(service: str, env: Mapping[str, str]) -> dict[str, str]:
    """What ``service`` is started with: ``env`` without the secrets it does not use."""
    own = {
        k: v
        for k, v in env.items()
        if (k not in _HOLDERS or service in _HOLDERS[k])
        and (service == "workers" or not _workflow_secret(k))
    }
    if service != "workers":
        return own
    own = {
        k: v
        for k, v in own.items()
        if _workflow_secret(k)
        or (
            not k.startswith("PG")
            and not (k.startswith("COMPOSER_") and any(word in k for word in _NOT_FOR_WORKERS))
        )
    }
    # the built-in workers present their own token, which serves http and python only
    own["COMPOSER_WORKER_TOKEN"] = env["COMPOSER_BUILTIN_WORKER_TOKEN"]
    return own
