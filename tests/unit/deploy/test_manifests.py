"""deploy/ and docker-compose.yml, checked structurally (no Docker engine runs here).

Everything is derived from the tree: the services are the folders of services/
with a pyproject.toml, the console scripts are the ``[project.scripts]`` of the
workspace's pyproject files, and the environment variables a container may set
are the fields of the ``*Settings`` classes under libs/*/src and services/*/src.
So a new service fails here until compose and Kubernetes know it, and a
renamed setting fails here until the manifests follow.
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import ipaddress
import re
import sys
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from pydantic_settings import BaseSettings

from composer_service import serve_admin

ROOT = Path(__file__).resolve().parents[3]
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
DOCKERIGNORE = ROOT / "deploy" / "Dockerfile.dockerignore"
K8S = ROOT / "deploy" / "k8s"

IMAGE_REPO = "composer/"  # composer/<service>[:tag]
NAME_LABEL = "app.kubernetes.io/name"
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
WILDCARD = {"0.0.0.0", "::", "[::]"}

Doc = dict[str, Any]


# ---- the tree: services, packages, console scripts, settings ------------------------------


@dataclass(frozen=True)
class Package:
    name: str
    path: Path
    dependencies: frozenset[str]
    scripts: Mapping[str, str]
    modules: frozenset[str]  # top-level import names under src/


def _normalise(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;@(]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


@cache
def workspace() -> dict[str, Package]:
    packages: dict[str, Package] = {}
    for pyproject in sorted(
        [*ROOT.glob("libs/*/pyproject.toml"), *ROOT.glob("services/*/pyproject.toml")]
    ):
        project = tomllib.loads(pyproject.read_text())["project"]
        src = pyproject.parent / "src"
        modules = (
            frozenset(
                p.name
                for p in src.iterdir()
                if (p / "__init__.py").is_file() or (p / "__main__.py").is_file()
            )
            if src.is_dir()
            else frozenset()
        )
        packages[project["name"]] = Package(
            name=project["name"],
            path=pyproject.parent,
            dependencies=frozenset(_normalise(d) for d in project.get("dependencies", [])),
            scripts=dict(project.get("scripts", {})),
            modules=modules,
        )
    return packages


def closure(package: str) -> set[str]:
    """The workspace packages an image built for ``package`` holds."""
    seen: set[str] = set()
    todo = [package]
    while todo:
        name = todo.pop()
        if name in seen or name not in workspace():
            continue
        seen.add(name)
        todo.extend(workspace()[name].dependencies)
    return seen


@cache
def services() -> dict[str, Path]:
    """Service name (folder with hyphens, as in compose and Kubernetes) -> folder."""
    return {
        d.name.replace("_", "-"): d
        for d in sorted((ROOT / "services").iterdir())
        if (d / "pyproject.toml").is_file()
    }


def _settings_classes(folders: list[Path]) -> Iterator[type[BaseSettings]]:
    for src in folders:
        for path in sorted(src.rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            names = [
                n.name
                for n in tree.body
                if isinstance(n, ast.ClassDef) and n.name.endswith("Settings")
            ]
            if not names:
                continue
            parts = path.relative_to(src).with_suffix("").parts
            module = importlib.import_module(
                ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            )
            for name in names:
                cls = getattr(module, name)
                if isinstance(cls, type) and issubclass(cls, BaseSettings):
                    yield cls


def env_names(cls: type[BaseSettings]) -> set[str]:
    prefix = str(cls.model_config.get("env_prefix", ""))
    names = set()
    for name, info in cls.model_fields.items():
        names.add((prefix + name).upper())
        if isinstance(info.validation_alias, str):
            names.add(info.validation_alias.upper())
    return names


@cache
def known_env() -> frozenset[str]:
    """Every COMPOSER_* variable some settings class reads."""
    folders = [*ROOT.glob("libs/*/src"), *ROOT.glob("services/*/src")]
    names: set[str] = set()
    for cls in _settings_classes(folders):
        names |= env_names(cls)
    return frozenset(n for n in names if n.startswith("COMPOSER_"))


@cache
def service_env(service: str) -> frozenset[str]:
    """What the one settings class of a service reads (the common fields included)."""
    classes = list(_settings_classes([services()[service] / "src"]))
    assert len(classes) == 1, f"{service}: expected one *Settings class, found {classes}"
    return frozenset(env_names(classes[0]))


def check_command(argv: list[str], image_service: str, where: str) -> None:
    """``argv`` starts a console script or ``python -m module`` that the service's image installs."""
    assert argv, f"{where}: no command"
    holders = closure(f"composer-{image_service}")
    if argv[0] in {"python", "python3"}:
        assert argv[1:2] == ["-m"], f"{where}: python without -m: {argv}"
        module = argv[2]
        providers = [p.name for p in workspace().values() if module.split(".")[0] in p.modules]
        assert providers, f"{where}: module {module} is in no workspace package"
        assert set(providers) & holders, (
            f"{where}: {module} ({providers}) is not installed in the {image_service} image"
        )
        main = importlib.import_module(f"{module}.__main__")
        assert callable(getattr(main, "main", None)), f"{where}: {module}.__main__ has no main()"
        return
    script = argv[0]
    owners = [p for p in workspace().values() if script in p.scripts]
    assert owners, f"{where}: {script} is no console script of any pyproject.toml"
    (owner,) = owners
    assert owner.name in holders, (
        f"{where}: {script} ({owner.name}) is not installed in the {image_service} image"
    )
    target = owner.scripts[script]
    module_name, _, attr = target.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    assert callable(obj), f"{where}: {target} is not callable"


