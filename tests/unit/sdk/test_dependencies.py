"""A user's worker installs composer-sdk without the server kit (issue 13, item 2).

The kit (aiohttp for the admin port, pydantic-settings, the OpenTelemetry SDK
and its exporters, prometheus-client) belongs to composer-service; the SDK
needs only the OpenTelemetry API. Both what the lock file would install and
what ``import composer_sdk`` actually loads are checked.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

#: Distributions of the server kit (and what only it brings).
SERVER_KIT = frozenset(
    {
        "aiohttp",
        "pydantic-settings",
        "opentelemetry-sdk",
        "opentelemetry-exporter-prometheus",
        "opentelemetry-exporter-otlp-proto-grpc",
        "prometheus-client",
        "composer-service",
    }
)
#: The same as modules, for the import check.
SERVER_MODULES = ("aiohttp", "pydantic_settings", "opentelemetry.sdk", "prometheus_client")


def closure(package: str) -> set[str]:
    """Every distribution uv.lock installs with ``package`` (itself included)."""
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    deps = {p["name"]: [d["name"] for d in p.get("dependencies", [])] for p in lock["package"]}
    seen: set[str] = set()
    todo = [package]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(deps[name])
    return seen


def test_the_sdk_installs_without_the_server_kit() -> None:
    installed = closure("composer-sdk")
    assert {"composer-common", "composer-rpc", "grpcio", "redis", "opentelemetry-api"} <= installed
    assert not installed & SERVER_KIT, (
        f"composer-sdk would install {sorted(installed & SERVER_KIT)}: the server kit belongs "
        "to composer-service, which the SDK must not depend on (directly or through "
        "composer-common)"
    )


def test_the_services_do_get_it() -> None:
    """The check above can fail: the same walk finds the kit under a service."""
    assert closure("composer-coordinator") >= SERVER_KIT


#: Run in a fresh interpreter: the server modules cannot be imported, as in a user's venv.
_WITHOUT_THE_KIT = f"""
import importlib.abc, sys
BLOCKED = {SERVER_MODULES!r}
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == m or name.startswith(m + ".") for m in BLOCKED):
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, Absent())
import composer_sdk
from composer_sdk import Worker, WorkerConfig
Worker(WorkerConfig(token="t"))
"""


def test_the_sdk_imports_and_builds_a_worker_where_the_kit_is_not_installed() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_THE_KIT], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_import_check_can_fail() -> None:
    """The same interpreter set-up refuses composer_service, which needs the kit."""
    code = _WITHOUT_THE_KIT.replace("import composer_sdk\n", "import composer_service\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "ModuleNotFoundError" in done.stderr
