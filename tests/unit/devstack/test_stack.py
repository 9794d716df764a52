"""Issue 17, item 1: what one stack owns (ports, database, Redis prefix), so a second
`make run` on the same machine can run beside the first; and the lock that refuses a
second stack on the same database or prefix."""

from __future__ import annotations

import stat
import uuid
from pathlib import Path

import pytest

import composer_service
from composer_devstack._embedded import SetupError
from composer_devstack._secrets import DEFAULTS, load_tokens, stack_env
from composer_devstack._stack import (
    EXIT_PORT_IN_USE,
    PORTS_PER_STACK,
    SERVICES,
    claimed,
    layout,
    layout_env,
    loaded_from_another_stack,
    parse_base,
    parse_replicas,
    replica_env,
    replica_name,
    write_stack_file,
)

SERVER = DEFAULTS["COMPOSER_DATABASE_URL"]


def test_unset_the_stack_is_the_standard_one() -> None:
    plan = layout(parse_base(None))
    assert (plan.api_port, plan.grpc_port) == (8080, 50051)
    assert plan.admin_ports == tuple(range(9100, 9100 + len(SERVICES)))
    env = layout_env(plan, SERVER)
    assert env["COMPOSER_DATABASE_URL"] == "postgresql://postgres@127.0.0.1:5432/composer"
    assert env["COMPOSER_REDIS_PREFIX"] == "composer"
    assert env["COMPOSER_GRPC_ADDR"] == "127.0.0.1:50051"
    assert layout(parse_base(" ")) == plan


def test_every_port_database_and_prefix_follow_the_base() -> None:
    plan = layout(parse_base("8200"))
    assert plan.ports() == list(range(8200, 8200 + PORTS_PER_STACK))
    env = layout_env(plan, SERVER)
    assert env == {
        "COMPOSER_API_PORT": "8200",
        "COMPOSER_GRPC_ADDR": "127.0.0.1:8201",
        "COMPOSER_DATABASE_URL": "postgresql://postgres@127.0.0.1:5432/composer_8200",
        "COMPOSER_REDIS_PREFIX": "composer-8200",
    }


def test_two_bases_apart_give_two_stacks_that_share_nothing() -> None:
    standard, first = layout(None), layout(8200)
    second = layout(8200 + PORTS_PER_STACK)
    for a, b in ((standard, first), (first, second), (standard, second)):
        assert not set(a.ports()) & set(b.ports())
        assert a.database != b.database
        assert a.redis_prefix != b.redis_prefix


def test_the_environment_still_wins_over_the_base(tmp_path: Path) -> None:
    plan = layout(8200)
    asked = {
        "COMPOSER_API_PORT": "9999",
        "COMPOSER_DATABASE_URL": "postgresql://h/mine",
        "COMPOSER_REDIS_PREFIX": "shared",
    }
    env = stack_env(asked, load_tokens(tmp_path), layout_env(plan, SERVER))
    assert env["COMPOSER_API_PORT"] == "9999"
    assert env["COMPOSER_DATABASE_URL"] == "postgresql://h/mine"
    assert env["COMPOSER_REDIS_PREFIX"] == "shared"
    assert env["COMPOSER_GRPC_ADDR"] == "127.0.0.1:8201"  # the base, where nothing is set
    assert env["COMPOSER_LOG_FORMAT"] == "human"  # the other defaults stay
    assert env["COMPOSER_HTTP_ALLOW_NETWORKS"] == "127.0.0.1:9999"  # the API port it has
    # --admin-base moves the admin ports alone
    assert layout(8200, admin_base=7000).admin_ports[0] == 7000


@pytest.mark.parametrize("value", ["eighty", "80", "65530", "-1"])
def test_a_bad_base_names_the_setting(value: str) -> None:
    with pytest.raises(SetupError, match=r"COMPOSER_PORT_BASE=.* is not a port from 1024 to"):
        parse_base(value)


def test_the_stack_file_says_how_to_reach_the_stack_and_is_private(tmp_path: Path) -> None:
    plan = layout(8200)
    env = stack_env({}, load_tokens(tmp_path), layout_env(plan, SERVER))
    path = write_stack_file(tmp_path, env, plan)
    text = path.read_text()
    values = dict(
        line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#")
    )
    # what the CLI, `composer migrate` and an SDK worker's WorkerConfig read
    assert values == {
        "COMPOSER_PORT_BASE": "8200",
        "COMPOSER_API_URL": "http://127.0.0.1:8200",
        "COMPOSER_GRPC_ADDR": "127.0.0.1:8201",
        "COMPOSER_REDIS_URL": env["COMPOSER_REDIS_URL"],
        "COMPOSER_REDIS_PREFIX": "composer-8200",
        "COMPOSER_DATABASE_URL": env["COMPOSER_DATABASE_URL"],
        "COMPOSER_WORKER_TOKEN": env["COMPOSER_WORKER_TOKEN"],
    }
    assert values["COMPOSER_DATABASE_URL"].endswith("/composer_8200")
    assert "api-gateway 8208" in text
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # a private Redis URL holds its password
    for secret in ("COMPOSER_API_TOKENS", "COMPOSER_BUILTIN_WORKER_TOKEN"):
        assert env[secret].split(":")[0] not in text


def test_the_stack_file_has_no_worker_token_where_tokens_are_scoped(tmp_path: Path) -> None:
    plan = layout(None)
    scoped = {"COMPOSER_WORKER_TOKENS": "team-a-token:payments"}
    env = stack_env(scoped, load_tokens(tmp_path, every_queue=False), layout_env(plan, SERVER))
    text = write_stack_file(tmp_path, env, plan).read_text()
    assert "COMPOSER_WORKER_TOKEN" not in text and "team-a-token" not in text
    assert "COMPOSER_PORT_BASE" not in text
    assert "COMPOSER_REDIS_PREFIX=composer\n" in text


