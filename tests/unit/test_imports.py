"""Each outside system has one room: only libs/queue imports ``redis``, only libs/repo
imports ``asyncpg``; and libs/queue itself stays light (the SDK installs it on users'
machines). The layers keep to their side (docs/architecture.md §1): a service
reaches the database only through the engine's use cases (no ``composer_repo``),
the engine speaks no worker protocol (no ``grpc``, no ``composer_rpc``), and its
modules import each other without a circle.

Read with ``ast`` rather than imported, so an import in a branch no test runs
(or under ``if TYPE_CHECKING``) is caught too. Scans every Python file of the
libraries, services, tests and examples.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("libs", "services", "tests", "examples")

#: Top-level module → the one folder allowed to import it, and what to use instead.
ROOMS = {
    "redis": (ROOT / "libs" / "queue" / "src", "composer_queue's API"),
    "asyncpg": (ROOT / "libs" / "repo" / "src", "composer_repo's functions"),
}
#: Known exceptions, by path: each says why.
ALLOWED = {
    # The benchmark's ceiling: a plain asyncpg loop on tables of its own, measuring what
    # the raw driver gets from the same PostgreSQL (no engine statement; see its docstring).
    ("asyncpg", ROOT / "tests" / "bench" / "_sql.py"),
}


#: Folder → modules no file under it may import, and why.
FORBIDDEN = {
    ROOT / "services": (
        frozenset({"composer_repo"}),
        "a service goes through the engine's use cases (composer_engine: Engine.reads, "
        ".upkeep, .outbox, .workflows; composer_engine.records for the values' names)",
    ),
    ROOT / "libs" / "engine" / "src": (
        frozenset({"grpc", "composer_rpc"}),
        "the engine is the application layer of every service, not only the coordinator's: "
        "shared values (ErrorCode) live in composer_common",
    ),
}


def python_files() -> Iterator[Path]:
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            if ".venv" not in path.parts and "node_modules" not in path.parts:
                yield path


def imported_modules(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, top-level module) of every absolute import."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module.split(".")[0]


def violations(path: Path, tree: ast.AST) -> Iterator[str]:
    for line, module in imported_modules(tree):
        if module not in ROOMS:
            continue
        room, instead = ROOMS[module]
        if room in path.parents or (module, path) in ALLOWED:
            continue
        yield (
            f"{path.relative_to(ROOT)}:{line} imports {module}; only "
            f"{room.relative_to(ROOT)} may (use {instead} instead)"
        )


def layer_violations(path: Path, tree: ast.AST) -> Iterator[str]:
    for line, module in imported_modules(tree):
        for folder, (modules, why) in FORBIDDEN.items():
            if module in modules and folder in path.parents:
                yield f"{path.relative_to(ROOT)}:{line} imports {module}: {why}"


def test_only_its_room_imports_each_outside_system() -> None:
    found = [v for path in python_files() for v in violations(path, ast.parse(path.read_text()))]
    assert found == []


def test_every_known_exception_still_exists() -> None:
    """An exception whose file no longer imports the module must be removed from ALLOWED."""
    for module, path in ALLOWED:
        modules = {m for _, m in imported_modules(ast.parse(path.read_text()))}
        assert module in modules, f"{path.relative_to(ROOT)} no longer imports {module}: drop it"


def test_libs_queue_needs_nothing_but_redis() -> None:
    """A user's worker installs composer-queue through the SDK: no server kit in it."""
    allowed = set(sys.stdlib_module_names) | {"redis", "composer_queue"}
    found = {
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in sorted((ROOT / "libs" / "queue" / "src").rglob("*.py"))
        for line, module in imported_modules(ast.parse(path.read_text()))
        if module not in allowed
    }
    assert found == set()


@pytest.mark.parametrize(
    ("source", "room"),
    [
        ("import redis", "queue"),
        ("import redis.asyncio as r", "queue"),
        ("from redis.exceptions import RedisError", "queue"),
        ("import asyncpg", "repo"),
        ("from asyncpg import exceptions", "repo"),
    ],
)
def test_the_check_sees_every_import_form(source: str, room: str) -> None:
    path = ROOT / "services" / "example" / "x.py"
    assert list(violations(path, ast.parse(source))) != []
    inside = ROOT / "libs" / room / "src" / f"composer_{room}" / "x.py"
    assert list(violations(inside, ast.parse(source))) == []


def test_each_layer_keeps_to_its_side() -> None:
    found = [
        v for path in python_files() for v in layer_violations(path, ast.parse(path.read_text()))
    ]
    assert found == []


@pytest.mark.parametrize(
    "source",
    [
        "import grpc",
        "import grpc.aio as aio",
        "from grpc import StatusCode",
        "from composer_rpc.codes import ErrorCode",
        "import composer_rpc.v1.worker_pb2 as pb",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import composer_rpc",
    ],
)
def test_the_layer_check_sees_every_import_form(source: str) -> None:
    inside = ROOT / "libs" / "engine" / "src" / "composer_engine" / "x.py"
    assert list(layer_violations(inside, ast.parse(source))) != []
    elsewhere = ROOT / "libs" / "sdk" / "src" / "composer_sdk" / "x.py"
    assert list(layer_violations(elsewhere, ast.parse(source))) == []


@pytest.mark.parametrize(
    "source",
    [
        "import composer_repo",
        "import composer_repo as repo",
        "from composer_repo import Pool",
        "from composer_repo._outbox import claim_outbox",
        "import composer_repo._db",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from composer_repo import Pool",
        "def f():\n    import composer_repo",
    ],
)
def test_the_layer_check_sees_a_service_importing_the_repository(source: str) -> None:
    service = ROOT / "services" / "timer" / "src" / "composer_timer" / "x.py"
    assert list(layer_violations(service, ast.parse(source))) != []
    engine = ROOT / "libs" / "engine" / "src" / "composer_engine" / "x.py"
    assert list(layer_violations(engine, ast.parse(source))) == []


def engine_imports() -> dict[str, set[str]]:
    """composer_engine's modules → the composer_engine modules each imports, at any
    depth of the file (under ``if TYPE_CHECKING`` too: a circle there is still a circle)."""
    src = ROOT / "libs" / "engine" / "src"
    graph: dict[str, set[str]] = {}
    for path in sorted((src / "composer_engine").rglob("*.py")):
        name = ".".join(path.relative_to(src).with_suffix("").parts).removesuffix(".__init__")
        found = graph.setdefault(name, set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module == "composer_engine":  # from composer_engine import _history
                    found |= {f"composer_engine.{a.name}" for a in node.names}
                elif node.module.startswith("composer_engine."):
                    found.add(node.module)
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name.startswith("composer_engine.")}
    return graph


def test_the_engines_modules_import_each_other_without_a_circle() -> None:
    graph = engine_imports()
    graph.pop("composer_engine")  # the package's face imports everything; nothing imports it
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            circle = [*path[path.index(module) :], module]
            pytest.fail("import circle: " + " → ".join(circle))
        if module in done or module not in graph:
            return
        for imported in sorted(graph[module]):
            visit(imported, [*path, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
