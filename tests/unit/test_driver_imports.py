"""Each outside system's driver is imported by its one adapter library only.

The PostgreSQL driver lives in libs/repo: everything above it sees repository
functions, records and RepoErrors, never an asyncpg type or exception. Read
with ``ast`` over every source file of the libraries, services and examples,
so an import in a branch no test runs is caught too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The product code: what is shipped and run (tests and benchmarks may reach lower).
SOURCES = ("libs", "services", "examples")
#: Driver (top-level module) → the only directory whose code may import it.
HOMES = {"asyncpg": ROOT / "libs" / "repo"}


def imports(tree: ast.AST) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def offenders(driver: str) -> list[str]:
    home = HOMES[driver]
    found = []
    for top in SOURCES:
        for path in sorted((ROOT / top).rglob("*.py")):
            if ".venv" in path.parts or path.is_relative_to(home):
                continue
            if driver in imports(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
                found.append(str(path.relative_to(ROOT)))
    return found


@pytest.mark.parametrize("driver", sorted(HOMES))
def test_only_the_adapter_imports_its_driver(driver: str) -> None:
    found = offenders(driver)
    home = HOMES[driver].relative_to(ROOT)
    assert found == [], f"only {home} may import {driver}; move this code behind it: {found}"


def test_the_check_sees_an_import() -> None:
    assert imports(ast.parse("import asyncpg.pool")) == {"asyncpg"}
    assert imports(ast.parse("from asyncpg import exceptions")) == {"asyncpg"}
    assert imports(ast.parse("from .asyncpg import x")) == set()  # a relative module is ours
    assert offenders("asyncpg") == []
    assert any((HOMES["asyncpg"] / "src").rglob("*.py"))  # the home exists and is scanned past
