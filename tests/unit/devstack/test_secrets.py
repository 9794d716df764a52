"""`make run`'s secrets (issue 15, items 5 and 6): random tokens made on the first start,
kept private under .state/ and reused after; the environment still overrides them; and
each service gets only the secrets it uses — the built-in workers, which run PYTHON
nodes, get neither the database URL nor an API token. With COMPOSER_WORKER_TOKENS set
there is no token for every queue (issue 25), and HTTP nodes keep the SSRF guard with
only the stack's own API port opened."""

from __future__ import annotations

import stat
from pathlib import Path

from composer_devstack import __main__ as devstack
from composer_devstack._secrets import (
    TOKENS_FILE,
    load_tokens,
    scoped_workers,
    service_env,
    stack_env,
)
from composer_executors import parse_networks
from composer_service.tokens import token_weakness


def test_first_start_makes_strong_distinct_tokens_in_a_private_file(tmp_path: Path) -> None:
    state = tmp_path / ".state"
    tokens = load_tokens(state)
    values = [tokens.api, tokens.worker, tokens.builtin_worker]
    assert None not in values and len(set(values)) == 3
    for value in values:
        assert value is not None and token_weakness(value) is None  # the services' rule
    path = state / TOKENS_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_text()
    assert f"COMPOSER_API_TOKEN={tokens.api}\n" in text
    assert f"COMPOSER_WORKER_TOKEN={tokens.worker}\n" in text
    assert f"COMPOSER_BUILTIN_WORKER_TOKEN={tokens.builtin_worker}\n" in text


def test_later_starts_reuse_them_and_tighten_a_loose_file(tmp_path: Path) -> None:
    first = load_tokens(tmp_path)
    (tmp_path / TOKENS_FILE).chmod(0o644)
    assert load_tokens(tmp_path) == first
    assert stat.S_IMODE((tmp_path / TOKENS_FILE).stat().st_mode) == 0o600


def test_a_token_missing_from_the_file_is_made_and_the_others_kept(tmp_path: Path) -> None:
    first = load_tokens(tmp_path)
    path = tmp_path / TOKENS_FILE
    path.write_text(f"COMPOSER_API_TOKEN={first.api}\n")
    again = load_tokens(tmp_path)
    assert again.api == first.api
    assert again.worker is not None and token_weakness(again.worker) is None
    assert again.worker != first.worker
    assert f"COMPOSER_WORKER_TOKEN={again.worker}\n" in path.read_text()


def test_the_generated_tokens_configure_the_stack_and_the_environment_overrides(
    tmp_path: Path,
) -> None:
    tokens = load_tokens(tmp_path)
    env = stack_env({}, tokens)
    assert env["COMPOSER_API_TOKENS"] == f"{tokens.api}:admin"
    assert env["COMPOSER_WORKER_TOKEN"] == tokens.worker
    assert env["COMPOSER_BUILTIN_WORKER_TOKEN"] == tokens.builtin_worker
    assert "COMPOSER_DEV_MODE" not in env  # strong tokens need no development mode
    mine = stack_env({"COMPOSER_API_TOKENS": "mine:admin", "HOME": "/h"}, tokens)
    assert mine["COMPOSER_API_TOKENS"] == "mine:admin"
    assert mine["HOME"] == "/h"
    assert mine["COMPOSER_WORKER_TOKEN"] == tokens.worker


def test_each_service_gets_only_the_secrets_it_uses(tmp_path: Path) -> None:
    tokens = load_tokens(tmp_path)
    env = stack_env(
        {
            "COMPOSER_API_TOKEN": "the-cli-token-in-your-shell",
            "COMPOSER_WORKER_TOKENS": "team-token:payments",
            "PGPASSWORD": "pw",
            "COMPOSER_ENCRYPTION_KEYS": "k1:c2VhbGluZyBrZXkgb2YgdGhlIHN0YWNr",
            "PATH": "/usr/bin",
        },
        tokens,
    )
    workers = service_env("workers", env)
    for secret in (
        "COMPOSER_DATABASE_URL",
        "COMPOSER_API_TOKENS",
        "COMPOSER_API_TOKEN",
        "COMPOSER_WORKER_TOKENS",
        "COMPOSER_BUILTIN_WORKER_TOKEN",
        "COMPOSER_ENCRYPTION_KEYS",  # they get opened inputs; PYTHON nodes must not read keys
        "PGPASSWORD",
    ):
        assert secret not in workers, secret
    assert tokens.api not in workers.values() and tokens.worker not in workers.values()
    assert workers["COMPOSER_WORKER_TOKEN"] == tokens.builtin_worker  # their own, two queues
    assert workers["COMPOSER_REDIS_URL"] == env["COMPOSER_REDIS_URL"]
    assert workers["COMPOSER_GRPC_ADDR"] == env["COMPOSER_GRPC_ADDR"]
    assert workers["PATH"] == "/usr/bin"

    gateway = service_env("api-gateway", env)
    assert gateway["COMPOSER_ENCRYPTION_KEYS"] == env["COMPOSER_ENCRYPTION_KEYS"]
    assert gateway["COMPOSER_API_TOKENS"] == f"{tokens.api}:admin"
    assert "COMPOSER_WORKER_TOKEN" not in gateway and "COMPOSER_WORKER_TOKENS" not in gateway

    coordinator = service_env("coordinator", env)
    assert coordinator["COMPOSER_WORKER_TOKEN"] == tokens.worker
    assert coordinator["COMPOSER_BUILTIN_WORKER_TOKEN"] == tokens.builtin_worker
    assert coordinator["COMPOSER_WORKER_TOKENS"] == "team-token:payments"
    assert "COMPOSER_API_TOKENS" not in coordinator

    for name, _ in devstack.SERVICES:
        started = service_env(name, env)
        assert "COMPOSER_API_TOKEN" not in started
        assert ("COMPOSER_DATABASE_URL" in started) == (name != "workers")


