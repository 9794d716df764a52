"""Issue 17, item 2: a service that cannot get its port stops the stack once, with the
line that names the setting, instead of being restarted into the same wall; a crash
with any other code is still restarted. Item 3: the children learn whom to die with,
and the stack itself dies with `make run`. The children are real processes."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from composer_devstack._stack import EXIT_PORT_IN_USE
from composer_devstack._supervisor import Supervisor

#: A service that stops on SIGTERM (as every real one does), after saying it started.
STEADY = "import signal, sys; print('up', flush=True); signal.sigwait([signal.SIGTERM])"


def exiting(code: int) -> list[str]:
    return [sys.executable, "-c", f"import sys; print('bye', flush=True); sys.exit({code})"]


async def test_a_port_in_use_exit_stops_the_stack_once(capsys: pytest.CaptureFixture[str]) -> None:
    sup = Supervisor(grace=5, fatal={EXIT_PORT_IN_USE: "a port is taken: stopping the stack"})
    sup.add("steady", [sys.executable, "-c", STEADY], {})
    sup.add("clash", exiting(EXIT_PORT_IN_USE), {})
    await asyncio.wait_for(sup.run(), 30)
    out = capsys.readouterr().out
    assert sup.failure == EXIT_PORT_IN_USE
    assert out.count("exited with code 3: a port is taken: stopping the stack") == 1, out
    assert "restarting" not in out, out
    steady = sup.services[0].process
    assert steady is not None and steady.returncode is not None  # stopped with the stack


async def test_another_crash_is_restarted(capsys: pytest.CaptureFixture[str]) -> None:
    sup = Supervisor(grace=5, fatal={EXIT_PORT_IN_USE: "a port is taken"})
    sup.add("crash", exiting(1), {})
    running = asyncio.create_task(sup.run())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    seen = ""
    while "restarting in" not in seen:
        assert loop.time() < deadline, f"no restart within 30s: {seen}"
        await asyncio.sleep(0.05)
        seen += capsys.readouterr().out
    sup.stop()
    await asyncio.wait_for(running, 30)
    assert sup.failure is None
    assert "exited with code 1; restarting in" in seen


async def test_children_learn_the_supervisors_pid(capsys: pytest.CaptureFixture[str]) -> None:
    """What each service watches to die with the supervisor (composer_common.supervised)."""
    sup = Supervisor(grace=7, fatal={0: "done"})
    code = (
        "import os; print(os.environ['COMPOSER_SUPERVISOR_PID'] == str(os.getppid()), "
        "os.environ['COMPOSER_SUPERVISOR_GRACE'], flush=True)"
    )
    sup.add("child", [sys.executable, "-c", code], {})
    await asyncio.wait_for(sup.run(), 30)
    assert "| True 7\n" in capsys.readouterr().out


ROOT = Path(__file__).resolve().parents[3]


def test_make_run_has_the_stack_watch_make_itself() -> None:
    """No `uv run` between make and the stack, and its pid passed: killing make stops it."""
    shown = subprocess.run(
        ["make", "--no-print-directory", "-n", "run"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()[-1]
    assert shown == "exec .venv/bin/python -m composer_devstack --parent-pid $PPID"
    with_replicas = subprocess.run(
        ["make", "--no-print-directory", "-n", "run", "REPLICAS=coordinator=2 timer=2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()[-1]
    assert with_replicas == f'{shown} --replicas "coordinator=2 timer=2"'


def test_a_stack_whose_parent_is_already_gone_does_not_start(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "composer_devstack",
            "--state",
            str(tmp_path),
            "--parent-pid",
            str(gone.pid),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert f"its parent (pid {gone.pid}) is gone" in done.stderr
    assert not (tmp_path / "tokens.env").exists()  # nothing started
