"""Issue 17, item 3: a service dies with the supervisor that started it, even when that
is SIGKILLed (it stops as on SIGTERM, and is killed when that stop outlasts the grace);
one whose supervisor is gone before it starts does not start.

The processes are real: this test → a stand-in supervisor → a service on
``composer_service.run``, told the supervisor's pid as ``make run`` tells it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

#: The service: says it serves, waits for its stop event, writes down that it stopped
#: gracefully; with "hang" its stop never ends.
SERVICE = r"""
import asyncio, sys
from pathlib import Path
from composer_service import run, stop_on_signals

async def serve():
    with stop_on_signals() as stop:
        Path(sys.argv[1]).write_text("serving")
        await stop.wait()
        if sys.argv[2] == "hang":
            await asyncio.sleep(3600)
        Path(sys.argv[1]).write_text("stopped")

sys.exit(run("probe", serve, uvloop=False))
"""

#: The stand-in supervisor: starts the service in its own session (as the dev stack
#: does), prints its pid and waits to be killed.
SUPERVISOR = r"""
import os, subprocess, sys, time
env = {**os.environ, "COMPOSER_SUPERVISOR_PID": str(os.getpid()),
       "COMPOSER_SUPERVISOR_GRACE": "1"}
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], *sys.argv[2:]], env=env,
                         start_new_session=True)
print(child.pid, flush=True)
time.sleep(3600)
"""


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (an unreaped zombie counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def wait_until(check: object, what: str, timeout: float) -> None:
    assert callable(check)
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout}s"
        time.sleep(0.05)


@pytest.fixture
def started(tmp_path: Path) -> Iterator[object]:
    """start(mode) → (supervisor, service pid, marker file); every process killed after."""
    made: list[tuple[subprocess.Popen[str], int]] = []

    def start(mode: str) -> tuple[subprocess.Popen[str], int, Path]:
        marker = tmp_path / f"{mode}.txt"
        supervisor = subprocess.Popen(
            [sys.executable, "-c", SUPERVISOR, SERVICE, str(marker), mode],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert supervisor.stdout is not None
        pid = int(supervisor.stdout.readline())
        made.append((supervisor, pid))
        wait_until(lambda: marker.exists(), "the service serving", 60)
        return supervisor, pid, marker

    yield start
    for supervisor, pid in made:
        supervisor.kill()
        supervisor.wait()
        assert supervisor.stdout is not None
        supervisor.stdout.close()
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_service_stops_gracefully_when_its_supervisor_is_sigkilled(started: object) -> None:
    assert callable(started)
    supervisor, pid, marker = started("graceful")
    supervisor.kill()
    supervisor.wait()
    wait_until(lambda: not alive(pid), "the service exiting", 20)
    assert marker.read_text() == "stopped"  # it drained as on SIGTERM


def test_a_service_whose_stop_hangs_is_killed_after_the_grace(started: object) -> None:
    assert callable(started)
    supervisor, pid, marker = started("hang")
    supervisor.kill()
    supervisor.wait()
    wait_until(lambda: not alive(pid), "the service being killed", 20)
    assert marker.read_text() == "serving"


def test_a_service_whose_supervisor_is_already_gone_does_not_start(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    done = subprocess.run(
        [sys.executable, "-c", SERVICE, str(tmp_path / "m.txt"), "graceful"],
        env={**os.environ, "COMPOSER_SUPERVISOR_PID": str(gone.pid)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert f"probe: its supervisor (pid {gone.pid}) is gone" in done.stderr
    assert not (tmp_path / "m.txt").exists()
