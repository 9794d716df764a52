"""The public surface of composer_executors: small, complete, and free of the SDK."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import composer_executors

PACKAGE = Path(composer_executors.__file__).parent
MODULES = sorted(PACKAGE.glob("*.py"))


def test_all_lists_exactly_the_public_names() -> None:
    public = {name for name in vars(composer_executors) if not name.startswith("_")}
    assert set(composer_executors.__all__) == public
    for name in composer_executors.__all__:
        assert getattr(composer_executors, name).__doc__, f"{name} has no docstring"


@pytest.mark.parametrize("module", MODULES, ids=lambda p: p.stem)
def test_no_module_imports_the_sdk_or_another_service(module: Path) -> None:
    tree = ast.parse(module.read_text(encoding="utf-8"))
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
    }
    composer = {name for name in imported if name.startswith("composer")}
    assert composer <= {"composer_executors", "composer_rpc"}, f"{module.name} imports {composer}"
    # Of composer_rpc, only the shared error codes: no generated gRPC code.
    rpc = {
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        and node.module
        and node.module.startswith("composer_rpc")
    }
    assert rpc <= {"composer_rpc.codes"}, f"{module.name} imports {rpc}"


def test_the_child_program_uses_only_the_standard_library() -> None:
    # It runs as `python -I -c`, where nothing but the standard library is promised.
    tree = ast.parse((PACKAGE / "_child.py").read_text(encoding="utf-8"))
    names = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert names <= set(sys.stdlib_module_names) | {"__future__"}


def test_every_module_imports_alone() -> None:
    names = [f"composer_executors.{p.stem}" for p in MODULES if p.stem != "__init__"]
    script = "import importlib, sys\nfor n in sys.argv[1:]:\n    importlib.import_module(n)\n"
    for name in names:
        done = subprocess.run(
            [sys.executable, "-c", script, name], capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, f"{name} does not import alone:\n{done.stderr}"