def test_a_stack_env_loaded_for_another_base_is_not_taken_for_this_stack(
    tmp_path: Path,
) -> None:
    first = layout(8400)
    env = stack_env({}, load_tokens(tmp_path), layout_env(first, SERVER))
    text = write_stack_file(tmp_path, env, first).read_text()
    shell = dict(line.split("=", 1) for line in text.splitlines() if not line.startswith("#"))
    # the same stack again: what the shell loaded is its own
    assert loaded_from_another_stack(shell, tmp_path, first) == []
    # COMPOSER_PORT_BASE=8500 make run in that shell: the 8400 stack's values are ignored
    assert loaded_from_another_stack(shell, tmp_path, layout(8500)) == [
        "COMPOSER_GRPC_ADDR",
        "COMPOSER_DATABASE_URL",
        "COMPOSER_REDIS_PREFIX",
    ]
    # ...but a value set on purpose (not the file's) stays
    mine = shell | {"COMPOSER_REDIS_PREFIX": "mine"}
    assert "COMPOSER_REDIS_PREFIX" not in loaded_from_another_stack(mine, tmp_path, layout(8500))
    assert loaded_from_another_stack(shell, tmp_path / "nothing", layout(8500)) == []


def owned(database: str, prefix: str) -> dict[str, str]:
    return {
        "COMPOSER_DATABASE_URL": f"postgresql://postgres@127.0.0.1:5432/{database}",
        "COMPOSER_REDIS_URL": "redis://127.0.0.1:6379/0",
        "COMPOSER_REDIS_PREFIX": prefix,
    }


def test_a_second_stack_on_the_same_database_is_refused(tmp_path: Path) -> None:
    name = f"t{uuid.uuid4().hex[:10]}"
    with claimed(owned(name, f"{name}-a"), tmp_path / "first"):
        with (
            pytest.raises(SetupError) as refused,
            claimed(owned(name, f"{name}-b"), tmp_path / "second"),
        ):
            pass
        message = str(refused.value)
        assert f"the database 127.0.0.1:5432/{name} is in use by another running stack" in message
        assert str(tmp_path / "first") in message  # which stack holds it
        assert "COMPOSER_PORT_BASE" in message and "COMPOSER_DATABASE_URL" in message
        # another database and prefix: a stack of its own
        with claimed(owned(f"{name}_2", f"{name}-2"), tmp_path / "third"):
            pass
    with claimed(owned(name, f"{name}-b"), tmp_path / "second"):  # released with the first
        pass


def test_a_second_stack_on_the_same_redis_prefix_is_refused(tmp_path: Path) -> None:
    name = f"t{uuid.uuid4().hex[:10]}"
    with (
        claimed(owned(f"{name}_1", name), tmp_path / "first"),
        pytest.raises(SetupError, match=rf"prefix '{name}' is in use .*COMPOSER_REDIS_PREFIX"),
        claimed(owned(f"{name}_2", name), tmp_path / "second"),
    ):
        pass


def test_the_port_in_use_exit_code_is_the_services_one() -> None:
    assert EXIT_PORT_IN_USE == composer_service.EXIT_PORT_IN_USE


def test_replicas_are_one_of_each_unless_asked() -> None:
    names = [name for name, _ in SERVICES]
    assert parse_replicas(None) == dict.fromkeys(names, 1)
    assert parse_replicas("coordinator=2 timer=3")["coordinator"] == 2
    assert parse_replicas("coordinator=2,timer=3")["timer"] == 3
    both = parse_replicas("all=2,api-gateway=1")
    assert both == dict.fromkeys(names, 2) | {"api-gateway": 1}
    for bad, named in (
        ("coordinater=2", "coordinater"),
        ("timer=0", "timer=0"),
        ("timer", "timer"),
    ):
        with pytest.raises(SetupError, match=named):
            parse_replicas(bad)


def test_each_replica_gets_ports_of_its_own() -> None:
    assert replica_name("timer", 0, 1) == "timer"
    assert [replica_name("timer", r, 2) for r in range(2)] == ["timer-1", "timer-2"]
    coordinators = ["127.0.0.1:50051", "127.0.0.1:7001"]

    gateways = replica_env("api-gateway", 2, 9106, coordinators)
    assert gateways[0] == {"COMPOSER_ADMIN_PORT": "9106"}  # the stack's API port, from env
    assert gateways[1]["COMPOSER_API_PORT"] not in ("8080", gateways[1]["COMPOSER_ADMIN_PORT"])
    assert gateways[1]["COMPOSER_ADMIN_PORT"] != "9106"

    second = replica_env("coordinator", 2, 9100, coordinators)[1]
    assert second["COMPOSER_GRPC_ADDR"] == "127.0.0.1:7001"

    # the built-in workers know every coordinator, in one order (a run's calls go to
    # the one its id hashes to, whichever worker makes them)
    workers = replica_env("workers", 2, 9105, coordinators)
    assert [w["COMPOSER_COORDINATORS"] for w in workers] == [
        "127.0.0.1:50051,127.0.0.1:7001",
        "127.0.0.1:50051,127.0.0.1:7001",
    ]
    assert "COMPOSER_GRPC_ADDR" not in workers[0]
    # one coordinator: the workers keep the stack's address
    assert replica_env("workers", 2, 9105, coordinators[:1])[1].keys() == {"COMPOSER_ADMIN_PORT"}
