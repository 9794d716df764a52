"""libs/core is pure: no I/O library, no clock, no id generation (docs/architecture.md §1), and
synchronous: nothing in it can wait, so nothing can hold a connection mid-decision.

Read with ``ast`` rather than imported, so a forbidden import is caught even in
a branch no test runs.
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import composer_core

SRC = Path(__file__).resolve().parents[3] / "libs" / "core" / "src"
PACKAGE = SRC / "composer_core"

#: Top-level modules libs/core may never import: I/O, clocks, randomness, ids, processes.
FORBIDDEN_MODULES = frozenset(
    {
        "asyncio",
        "asyncpg",
        "psycopg",
        "psycopg2",
        "redis",
        "grpc",
        "aiohttp",
        "httpx",
        "requests",
        "urllib3",
        "socket",
        "ssl",
        "uuid",
        "uuid6",
        "random",
        "secrets",
        "time",
        "subprocess",
        "os",
        "shutil",
        "tempfile",
    }
)
#: ``<receiver>.<method>()`` calls that read the clock.
CLOCK_CALLS = {
    "datetime": {"now", "utcnow", "today"},
    "date": {"today"},
    "time": {"time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns"},
}
#: Builtins that do I/O or import by name behind the checker's back.
FORBIDDEN_BUILTINS = {"open", "input", "__import__", "exec", "eval"}


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def dotted(node: ast.expr) -> str | None:
    """``dt.datetime.now`` → "dt.datetime.now"; None for anything but names and attributes."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = dotted(node.value)
        return None if inner is None else f"{inner}.{node.attr}"
    return None


def violations(tree: ast.AST) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.AsyncFunctionDef):
            yield node.lineno, f"async def {node.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in FORBIDDEN_MODULES:
                    yield node.lineno, f"import {alias.name}"
        elif isinstance(node, ast.ImportFrom):
            top = (node.module or "").split(".")[0]
            if node.level == 0 and top in FORBIDDEN_MODULES:
                yield node.lineno, f"from {node.module} import …"
        elif isinstance(node, ast.Call):
            name = dotted(node.func)
            if name is None:
                continue
            if name in FORBIDDEN_BUILTINS or name in {"importlib.import_module"}:
                yield node.lineno, f"call to {name}()"
                continue
            *receiver, method = name.split(".")
            if receiver and method in CLOCK_CALLS.get(receiver[-1], ()):
                yield node.lineno, f"clock read {name}()"


@pytest.mark.parametrize("path", modules(), ids=lambda p: module_name(p))
def test_core_modules_do_no_io_read_no_clock_and_make_no_ids(path: Path) -> None:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = [f"{path.relative_to(SRC)}:{line}: {what}" for line, what in violations(tree)]
    assert found == [], "libs/core must stay pure:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import asyncpg", "import asyncpg"),
        ("async def apply(): ...", "async def apply"),
        ("import asyncio", "import asyncio"),
        ("import redis.asyncio as r", "import redis.asyncio"),
        ("from grpc import aio", "from grpc import …"),
        ("import uuid6", "import uuid6"),
        ("from os import environ", "from os import …"),
        ("from time import monotonic", "from time import …"),
        ("from datetime import datetime\nx = datetime.now()", "clock read datetime.now()"),
        ("import datetime as dt\nx = dt.datetime.utcnow()", "clock read dt.datetime.utcnow()"),
        ("import datetime as dt\nx = dt.date.today()", "clock read dt.date.today()"),
        ("x = open('f')", "call to open()"),
        (
            "import importlib\nm = importlib.import_module('socket')",
            "call to importlib.import_module()",
        ),
    ],
)
def test_the_checker_catches_what_it_should(source: str, expected: str) -> None:
    assert expected in [what for _, what in violations(ast.parse(source))]


@pytest.mark.parametrize(
    "source",
    [
        "import datetime as dt\ndef f(d: dt.datetime) -> dt.datetime: return d",
        "from datetime import datetime, timedelta\nx = datetime(2026, 1, 1) + timedelta(1)",
        "x = self.deps.now()",  # an injected clock is the point
        "import datetime as dt\nx = dt.datetime.fromisoformat('2026-01-01T00:00:00Z')",
    ],
)
def test_the_checker_leaves_pure_code_alone(source: str) -> None:
    assert list(violations(ast.parse(source))) == []


# -- every module imports on its own ------------------------------------------------------

_IMPORT_EACH = """
import importlib, json, sys
failures = {}
for name in json.loads(sys.argv[1]):
    for loaded in [m for m in sys.modules if m == "composer_core" or m.startswith("composer_core.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except Exception as exc:
        failures[name] = f"{type(exc).__name__}: {exc}"
print(json.dumps(failures))
"""


def test_every_module_imports_alone() -> None:
    """Each module first, in a fresh set of composer_core modules: catches import cycles."""
    names = [module_name(p) for p in modules()]
    assert "composer_core.templates._cel" in names
    result = subprocess.run(
        [sys.executable, "-c", _IMPORT_EACH, json.dumps(names)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {}


@pytest.mark.parametrize(
    "package",
    sorted({module_name(p) for p in modules() if p.name == "__init__.py"}),
)
def test_each_packages_all_names_exist(package: str) -> None:
    module = importlib.import_module(package)
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{package} has no __all__"
    assert len(exported) == len(set(exported)), f"{package}.__all__ has duplicates"
    missing = [name for name in exported if not hasattr(module, name)]
    assert missing == [], f"{package}.__all__ names what it does not define: {missing}"


def test_the_public_surface_hides_private_modules() -> None:
    for package in (composer_core, composer_core.model, composer_core.templates):
        assert all(not name.startswith("_") for name in package.__all__)