def test_the_workflows_secrets_go_to_the_built_in_workers_alone(tmp_path: Path) -> None:
    """``{{ secret.NAME }}`` is resolved by the built-in workers (docs/secrets.md): they get
    the COMPOSER_SECRET_* variables and COMPOSER_SECRETS_DIR although their names say
    SECRET (and KEY), and no other service holds them."""
    tokens = load_tokens(tmp_path / ".state")
    env = stack_env(
        {
            "COMPOSER_SECRET_API_KEY": "sk_live_1",
            "COMPOSER_SECRETS_DIR": "/run/secrets/composer",
            "COMPOSER_WEBHOOK_SECRET": "whsec",
        },
        tokens,
    )
    workers = service_env("workers", env)
    assert workers["COMPOSER_SECRET_API_KEY"] == "sk_live_1"
    assert workers["COMPOSER_SECRETS_DIR"] == "/run/secrets/composer"
    assert "COMPOSER_WEBHOOK_SECRET" not in workers
    for name, _ in devstack.SERVICES:
        if name != "workers":
            started = service_env(name, env)
            assert "COMPOSER_SECRET_API_KEY" not in started
            assert "COMPOSER_SECRETS_DIR" not in started


def test_with_scoped_worker_tokens_no_token_for_every_queue_is_made_or_kept(
    tmp_path: Path,
) -> None:
    """Issue 25: the token for every queue that an earlier `make run` wrote to
    .state/tokens.env leased a ``payments`` task although the user had scoped the
    workers with COMPOSER_WORKER_TOKENS. Now it is dropped from the file and from the
    coordinator's environment; the other tokens stay as they were."""
    first = load_tokens(tmp_path)  # a default start: the token for every queue is made
    assert first.worker is not None
    environ = {"COMPOSER_WORKER_TOKENS": "team-secret-token-0123456789abcdef:payments"}
    assert scoped_workers(environ) and not scoped_workers({"COMPOSER_WORKER_TOKENS": " , "})

    scoped = load_tokens(tmp_path, every_queue=not scoped_workers(environ))
    assert scoped.worker is None
    assert (scoped.api, scoped.builtin_worker) == (first.api, first.builtin_worker)
    text = (tmp_path / TOKENS_FILE).read_text()
    assert first.worker not in text and "COMPOSER_WORKER_TOKEN=" not in text
    assert stat.S_IMODE((tmp_path / TOKENS_FILE).stat().st_mode) == 0o600

    env = stack_env(environ, scoped)
    coordinator = service_env("coordinator", env)
    assert "COMPOSER_WORKER_TOKEN" not in coordinator
    assert coordinator["COMPOSER_WORKER_TOKENS"] == environ["COMPOSER_WORKER_TOKENS"]
    assert service_env("workers", env)["COMPOSER_WORKER_TOKEN"] == scoped.builtin_worker

    again = load_tokens(tmp_path)  # the user unset COMPOSER_WORKER_TOKENS: a new one
    assert again.worker is not None and again.worker != first.worker


def test_http_nodes_keep_the_guard_and_may_call_the_stacks_api_port_only(
    tmp_path: Path,
) -> None:
    """Issue 25: `make run` turned the SSRF guard off, and an HTTP node read an admin
    port's /metrics. The guard stays on; the API's own port is opened for `make demo`."""
    tokens = load_tokens(tmp_path)
    env = stack_env({"COMPOSER_API_PORT": "8200"}, tokens)
    assert env.get("COMPOSER_HTTP_ALLOW_PRIVATE", "false") == "false"
    assert env["COMPOSER_HTTP_ALLOW_NETWORKS"] == "127.0.0.1:8200"
    assert [str(n) for n in parse_networks(env["COMPOSER_HTTP_ALLOW_NETWORKS"])] == [
        "127.0.0.1/32:8200"
    ]
    for name in ("workers", "outbox-enqueuer"):
        assert service_env(name, env)["COMPOSER_HTTP_ALLOW_NETWORKS"] == "127.0.0.1:8200"

    mine = stack_env({"COMPOSER_HTTP_ALLOW_NETWORKS": "10.20.0.0/16"}, tokens)
    assert mine["COMPOSER_HTTP_ALLOW_NETWORKS"] == "10.20.0.0/16,127.0.0.1:8080"
    # the environment may still turn the guard off, as before
    assert (
        stack_env({"COMPOSER_HTTP_ALLOW_PRIVATE": "true"}, tokens)["COMPOSER_HTTP_ALLOW_PRIVATE"]
        == "true"
    )
