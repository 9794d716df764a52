"""Every service is non-dumpable: no child of its user reads its environment or memory.

Issue 15, item 5: a PYTHON node read the worker's token and Redis URL from
/proc/<parent>/environ, and under ``make run`` (one user for every service)
any other service's too.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

#: A service as small as one gets: ``run`` around a serve coroutine that says what it is.
PROBE = r"""
import gc
import sys
from composer_service import run
from composer_common.process import is_dumpable

async def serve():
    print("dumpable" if is_dumpable() else "non-dumpable", flush=True)
    print(gc.get_threshold()[0], gc.get_freeze_count() > 0, flush=True)

sys.exit(run("probe", serve, uvloop=False))
"""

#: The same question asked of a process that did not go through run (the control).
BARE = "from composer_common.process import is_dumpable; print(is_dumpable())"


def test_a_service_started_by_run_is_non_dumpable() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    dumpable, gc_tuned = done.stdout.splitlines()
    assert dumpable == "non-dumpable"
    # and its collector tuned (composer_common.gc_tuning): start-up's objects frozen
    assert gc_tuned == "10000 True"


def test_a_process_is_dumpable_unless_it_asks_otherwise() -> None:
    done = subprocess.run(
        [sys.executable, "-c", BARE], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"


def test_every_service_starts_through_run() -> None:
    """run() is where a service becomes non-dumpable: each service's main() must call it."""
    mains = sorted(ROOT.glob("services/*/src/*/__main__.py"))
    assert len(mains) >= 7
    for path in mains:
        tree = ast.parse(path.read_text(), str(path))
        main = next(
            node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "main"
        )
        calls = {
            node.func.id
            for node in ast.walk(main)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        }
        assert "run" in calls, f"{path.relative_to(ROOT)}: main() does not call run()"
