"""Each outside system has one room: only libs/queue imports ``redis``, only libs/repo
imports ``asyncpg``; and libs/queue itself stays light (the SDK installs it on users'
machines).

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