def check_probe_url(url: str, path: str, admin_port: str | None, where: str) -> None:
    assert admin_port is not None, f"{where}: COMPOSER_ADMIN_PORT is not set, yet a probe uses it"
    parts = urlsplit(url)
    assert parts.hostname in LOOPBACK, (
        f"{where}: probe asks {parts.hostname}, not the container itself"
    )
    assert str(parts.port) == str(admin_port), (
        f"{where}: probe port {parts.port} != COMPOSER_ADMIN_PORT {admin_port}"
    )
    assert parts.path == path, f"{where}: probe path {parts.path}, want {path}"


def probe_url(argv: list[str], where: str) -> str:
    urls = [a for a in argv if a.startswith(("http://", "https://"))]
    assert len(urls) == 1, f"{where}: expected one URL in the probe command {argv}"
    return urls[0]


def port_of(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


# ---- the service list itself ------------------------------------------------------------


def test_each_service_is_a_package_with_its_console_script() -> None:
    """The Dockerfile installs composer-<SERVICE> and runs composer-<SERVICE>: the naming holds."""
    assert services(), "no services/*/pyproject.toml found"
    for name in services():
        package = workspace().get(f"composer-{name}")
        assert package is not None, f"services/{name}: no package named composer-{name}"
        assert f"composer-{name}" in package.scripts, (
            f"composer-{name} has no console script composer-{name}"
        )


def _serves_admin_port(path: Path) -> bool:
    """Whether a module calls serve_admin(<settings>.admin_port, …)."""
    return any(
        isinstance(node, ast.Call)
        and getattr(node.func, "id", getattr(node.func, "attr", None)) == "serve_admin"
        and node.args
        and isinstance(node.args[0], ast.Attribute)
        and node.args[0].attr == "admin_port"
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
    )


def _opens_runtime(path: Path) -> bool:
    """Whether a module opens composer_service.serving(<settings>.runtime(…))."""
    return any(
        isinstance(node, ast.Call)
        and getattr(node.func, "id", getattr(node.func, "attr", None)) == "serving"
        and node.args
        and isinstance(node.args[0], ast.Call)
        and getattr(node.args[0].func, "attr", None) == "runtime"
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
    )


RUNTIME = ROOT / "libs" / "service" / "src" / "composer_service" / "runtime.py"


def test_each_service_serves_the_admin_port_its_probes_ask() -> None:
    """Probes hit COMPOSER_ADMIN_PORT: every service opens composer_service.serving with its
    settings' runtime (which carries ``admin_port``), and serving passes it to serve_admin."""
    assert _serves_admin_port(RUNTIME), "composer_service.serving no longer serves the admin port"
    for name, folder in services().items():
        sources = list((folder / "src").rglob("*.py"))
        assert any(_opens_runtime(p) for p in sources), (
            f"services/{name} never serves its admin port "
            "(composer_service.serving(settings.runtime(…)))"
        )


def test_settings_are_found() -> None:
    assert {"COMPOSER_DATABASE_URL", "COMPOSER_ADMIN_PORT", "COMPOSER_WORKER_TOKEN"} <= known_env()


# ---- Dockerfile --------------------------------------------------------------------------


def test_dockerfile_is_multi_stage_slim_and_non_root() -> None:
    text = DOCKERFILE.read_text()
    instructions = [
        line.split(None, 1)
        for line in text.splitlines()
        if line and not line.startswith((" ", "#"))
    ]
    froms = [rest for op, *rest in instructions if op == "FROM"]
    assert len(froms) >= 2, "not multi-stage"
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.11-slim$", text, re.M)
    assert re.search(r"^ARG SERVICE$", text, re.M), "no SERVICE build arg"
    assert '--package "composer-${SERVICE}"' in text
    assert "--no-dev" in text and "--frozen" in text and "--no-editable" in text
    users = [rest[0] for op, *rest in instructions if op == "USER"]
    assert users, "no USER"
    assert users[-1].split(":")[0] not in {"0", "root"}, "the last USER is root"
    entry = [rest[0] for op, *rest in instructions if op == "ENTRYPOINT"]
    assert entry == ['["composer-service"]']
    assert 'ln -s "composer-${SERVICE}" /opt/venv/bin/composer-service' in text
    for key in re.findall(r"\b(COMPOSER_[A-Z0-9_]+)=", text):
        assert key in known_env(), f"deploy/Dockerfile sets {key}, which no settings class reads"


def test_dockerignore_keeps_what_the_build_needs() -> None:
    ignored = {
        line.strip().strip("/")
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    # migrations/ goes into the composer-repo wheel (its force-include)
    for needed in ("libs", "services", "migrations", "uv.lock", "pyproject.toml", "README.md", "*"):
        assert needed not in ignored, f"{needed} must reach the build context"


# ---- docker-compose.yml ------------------------------------------------------------------


@cache
def compose() -> Doc:
    doc = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(doc, dict)
    return doc


def compose_services() -> dict[str, Doc]:
    result: dict[str, Doc] = compose()["services"]
    return result


def image_service(spec: Doc) -> str | None:
    build = spec.get("build")
    if isinstance(build, dict):
        return str(build.get("args", {}).get("SERVICE"))
    return None


def compose_env(spec: Doc) -> dict[str, str]:
    env = spec.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {str(k): str(v) for k, v in env.items()}


def test_compose_runs_every_service_and_only_real_ones() -> None:
    specs = compose_services()
    for name in services():
        assert name in specs, f"services/{name} is not in docker-compose.yml"
        assert image_service(specs[name]) == name, (
            f"{name}: built with SERVICE={image_service(specs[name])}"
        )
    for name, spec in specs.items():
        built = image_service(spec)
        if built is None:
            continue
        assert built in services(), f"{name}: SERVICE={built} is no folder of services/"
        assert spec["build"]["dockerfile"] == "deploy/Dockerfile"
        assert (ROOT / spec["build"]["context"]).resolve() == ROOT
        assert spec["image"].split(":")[0] == f"{IMAGE_REPO}{built}", (
            f"{name}: image {spec['image']}"
        )


def test_compose_build_args_cover_every_service() -> None:
    built = {image_service(s) for s in compose_services().values()} - {None}
    assert built == set(services())


def test_compose_commands_are_real_entry_points() -> None:
    for name, spec in compose_services().items():
        built = image_service(spec)
        if built is None:
            continue
        argv = [*(spec.get("entrypoint") or []), *(spec.get("command") or [])]
        check_command(argv, built, f"compose {name}")
        if name in services():
            assert argv == [f"composer-{name}"], f"compose {name}: runs {argv}"


def test_compose_env_is_read_by_the_service() -> None:
    for name, spec in compose_services().items():
        env = compose_env(spec)
        for key in env:
            if not key.startswith("COMPOSER_"):
                continue
            assert key in known_env(), f"compose {name}: {key} is read by no settings class"
            if name in services():
                assert key in service_env(name), f"compose {name}: {key} is not read by {name}"
    # ${COMPOSER_…} interpolations are the same names, taken from the caller's environment
    for key in re.findall(r"\$\{(COMPOSER_[A-Z0-9_]+)", COMPOSE_FILE.read_text()):
        assert key in known_env(), (
            f"docker-compose.yml interpolates {key}, which no settings class reads"
        )


def test_compose_healthchecks_ask_readyz_on_the_admin_port() -> None:
    for name in services():
        spec = compose_services()[name]
        test = spec["healthcheck"]["test"]
        assert test[0] == "CMD", f"compose {name}: healthcheck must be exec form"
        check_probe_url(
            probe_url(test, name),
            "/readyz",
            compose_env(spec).get("COMPOSER_ADMIN_PORT"),
            f"compose {name}",
        )


def test_compose_dependencies_exist_and_wait_for_the_migration() -> None:
    specs = compose_services()
    migrations = [
        n
        for n, s in specs.items()
        if "composer_repo" in (s.get("entrypoint") or []) + (s.get("command") or [])
    ]
    assert len(migrations) == 1, f"one migration service expected, found {migrations}"
    (migrate,) = migrations
    assert specs[migrate].get("restart") == "no"

    def deps(name: str) -> dict[str, str]:
        depends = specs[name].get("depends_on") or {}
        if isinstance(depends, list):
            return dict.fromkeys(depends, "service_started")
        return {k: v["condition"] for k, v in depends.items()}

    for name in specs:
        for dep, condition in deps(name).items():
            assert dep in specs, f"compose {name} depends on {dep}, which does not exist"
            if condition == "service_healthy":
                assert "healthcheck" in specs[dep], (
                    f"compose {name} waits for {dep} to be healthy; it has no healthcheck"
                )
            if condition == "service_completed_successfully":
                assert dep == migrate, f"compose {name} waits for {dep} to complete"
    # every service starts after the migration succeeded (directly, or after a service that does)
    for name in services():
        seen: set[str] = set()
        todo = [name]
        waits = False
        while todo:
            current = todo.pop()
            for dep, condition in deps(current).items():
                if dep == migrate and condition == "service_completed_successfully":
                    waits = True
                if dep not in seen and condition in {
                    "service_healthy",
                    "service_completed_successfully",
                }:
                    seen.add(dep)
                    todo.append(dep)
        assert waits, f"compose {name} may start before the migration has succeeded"


def test_compose_addresses_line_up() -> None:
    """Published ports reach a wildcard listener; gRPC targets name a compose service listening there."""
    specs = compose_services()
    listeners: dict[str, int] = {}
    for name, spec in specs.items():
        env = compose_env(spec)
        if "COMPOSER_GRPC_ADDR" in env:
            host, port = port_of(env["COMPOSER_GRPC_ADDR"])
            if host in WILDCARD:
                listeners[name] = port
    for name, spec in specs.items():
        env = compose_env(spec)
        if "COMPOSER_GRPC_ADDR" in env:
            host, port = port_of(env["COMPOSER_GRPC_ADDR"])
            if host not in WILDCARD:
                assert listeners.get(host) == port, (
                    f"compose {name} dials {host}:{port}; nothing listens there"
                )
        for mapping in spec.get("ports") or []:
            container_port = int(str(mapping).rsplit(":", 1)[-1].split("/")[0])
            if name not in services():
                continue
            if str(container_port) == env.get("COMPOSER_API_PORT"):
                assert env.get("COMPOSER_API_HOST") in WILDCARD, (
                    f"compose {name}: the API listens on loopback only"
                )
            elif container_port != listeners.get(name):
                pytest.fail(
                    f"compose {name} publishes {container_port}, which it does not listen on"
                )
    assert "127.0.0.1:8080:8080" in [str(p) for p in specs["api-gateway"].get("ports", [])]


def test_compose_publishes_on_loopback_only() -> None:
    """A published port on 0.0.0.0 is reachable from the whole network the laptop is on."""
    for name, spec in compose_services().items():
        for mapping in spec.get("ports") or []:
            assert str(mapping).startswith("127.0.0.1:"), (
                f"compose {name} publishes {mapping} on every interface; use 127.0.0.1:{mapping}"
            )


TOKEN_VARIABLES = ("COMPOSER_API_TOKENS", "COMPOSER_WORKER_TOKEN", "COMPOSER_BUILTIN_WORKER_TOKEN")


#: Tokens of which the coordinator takes one or the other (composer_coordinator.tokens): each
#: may be empty in compose, and the coordinator refuses to start with both or neither.
EITHER_TOKEN = {"COMPOSER_WORKER_TOKEN", "COMPOSER_WORKER_TOKENS"}


def test_compose_ships_no_token() -> None:
    """The tokens come from the caller's environment or .env, required (``${VAR:?…}``): a
    default would be a token every reader of this file knows. The coordinator's token for
    every queue may be left empty, for teams' tokens (COMPOSER_WORKER_TOKENS) instead."""
    text = COMPOSE_FILE.read_text()
    for name, spec in compose_services().items():
        for key, value in compose_env(spec).items():
            if key in TOKEN_VARIABLES:
                match = re.fullmatch(r"\$\{(COMPOSER_[A-Z_]+):\?[^}]+\}", value)
                if name == "coordinator" and key in EITHER_TOKEN:
                    match = re.fullmatch(r"\$\{(COMPOSER_[A-Z_]+):-\}", value)
                assert match and match.group(1) in {*TOKEN_VARIABLES, *EITHER_TOKEN}, (
                    f"compose {name}: {key}={value!r} is not required from the environment"
                )
    coordinator = compose_env(compose_services()["coordinator"])
    assert set(coordinator) >= EITHER_TOKEN, "the coordinator must take either kind of token"
    # an empty default (COMPOSER_WORKER_TOKENS: no team tokens) is no token
    assert not re.search(r"\$\{COMPOSER_[A-Z_]*TOKENS?:?-[^}]", text), "a token has a default"
    assert "dev-token" not in text and "worker-token" not in text


def test_compose_redis_requires_a_password_kept_off_its_command_line() -> None:
    """Issue 25: a PYTHON node spoke raw Redis with no password. Compose's Redis requires
    REDIS_PASSWORD from .env, as PostgreSQL requires POSTGRES_PASSWORD; every service's URL
    carries it; redis-server reads it on stdin (a command line is readable by any process
    on the host); the healthcheck succeeds only on an authenticated PONG."""
    required = r"\$\{REDIS_PASSWORD:\?[^}]+\}"
    redis = compose_services()["redis"]
    assert re.fullmatch(required, compose_env(redis)["REDISCLI_AUTH"])
    script = "\n".join(map(str, redis["command"]))
    assert "redis-server -" in script and "requirepass $$REDISCLI_AUTH" in script
    assert "--requirepass" not in script
    assert redis.get("user") == "redis", "redis-server would run as root"
    assert "grep -qx PONG" in " ".join(redis["healthcheck"]["test"])  # NOAUTH also exits 0
    urls = {
        name: compose_env(spec)["COMPOSER_REDIS_URL"]
        for name, spec in compose_services().items()
        if "COMPOSER_REDIS_URL" in compose_env(spec)
    }
    assert set(urls) >= set(services()) - {"partition-manager"}
    for name, url in urls.items():
        assert re.fullmatch(rf"redis://:{required}@redis:6379/0", url), f"compose {name}: {url}"
    assert "REDIS_PASSWORD={t()}" in COMPOSE_FILE.read_text(), "the .env generator makes none"


# ---- Kubernetes --------------------------------------------------------------------------


@dataclass
class Cluster:
    docs: list[tuple[str, Doc]] = field(default_factory=list)

    def of(self, kind: str) -> list[Doc]:
        return [d for _, d in self.docs if d.get("kind") == kind]

    def named(self, kind: str, name: str) -> Doc | None:
        found = [d for d in self.of(kind) if d["metadata"]["name"] == name]
        return found[0] if found else None


@cache
def cluster() -> Cluster:
    result = Cluster()
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                result.docs.append((path.name, doc))
    return result


def kustomization() -> Doc:
    doc = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert isinstance(doc, dict)
    return doc


def deployments() -> dict[str, Doc]:
    """Deployments by their app.kubernetes.io/name label."""
    result: dict[str, Doc] = {}
    for doc in cluster().of("Deployment"):
        name = doc["metadata"]["labels"][NAME_LABEL]
        assert name not in result, f"two Deployments for {name}"
        result[name] = doc
    return result


def pod_spec(workload: Doc) -> Doc:
    spec: Doc = workload["spec"]["template"]["spec"]
    return spec


def container_env(container: Doc) -> dict[str, str | None]:
    """The container's environment: ConfigMap values resolved, Secret values as None."""
    env: dict[str, str | None] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            config = cluster().named("ConfigMap", source["configMapRef"]["name"])
            assert config is not None, (
                f"envFrom names ConfigMap {source['configMapRef']['name']}, which does not exist"
            )
            env.update({k: str(v) for k, v in config.get("data", {}).items()})
        elif "secretRef" in source:
            secret = cluster().named("Secret", source["secretRef"]["name"])
            assert secret is not None, (
                f"envFrom names Secret {source['secretRef']['name']}, which does not exist"
            )
            env.update(dict.fromkeys({**secret.get("data", {}), **secret.get("stringData", {})}))
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = str(item["value"])
            continue
        ref = item["valueFrom"]
        if "secretKeyRef" in ref:
            secret = cluster().named("Secret", ref["secretKeyRef"]["name"])
            assert secret is not None, f"{item['name']}: no Secret {ref['secretKeyRef']['name']}"
            keys = {**secret.get("data", {}), **secret.get("stringData", {})}
            assert ref["secretKeyRef"]["key"] in keys, (
                f"{item['name']}: Secret has no key {ref['secretKeyRef']['key']}"
            )
            env[item["name"]] = None
        elif "configMapKeyRef" in ref:
            config = cluster().named("ConfigMap", ref["configMapKeyRef"]["name"])
            assert config is not None, (
                f"{item['name']}: no ConfigMap {ref['configMapKeyRef']['name']}"
            )
            env[item["name"]] = str(config["data"][ref["configMapKeyRef"]["key"]])
    return env


def workload_image_service(container: Doc, where: str) -> str:
    repo = str(container["image"]).split(":")[0]
    assert repo.startswith(IMAGE_REPO), (
        f"{where}: image {container['image']} is not composer/<service>"
    )
    built = repo.removeprefix(IMAGE_REPO)
    assert built in services(), f"{where}: image {container['image']} names no service"
    return built


def test_kustomization_lists_every_manifest() -> None:
    listed = set(kustomization()["resources"])
    present = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present, (
        f"listed but missing: {listed - present}; present but not listed: {present - listed}"
    )
    images = {i["name"] for i in kustomization().get("images", [])}
    used = {
        c["image"].split(":")[0]
        for d in [*cluster().of("Deployment"), *cluster().of("Job")]
        for c in pod_spec(d)["containers"]
    }
    assert used <= images, f"images kustomization cannot retag: {used - images}"
    assert images <= {f"{IMAGE_REPO}{s}" for s in services()}, (
        "kustomization names an image of no service"
    )


def test_a_deployment_per_service_and_only_real_ones() -> None:
    assert set(deployments()) == set(services())
    for name, deployment in deployments().items():
        where = f"Deployment {deployment['metadata']['name']}"
        selector = deployment["spec"]["selector"]["matchLabels"]
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= labels.items(), f"{where}: selector does not match its pods"
        (container,) = pod_spec(deployment)["containers"]
        assert workload_image_service(container, where) == name
        assert container["command"] == [f"composer-{name}"], f"{where}: runs {container['command']}"
        check_command(container["command"], name, where)


def test_deployments_have_probes_on_the_admin_port_and_resources() -> None:
    for deployment in deployments().values():
        where = f"Deployment {deployment['metadata']['name']}"
        (container,) = pod_spec(deployment)["containers"]
        env = container_env(container)
        for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
            assert probe in container, f"{where}: no {probe}"
            spec = container[probe]
            if "httpGet" in spec:
                port = spec["httpGet"]["port"]
                if isinstance(port, str):
                    port = next(
                        p["containerPort"]
                        for p in container.get("ports", [])
                        if p.get("name") == port
                    )
                assert str(port) == env.get("COMPOSER_ADMIN_PORT"), f"{where}: {probe} on {port}"
                assert spec["httpGet"]["path"] == path
            else:
                check_probe_url(
                    probe_url(spec["exec"]["command"], where),
                    path,
                    env.get("COMPOSER_ADMIN_PORT"),
                    f"{where} {probe}",
                )
        resources = container.get("resources", {})
        for kind in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(resources.get(kind, {})), (
                f"{where}: {kind} lacks cpu or memory"
            )
        security = pod_spec(deployment).get("securityContext", {})
        assert security.get("runAsNonRoot") is True, f"{where}: may run as root"


def test_kubernetes_env_is_read_by_some_settings() -> None:
    for doc in [*cluster().of("ConfigMap"), *cluster().of("Secret")]:
        keys = {**doc.get("data", {}), **doc.get("stringData", {})}
        for key in keys:
            assert key in known_env(), (
                f"{doc['kind']} {doc['metadata']['name']}: {key} is read by no settings class"
            )
    for workload in [*cluster().of("Deployment"), *cluster().of("Job")]:
        for container in pod_spec(workload)["containers"]:
            env = container_env(container)  # also checks every reference resolves
            for key in env:
                assert key in known_env(), (
                    f"{workload['metadata']['name']}: {key} is read by no settings class"
                )
    for name, deployment in deployments().items():
        (container,) = pod_spec(deployment)["containers"]
        for item in container.get("env", []):
            assert item["name"] in service_env(name), (
                f"Deployment {name} sets {item['name']}, which {name} does not read"
            )


def test_secret_values_are_marked_placeholders() -> None:
    (secret,) = cluster().of("Secret")
    assert {"COMPOSER_API_TOKENS", "COMPOSER_WORKER_TOKEN"} <= set(secret["stringData"])
    for key, value in secret["stringData"].items():
        assert "CHANGE-ME" in value, f"Secret {key} is not marked as a placeholder"


def test_secret_placeholders_are_refused_by_the_services() -> None:
    """Deployed as they are, the placeholders stop the gateway and the coordinator at start
    (composer_service.tokens): nobody runs on a token printed in this repository."""
    from composer_service.tokens import WeakTokenError, check_tokens

    (secret,) = cluster().of("Secret")
    for key in TOKEN_VARIABLES:
        value = secret["stringData"][key]
        token = value.rpartition(":")[0] if key == "COMPOSER_API_TOKENS" else value
        with pytest.raises(WeakTokenError, match=key):
            check_tokens([(key, token)], dev_mode=False)
    # the outbox-enqueuer applies the same rule to the webhook signing secret
    webhook_secret = secret["stringData"]["COMPOSER_WEBHOOK_SECRET"]
    with pytest.raises(WeakTokenError, match="COMPOSER_WEBHOOK_SECRET"):
        check_tokens([("COMPOSER_WEBHOOK_SECRET", webhook_secret)], dev_mode=False)


def _mounted(deployment: Doc, path: str) -> Doc:
    """The Secret volume that holds file ``path`` in the deployment's container."""
    spec = pod_spec(deployment)
    (container,) = spec["containers"]
    for mount in container.get("volumeMounts", []):
        if path.startswith(mount["mountPath"].rstrip("/") + "/"):
            volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
            assert "secret" in volume, f"{path} is not from a Secret"
            assert mount.get("readOnly") is True, f"{mount['name']} is mounted writable"
            keys = [i["path"] for i in volume["secret"].get("items", [])]
            name = path.rsplit("/", 1)[1]
            assert not keys or name in keys, f"{path}: the volume does not project {name}"
            return dict(volume["secret"])
    raise AssertionError(f"nothing is mounted at {path}")


def test_redis_and_grpc_use_tls() -> None:
    """Redis AUTH over TLS (rediss://) for every service; the coordinator serves gRPC over
    TLS, and the workers check its certificate against the CA (docs/architecture.md §6)."""
    (secret,) = cluster().of("Secret")
    assert secret["stringData"]["COMPOSER_REDIS_URL"].startswith("rediss://:")
    for name, deployment in deployments().items():
        (container,) = pod_spec(deployment)["containers"]
        env = container_env(container)
        if name != "partition-manager":  # the one service without Redis
            assert "COMPOSER_REDIS_URL" in env, f"{name} has no COMPOSER_REDIS_URL"
        if "COMPOSER_REDIS_URL" in env:
            assert env["COMPOSER_REDIS_URL"] is None, f"{name}: the Redis URL is not the Secret's"
    coordinator = deployments()["coordinator"]
    (container,) = pod_spec(coordinator)["containers"]
    env = container_env(container)
    for key in ("COMPOSER_GRPC_TLS_CERT", "COMPOSER_GRPC_TLS_KEY"):
        assert env.get(key), f"the coordinator has no {key}"
        _mounted(coordinator, str(env[key]))
    workers = deployments()["workers"]
    (container,) = pod_spec(workers)["containers"]
    ca = container_env(container).get("COMPOSER_GRPC_TLS_CA")
    assert ca, "the workers dial the coordinator without COMPOSER_GRPC_TLS_CA"
    volume = _mounted(workers, str(ca))
    assert [i["key"] for i in volume.get("items", [])] == ["ca.crt"], (
        "the workers need the CA only, not the coordinator's key"
    )


def test_hpa_for_coordinator_and_workers() -> None:
    targets = {}
    for hpa in cluster().of("HorizontalPodAutoscaler"):
        ref = hpa["spec"]["scaleTargetRef"]
        assert ref["kind"] == "Deployment"
        deployment = cluster().named("Deployment", ref["name"])
        assert deployment is not None, (
            f"HPA {hpa['metadata']['name']} scales {ref['name']}, which does not exist"
        )
        assert "replicas" not in deployment["spec"], f"{ref['name']}: replicas fights its HPA"
        (container,) = pod_spec(deployment)["containers"]
        assert "cpu" in container["resources"]["requests"], (
            f"{ref['name']}: CPU HPA without a CPU request"
        )
        targets[deployment["metadata"]["labels"][NAME_LABEL]] = hpa
    assert {"coordinator", "workers"} <= set(targets)
    for hpa in targets.values():
        assert 1 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]


def _selects(selector: Mapping[str, str]) -> list[str]:
    """The services whose pods a label selector picks."""
    return [
        name
        for name, deployment in deployments().items()
        if selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    ]


def test_pdb_for_coordinator() -> None:
    covered = []
    for pdb in cluster().of("PodDisruptionBudget"):
        picked = _selects(pdb["spec"]["selector"]["matchLabels"])
        assert len(picked) == 1, f"PDB {pdb['metadata']['name']} selects {picked}"
        covered += picked
    assert "coordinator" in covered


def test_services_route_to_real_ports() -> None:
    """api-gateway (HTTP) and coordinator (gRPC) Services reach a wildcard listener; workers dial the latter."""
    routes: dict[str, tuple[str, int]] = {}  # Service name -> (service, port)
    for svc in cluster().of("Service"):
        picked = _selects(svc["spec"]["selector"])
        assert len(picked) == 1, f"Service {svc['metadata']['name']} selects {picked}"
        (target,) = picked
        (container,) = pod_spec(deployments()[target])["containers"]
        env = container_env(container)
        ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
        for port in svc["spec"]["ports"]:
            target_port = port.get("targetPort", port["port"])
            number = ports[target_port] if isinstance(target_port, str) else target_port
            if str(number) == env.get("COMPOSER_API_PORT"):
                assert env.get("COMPOSER_API_HOST") in WILDCARD, (
                    f"{target}: the API listens on loopback only"
                )
            else:
                host, grpc_port = port_of(env.get("COMPOSER_GRPC_ADDR") or "")
                assert (host, grpc_port) in {(w, number) for w in WILDCARD}, (
                    f"Service {svc['metadata']['name']}: {target} does not listen on {number}"
                )
            routes[svc["metadata"]["name"]] = (target, int(port["port"]))
    assert {t for t, _ in routes.values()} >= {"api-gateway", "coordinator"}
    for name, deployment in deployments().items():
        (container,) = pod_spec(deployment)["containers"]
        address = container_env(container).get("COMPOSER_GRPC_ADDR")
        if address is None:
            continue
        host, port = port_of(address)
        if host not in WILDCARD:
            assert routes.get(host) == ("coordinator", port), (
                f"{name} dials {address}: no Service of the coordinator there"
            )


def test_migration_job() -> None:
    (job,) = cluster().of("Job")
    (container,) = pod_spec(job)["containers"]
    assert container["command"][:3] == ["python", "-m", "composer_repo"]
    check_command(container["command"], workload_image_service(container, "Job"), "migration Job")
    assert pod_spec(job)["restartPolicy"] in {"Never", "OnFailure"}
    assert "COMPOSER_DATABASE_URL" in container_env(container)


# ---- the probe command itself --------------------------------------------------------------


async def test_probe_command_exits_zero_only_when_the_admin_port_answers_200() -> None:
    """The exec probe used by compose and Kubernetes, run against the real admin app."""
    argv = compose_services()["coordinator"]["healthcheck"]["test"][1:]
    healthy = True

    async def check() -> None:
        if not healthy:
            raise RuntimeError("down")

    async def probe(port: int) -> int:
        url = probe_url(argv, "probe")
        args = [sys.executable if a == "python" else a for a in argv]
        args[args.index(url)] = f"http://127.0.0.1:{port}/readyz"
        proc = await asyncio.create_subprocess_exec(*args, stderr=asyncio.subprocess.DEVNULL)
        return await asyncio.wait_for(proc.wait(), 30)

    async with serve_admin(0, {"database": check}) as port:
        assert port is not None
        assert await probe(port) == 0
        healthy = False
        assert await probe(port) != 0
    assert await probe(port) != 0  # nothing listens any more


# ---- the workers' NetworkPolicy --------------------------------------------------------------

#: An address of each range a cluster puts pods, services, nodes and the metadata service in.
PRIVATE_SAMPLES = ("10.96.0.10", "172.20.3.4", "192.168.9.9", "100.64.1.1", "169.254.169.254")


def _peer_allows(peer: Doc, target: str | ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether one ``to`` entry admits ``target``: a service's pods (by name, in this
    namespace) or an address (for a pod too: pods have private addresses)."""
    if "podSelector" in peer:
        if "namespaceSelector" in peer or not isinstance(target, str):
            return False
        labels = deployments()[target]["spec"]["template"]["metadata"]["labels"]
        return bool(peer["podSelector"].get("matchLabels", {}).items() <= labels.items())
    block = peer["ipBlock"]
    network = ipaddress.ip_network(block["cidr"])
    addresses = (
        [ipaddress.ip_address(a) for a in PRIVATE_SAMPLES] if isinstance(target, str) else [target]
    )
    return any(
        a.version == network.version
        and a in network
        and not any(a in ipaddress.ip_network(e) for e in block.get("except", []))
        for a in addresses
    )


def egress_allows(
    policy: Doc,
    target: str | ipaddress.IPv4Address | ipaddress.IPv6Address,
    port: int,
    protocol: str = "TCP",
) -> bool:
    """Whether ``policy`` lets its pods connect to ``target`` (a service's pods, or an
    address) on ``port``: NetworkPolicy's rules, a union of (ports, peers) pairs."""
    for rule in policy["spec"].get("egress", []):
        ports = rule.get("ports") or [{"port": port, "protocol": protocol}]
        if not any(p["port"] == port and p.get("protocol", "TCP") == protocol for p in ports):
            continue
        peers = rule.get("to") or []
        if not peers or any(_peer_allows(peer, target) for peer in peers):
            return True
    return False


def test_the_workers_reach_the_coordinator_redis_dns_and_the_internet_only() -> None:
    """Issue 25: the workers run what definitions say (a PYTHON node opens any socket), so
    their pods may reach the coordinator's gRPC port, Redis, DNS and public addresses,
    never PostgreSQL, the API or an admin port."""
    (policy,) = [
        p
        for p in cluster().of("NetworkPolicy")
        if _selects(p["spec"]["podSelector"]["matchLabels"]) == ["workers"]
    ]
    assert set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}

    (container,) = pod_spec(deployments()["workers"])["containers"]
    env = container_env(container)
    _, grpc_port = port_of(str(env["COMPOSER_GRPC_ADDR"]))
    admin_port = int(str(env["COMPOSER_ADMIN_PORT"]))
    (secret,) = cluster().of("Secret")
    redis_port = urlsplit(secret["stringData"]["COMPOSER_REDIS_URL"]).port or 6379
    database_port = urlsplit(secret["stringData"]["COMPOSER_DATABASE_URL"]).port or 5432
    gateway_env = container_env(pod_spec(deployments()["api-gateway"])["containers"][0])
    api_port = int(str(gateway_env["COMPOSER_API_PORT"]))

    assert egress_allows(policy, "coordinator", grpc_port)
    assert egress_allows(policy, ipaddress.ip_address("10.0.4.2"), redis_port)
    assert egress_allows(policy, ipaddress.ip_address("10.96.0.10"), 53, "UDP")
    for public in ("93.184.215.14", "2606:4700:4700::1111"):
        assert egress_allows(policy, ipaddress.ip_address(public), 443)
    for name in deployments():
        assert not egress_allows(policy, name, admin_port), f"the workers reach {name}'s /metrics"
        assert not egress_allows(policy, name, database_port)
        if name != "coordinator":
            assert not egress_allows(policy, name, grpc_port)
    assert not egress_allows(policy, "api-gateway", api_port), "the workers reach the API"
    for private in (*PRIVATE_SAMPLES, "127.0.0.1", "::1", "fd00::5", "fe80::1", "::ffff:10.0.0.1"):
        address = ipaddress.ip_address(private)
        for port in (database_port, api_port, admin_port, 80, 443):
            assert not egress_allows(policy, address, port), f"the workers reach {private}:{port}"

    # what comes in: the admin port alone (probes, Prometheus)
    ingress = policy["spec"]["ingress"]
    assert [p["port"] for rule in ingress for p in rule.get("ports", [])] == [admin_port]
    assert all(rule.get("ports") for rule in ingress), "an ingress rule opens every port"
