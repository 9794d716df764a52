"""The stack of docker-compose.yml, run by podman-compose against this machine's servers.

docker-compose.yml is used as it is — images, entry points, environment, healthchecks,
read-only root, init, the migration before the services — with override files,
written here, that say what differs on this machine (:func:`overrides_for`):

- PostgreSQL and Redis are the machine's (reached through tests.containers.relay), not the
  bundled containers: those are put in a profile nobody starts, the services' URLs
  point at ``host.containers.internal``, a database and a Redis prefix of this stack's
  own, and the dependencies on them are dropped (what remains is the migration, and
  the workers' wait on the coordinator);
- the API is published on a free loopback port instead of 8080 (the machine may
  be running ``make run``);
- the network is one made for this stack, so its gateway address — where the relay
  listens — is known before the first container starts.

Podman 4.3 runs no healthcheck by itself without systemd, so :meth:`Stack.wait_healthy`
runs each container's own healthcheck (the compose file's, /readyz on the admin
port) until it passes.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
#: Podman settings this kind of machine needs (runc; no raised rlimits): used unless
#: CONTAINERS_CONF names another file.
CONTAINERS_CONF = Path(__file__).with_name("containers.conf")
PODMAN_COMPOSE_VERSION = "1.6.0"
BUNDLED = ("postgres", "redis")  # the services the machine's servers stand in for
#: URLs the override points at the machine's servers, when a service sets them.
MACHINE_URLS = ("COMPOSER_DATABASE_URL", "COMPOSER_REDIS_URL", "COMPOSER_REDIS_PREFIX")


class Reset(dict[str, Any]):
    """``!reset {}``: the key as if the files before had not set it."""


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


_Dumper.add_representer(Reset, lambda d, v: d.represent_mapping("!reset", {}))


def podman_compose_command() -> list[str]:
    """podman-compose from PyPI, pinned, through uv (COMPOSER_TEST_PODMAN_COMPOSE overrides)."""
    given = os.environ.get("COMPOSER_TEST_PODMAN_COMPOSE")
    if given:
        return shlex.split(given)
    return [
        *shlex.split(os.environ.get("COMPOSER_TEST_UV", f"{shlex.quote(sys.executable)} -m uv")),
        "tool",
        "run",
        "--from",
        f"podman-compose=={PODMAN_COMPOSE_VERSION}",
        "podman-compose",
    ]


def podman_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPOSER_")}
    env.setdefault("CONTAINERS_CONF", str(CONTAINERS_CONF))
    return env


def podman(
    *args: str, check: bool = True, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``podman args…``; its output is captured and, when it fails, put in the error."""
    done = subprocess.run(
        ["podman", *args],
        capture_output=True,
        text=True,
        env=podman_env(),
        timeout=timeout,
        check=False,
    )
    if check and done.returncode != 0:
        raise AssertionError(
            f"podman {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        )
    return done


def overrides_for(
    compose: Mapping[str, Any], *, network: str, urls: Mapping[str, str], api_port: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The two override files for the compose file ``compose`` (see the module's doc).

    Two, because what replaces a nested mapping (depends_on) is written as a ``!reset``
    in the first and set anew in the second: podman-compose's ``!override`` takes
    one level only.
    """
    resets: dict[str, Any] = {}
    services: dict[str, Any] = {name: {"profiles": ["bundled"]} for name in BUNDLED}
    for name, spec in compose["services"].items():
        if name in BUNDLED:
            continue
        entry: dict[str, Any] = {}
        reset: dict[str, Any] = {}
        env = spec.get("environment") or {}
        ours = {key: urls[key] for key in MACHINE_URLS if key in env}
        if ours:
            entry["environment"] = ours
        depends = spec.get("depends_on") or {}
        if isinstance(depends, list):
            depends = {dep: {"condition": "service_started"} for dep in depends}
        if set(depends) & set(BUNDLED):
            reset["depends_on"] = Reset()
            kept = {dep: how for dep, how in depends.items() if dep not in BUNDLED}
            if kept:
                entry["depends_on"] = kept
        if spec.get("ports"):
            published = [p for p in spec["ports"] if str(p).endswith(":8080")]
            assert published == spec["ports"], f"compose {name}: unexpected ports {spec['ports']}"
            reset["ports"] = Reset()
            entry["ports"] = [f"127.0.0.1:{api_port}:8080"]
        if reset:
            resets[name] = reset
        if entry:
            services[name] = entry
    return (
        {"services": resets},
        {"networks": {"default": {"name": network, "external": True}}, "services": services},
    )


def dump_override(doc: Mapping[str, Any]) -> str:
    """An override file's text, with its ``!reset`` tags."""
    text: str = yaml.dump(doc, Dumper=_Dumper, sort_keys=False)
    return "# written by tests/containers for one run of the container test\n" + text


@dataclass
class Stack:
    """One compose project: its name, files, environment, and the podman calls on it.

    ``workdir`` holds the override file and ``compose.env`` (the tokens: keep it private).
    """

    project: str
    workdir: Path
    env: dict[str, str]

    @property
    def files(self) -> list[str]:
        files = [
            COMPOSE_FILE,
            self.workdir / "compose.reset.yml",
            self.workdir / "compose.override.yml",
        ]
        return [arg for path in files for arg in ("-f", str(path))]

    def compose(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Run podman-compose on this project; fail with its output when it fails."""
        env_file = self.workdir / "compose.env"
        command = [
            *podman_compose_command(),
            "--project-name",
            self.project,
            "--env-file",
            str(env_file),
            *self.files,
            *args,
        ]
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            env={**podman_env(), **self.env},
            cwd=ROOT,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise AssertionError(
                f"podman-compose {' '.join(args)} exited {done.returncode}:\n"
                f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
            )
        return done

    def write(self, overrides: tuple[Mapping[str, Any], Mapping[str, Any]]) -> None:
        reset, override = overrides
        (self.workdir / "compose.reset.yml").write_text(dump_override(reset))
        (self.workdir / "compose.override.yml").write_text(dump_override(override))
        env_file = self.workdir / "compose.env"
        env_file.write_text("".join(f"{k}={v}\n" for k, v in self.env.items()))
        env_file.chmod(0o600)

    def containers(self, service: str | None = None, *, running: bool = True) -> list[str]:
        """This project's containers (of one service), by name."""
        label = f"label=io.podman.compose.project={self.project}"
        args = ["ps", "--format", "{{.Names}}", "--filter", label]
        if not running:
            args.append("--all")
        if service:
            args += ["--filter", f"label=io.podman.compose.service={service}"]
        return sorted(podman(*args).stdout.split())

    def events(self) -> list[dict[str, Any]]:
        """What podman recorded of this project's containers so far, oldest first."""
        done = podman(
            "events",
            "--stream=false",
            "--since",
            "1h",
            "--format",
            "{{json .}}",
            "--filter",
            f"label=io.podman.compose.project={self.project}",
        )
        return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]

    def inspect(self, container: str) -> dict[str, Any]:
        (info,) = json.loads(podman("container", "inspect", container).stdout)
        assert isinstance(info, dict)
        return info

    def wait_healthy(self, names: Sequence[str], timeout: float = 120) -> float:
        """Run each container's own healthcheck until every one passes; the seconds it took."""
        start = time.monotonic()
        deadline = start + timeout
        pending = set(names)
        last: dict[str, str] = {}
        while pending:
            for name in sorted(pending):
                done = podman("healthcheck", "run", name, check=False, timeout=30)
                if done.returncode == 0:
                    pending.discard(name)
                else:
                    last[name] = (done.stdout + done.stderr).strip()
            if not pending:
                break
            if time.monotonic() > deadline:
                detail = "\n".join(
                    f"{n}: {last.get(n, '')}\n{self.logs(n)}" for n in sorted(pending)
                )
                raise AssertionError(
                    f"not healthy within {timeout:g} s: {sorted(pending)}\n{detail}"
                )
            time.sleep(0.5)  # the next poll; each healthcheck takes about a second anyway
        return time.monotonic() - start

    def logs(self, container: str, lines: int = 40) -> str:
        done = podman("logs", "--tail", str(lines), container, check=False)
        return (done.stdout + done.stderr).strip()


def strong_token() -> str:
    """A token the services accept outside COMPOSER_DEV_MODE (32+ random characters)."""
    return secrets.token_urlsafe(32)
