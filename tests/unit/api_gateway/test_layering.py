"""The gateway and the CLI keep their boundaries, and every module imports on its own.

The gateway imports libraries, never another service; the CLI reaches the
engine only over HTTP (composer_repo alone, for `composer migrate`). Read
with ``ast``, so an import in a branch no test runs is caught too.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = {
    "composer_api_gateway": ROOT / "services" / "api_gateway" / "src" / "composer_api_gateway",
    "composer_cli": ROOT / "libs" / "cli" / "src" / "composer_cli",
}
SERVICES = {
    "composer_coordinator",
    "composer_outbox_enqueuer",
    "composer_workers",
    "composer_timer",
    "composer_lease_sweeper",
    "composer_partition_manager",
}
#: The dev-stack supervisor starts services as processes; only the CLI's `composer up` runs it.
GATEWAY_FORBIDDEN = SERVICES | {"composer_devstack"}
CLI_FORBIDDEN = SERVICES | {"composer_api_gateway", "composer_engine", "asyncpg", "aiohttp"}


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_boundaries(package: str) -> None:
    forbidden = GATEWAY_FORBIDDEN if package == "composer_api_gateway" else CLI_FORBIDDEN
    for path in sorted(PACKAGES[package].rglob("*.py")):
        wrong = imported(path) & forbidden
        assert not wrong, f"{path.relative_to(ROOT)} imports {sorted(wrong)}"


_IMPORT_EACH = """
import importlib, json, sys
prefix, names = sys.argv[1], json.loads(sys.argv[2])
failures = {}
for name in names:
    for loaded in [m for m in sys.modules if m == prefix or m.startswith(prefix + ".")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except Exception as exc:
        failures[name] = f"{type(exc).__name__}: {exc}"
print(json.dumps(failures))
"""


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_every_module_imports_alone(package: str) -> None:
    root = PACKAGES[package]
    names = [
        ".".join((package, *p.relative_to(root).with_suffix("").parts))
        for p in sorted(root.rglob("*.py"))
        if p.name not in ("__init__.py", "__main__.py")
    ]
    result = subprocess.run(
        [sys.executable, "-c", _IMPORT_EACH, package, json.dumps(names)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {}
