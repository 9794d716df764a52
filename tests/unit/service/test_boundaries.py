"""Where settings are read and where the server kit is imported (issue 13, item 2).

Settings come from the environment once, at a service's entry point, and go
down as plain values; the OpenTelemetry SDK, its exporters, pydantic-settings
and prometheus-client are composer_service's alone.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SOURCES = [*ROOT.glob("libs/*/src"), *ROOT.glob("services/*/src")]
SERVICE_LIB = ROOT / "libs" / "service" / "src"
#: The dev supervisor sets the environment of the processes it starts: that is its job.
DEVSTACK = ROOT / "libs" / "devstack" / "src"
#: The SDK runs in a user's program: its config defaults follow the stack's environment
#: (issue 31), read in this one module.
SDK_ENVIRONMENT = ROOT / "libs" / "sdk" / "src" / "composer_sdk" / "_environment.py"
#: The CLI's entry point (the console script's module): its options default to the
#: environment (COMPOSER_API_URL, COMPOSER_API_TOKEN, COMPOSER_DATABASE_URL, NO_COLOR).
CLI_ENTRY = ROOT / "libs" / "cli" / "src" / "composer_cli" / "main.py"
KIT = ("pydantic_settings", "opentelemetry.sdk", "opentelemetry.exporter", "prometheus_client")


@cache
def modules() -> tuple[tuple[Path, ast.Module], ...]:
    """Every library's and service's module, parsed (the generated gRPC code left out)."""
    return tuple(
        (path, ast.parse(path.read_text(), str(path)))
        for folder in SOURCES
        for path in folder.rglob("*.py")
        if "composer_rpc/v1" not in path.as_posix()
    )


def reads_environment(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in {"environ", "getenv", "environb"}:
            return True
        if (
            isinstance(node, ast.ImportFrom)
            and node.module == "os"
            and any(a.name in {"environ", "getenv"} for a in node.names)
        ):
            return True
    return False


def imported(tree: ast.Module) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module


def test_only_entry_points_read_the_environment() -> None:
    readers = [
        path.relative_to(ROOT).as_posix()
        for path, tree in modules()
        if reads_environment(tree)
        and path.name != "__main__.py"
        and DEVSTACK not in path.parents
        and path not in (SDK_ENVIRONMENT, CLI_ENTRY)
    ]
    assert readers == [], (
        f"{readers} read the environment: read settings in the service's __main__ "
        "(a composer_service.ServiceSettings subclass) and pass plain values down"
    )


def test_only_composer_service_imports_the_server_kit() -> None:
    found = sorted(
        f"{path.relative_to(ROOT).as_posix()}: {name}"
        for path, tree in modules()
        if SERVICE_LIB not in path.parents
        for name in imported(tree)
        if any(name == k or name.startswith(k + ".") for k in KIT)
    )
    assert found == [], f"the server kit imported outside composer_service: {found}"


def test_the_scan_sees_what_it_looks_for() -> None:
    """Both checks can fail: composer_service itself imports the kit, an entry point reads os.environ."""
    trees = dict(modules())
    assert any(
        n.startswith("pydantic_settings")
        for n in imported(trees[SERVICE_LIB / "composer_service" / "settings.py"])
    )
    assert reads_environment(
        trees[ROOT / "libs" / "repo" / "src" / "composer_repo" / "__main__.py"]
    )
