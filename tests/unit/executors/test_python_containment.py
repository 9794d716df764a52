"""What a PYTHON node cannot do to its worker (issue 15, item 5).

Each test reproduces what a snippet could do before: read the worker's
secrets from /proc, leave a process behind with setsid(), fork without limit,
write or open files without limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import uvloop

from composer_executors import ErrorCode, ExecutionTimeout, PythonError, run_python

MEMORY = 256 * 1024 * 1024
#: A worker running as root runs snippets as nobody: the kernel applies no process
#: limit to root (RLIMIT_NPROC exempts uid 0), so that is the only way it can hold.
NOBODY = 65534


async def run(code: str, node_input: Any = None, *, timeout: float = 10, **kw: Any) -> Any:
    spec: dict[str, Any] = {"code": code}
    if node_input is not None:
        spec["input"] = node_input
    return await run_python(spec, timeout=timeout, memory_limit_bytes=MEMORY, **kw)


def alive(pid: int) -> bool:
    """Whether ``pid`` still runs; a zombie nobody has reaped yet counts as gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def gone(*pids: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while any(alive(p) for p in pids):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


def reap_leftovers(*pids: int) -> None:
    """A test that fails must not leave its sleepers behind."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


# -- secrets in /proc ------------------------------------------------------------------

#: A worker stand-in: starts with a secret in its environment, optionally makes itself
#: non-dumpable as every service does at start, runs one PYTHON node that tries to read
#: the secret from its parent's /proc files and from its own environment. Run as root,
#: it first drops its capabilities: it stands in for a worker that does not run as root
#: (a root worker's capabilities alone already keep a capless child out of its /proc).
STAND_IN = r"""
import asyncio, ctypes, ctypes.util, json, os, sys
from composer_executors import run_python
from composer_service import forbid_dumping

if os.geteuid() == 0:
    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
    class Data(ctypes.Structure):
        _fields_ = [("e", ctypes.c_uint32), ("p", ctypes.c_uint32), ("i", ctypes.c_uint32)]
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    assert libc.capset(ctypes.byref(Header(0x20080522, 0)), (Data * 2)()) == 0
if sys.argv[1] == "forbid":
    forbid_dumping()
code = '''
import os
def main(input):
    parent = os.getppid()
    out = {"own_env": dict(os.environ)}
    with open("/proc/self/environ", "rb") as f:
        out["own_proc_environ"] = f.read().decode(errors="replace")
    try:
        with open(f"/proc/{parent}/environ", "rb") as f:
            out["parent_environ"] = f.read().decode(errors="replace")
    except OSError as exc:
        out["parent_environ"] = None
        out["parent_environ_error"] = exc.errno
    try:
        open(f"/proc/{parent}/mem", "rb").close()
        out["parent_mem"] = "opened"
    except OSError as exc:
        out["parent_mem"] = None
    return out
'''
out = asyncio.run(run_python({"code": code}, timeout=20, memory_limit_bytes=256 << 20))
print(json.dumps(out))
"""


def stand_in(mode: str, secret: str) -> dict[str, Any]:
    env = {**os.environ, "COMPOSER_WORKER_TOKEN": secret}
    done = subprocess.run(
        [sys.executable, "-c", STAND_IN, mode],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_a_node_cannot_read_the_secrets_of_a_non_dumpable_worker() -> None:
    secret = secrets.token_hex(16)
    out = stand_in("forbid", secret)
    assert out["parent_environ"] is None, "the snippet read the worker's environment"
    assert out["parent_mem"] is None, "the snippet opened the worker's memory"
    assert secret not in json.dumps(out)
    assert set(out["own_env"]) <= {"PATH", "LANG", "LC_ALL", "HOME", "TMPDIR"}


def test_without_non_dumpable_the_same_node_reads_them() -> None:
    # The control: it shows the test above would see a leak if there were one.
    secret = secrets.token_hex(16)
    out = stand_in("dumpable", secret)
    assert out["parent_environ"] is not None and secret in out["parent_environ"]


async def test_the_node_holds_no_capabilities() -> None:
    # A worker running as root would otherwise read any process's memory
    # (CAP_SYS_PTRACE ignores non-dumpable) and escape the process limit.
    code = (
        "def main(input):\n"
        "    status = open('/proc/self/status').read().splitlines()\n"
        "    caps = {l.split(':')[0]: int(l.split()[1], 16) for l in status if l.startswith('Cap')}\n"
        "    nnp = [l.split()[1] for l in status if l.startswith('NoNewPrivs')]\n"
        "    return {'caps': caps, 'no_new_privs': nnp}\n"
    )
    out = await run(code)
    assert out["caps"]["CapEff"] == 0
    assert out["caps"]["CapPrm"] == 0
    assert out["caps"]["CapInh"] == 0
    assert out["caps"]["CapAmb"] == 0
    # and none to gain by running a setuid or file-capability program
    assert out["no_new_privs"] == ["1"]
    if os.geteuid() == 0:
        # dropping the bounding set needs CAP_SETPCAP, which only a root worker has
        assert out["caps"]["CapBnd"] == 0


# -- processes left behind -------------------------------------------------------------

SETSID_SLEEPER = (
    "import subprocess\n"
    "def main(input):\n"
    "    p = subprocess.Popen(['sleep', '60'], start_new_session=True)\n"
    "    print('left', p.pid, flush=True)\n"
)


async def test_a_process_in_its_own_session_is_killed_when_the_node_ends() -> None:
    pid = await run(SETSID_SLEEPER + "    return p.pid\n")
    try:
        assert await gone(pid), f"process {pid} outlived its node"
    finally:
        reap_leftovers(pid)


async def test_a_daemon_that_double_forked_is_killed_when_the_node_ends() -> None:
    # The classic daemon: fork, setsid, fork again, the middle one exits so the
    # grandchild is nobody's child any more.
    code = (
        "import os, time\n"
        "def main(input):\n"
        "    r, w = os.pipe()\n"
        "    if os.fork() == 0:\n"
        "        os.setsid()\n"
        "        pid = os.fork()\n"
        "        if pid == 0:\n"
        "            time.sleep(60)\n"
        "            os._exit(0)\n"
        "        os.write(w, str(pid).encode())\n"
        "        os._exit(0)\n"
        "    os.close(w)\n"
        "    pid = int(os.read(r, 32))\n"
        "    deadline = time.monotonic() + 5\n"
        "    while int(open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[1]) != os.getpid():\n"
        "        assert time.monotonic() < deadline, 'the grandchild was never orphaned'\n"
        "        time.sleep(0.01)\n"
        "    return pid\n"
    )
    pid = await run(code)
    try:
        assert await gone(pid), f"the daemon {pid} outlived its node"
    finally:
        reap_leftovers(pid)


async def test_a_process_in_its_own_session_is_killed_when_the_node_fails() -> None:
    with pytest.raises(PythonError) as caught:
        await run(SETSID_SLEEPER + "    raise RuntimeError('failing on purpose')\n")
    line = next(x for x in caught.value.message.splitlines() if x.startswith("left "))
    pid = int(line.split()[1])
    try:
        assert await gone(pid), f"process {pid} outlived its failed node"
    finally:
        reap_leftovers(pid)


async def test_a_process_in_its_own_session_is_killed_on_a_timeout() -> None:
    with pytest.raises(ExecutionTimeout) as caught:
        await run(SETSID_SLEEPER + "    while True:\n        pass\n", timeout=1.5)
    line = next(x for x in caught.value.message.splitlines() if x.startswith("left "))
    pid = int(line.split()[1])
    try:
        assert await gone(pid), f"process {pid} outlived its timed-out node"
    finally:
        reap_leftovers(pid)


async def test_a_process_left_by_a_node_that_crashed_is_killed() -> None:
    # The node's own process is gone before the worker looks: what it started is
    # found by its session.
    code = (
        "import os, subprocess\n"
        "def main(input):\n"
        "    p = subprocess.Popen(['sleep', '60'])\n"
        "    print('left', p.pid, flush=True)\n"
        "    os._exit(3)\n"
    )
    with pytest.raises(PythonError) as caught:
        await run(code)
    assert caught.value.code == ErrorCode.CRASHED
    line = next(x for x in caught.value.message.splitlines() if x.startswith("left "))
    pid = int(line.split()[1])
    try:
        assert await gone(pid), f"process {pid} outlived its crashed node"
    finally:
        reap_leftovers(pid)


def test_on_uvloop_a_node_ends_at_once_and_leaves_nothing() -> None:
    # The services run on uvloop, which hands children copies of their stdio sockets.
    async def node() -> tuple[float, int]:
        started = time.monotonic()
        pid = await run(SETSID_SLEEPER + "    return p.pid\n")
        took = time.monotonic() - started
        return took, pid

    took, pid = uvloop.run(node())
    try:
        assert took < 3
        assert asyncio.run(gone(pid)), f"process {pid} outlived its node"
    finally:
        reap_leftovers(pid)


# -- limits ----------------------------------------------------------------------------


async def test_forking_without_end_fails_the_node_cleanly() -> None:
    # Only os and time: as nobody, the snippet may not be able to import from the
    # interpreter's directory (a Python under /root), and these are loaded already.
    code = (
        "import os, time\n"
        "def main(input):\n"
        "    pids = []\n"
        "    try:\n"
        "        for _ in range(1000):\n"
        "            pid = os.fork()\n"
        "            if pid == 0:\n"
        "                time.sleep(60)\n"
        "                os._exit(0)\n"
        "            pids.append(pid)\n"
        "    finally:\n"
        "        print('forked', *pids, flush=True)\n"
        "    return len(pids)\n"
    )
    uid = NOBODY if os.geteuid() == 0 else None
    started = time.monotonic()
    with pytest.raises(PythonError) as caught:
        await run(code, max_processes=20, uid=uid, timeout=30)
    err = caught.value
    line = next(x for x in err.message.splitlines() if x.startswith("forked"))
    pids = [int(p) for p in line.split()[1:]]
    try:
        assert err.code == ErrorCode.EXCEPTION
        assert err.exc_type == "BlockingIOError"
        assert "at most 20 processes" in err.message
        assert len(pids) <= 20
        assert time.monotonic() - started < 20
        assert await gone(*pids), "forked processes outlived the node"
    finally:
        reap_leftovers(*pids)


async def test_a_worker_not_running_as_root_cannot_switch_users() -> None:
    if os.geteuid() == 0:
        out = await run("import os\ndef main(input):\n    return os.getuid()\n", uid=NOBODY)
        assert out == NOBODY
    else:
        with pytest.raises(ValueError, match="root"):
            await run("def main(input):\n    return 1\n", uid=NOBODY)


async def test_writing_a_file_past_the_limit_fails_the_node() -> None:
    code = (
        "def main(input):\n"
        "    with open('big.bin', 'wb') as f:\n"
        "        for _ in range(4):\n"
        "            f.write(b'x' * (1024 * 1024))\n"
        "    return 'written'\n"
    )
    with pytest.raises(PythonError) as caught:
        await run(code, max_file_bytes=1024 * 1024)
    err = caught.value
    assert err.code == ErrorCode.EXCEPTION
    assert "File too large" in err.message
    assert "files of at most 1 MiB" in err.message


async def test_opening_too_many_files_fails_the_node() -> None:
    code = (
        "def main(input):\n"
        "    held = [open(f'f{i}', 'w') for i in range(200)]\n"
        "    return len(held)\n"
    )
    with pytest.raises(PythonError) as caught:
        await run(code, max_open_files=64)
    err = caught.value
    assert err.code == ErrorCode.EXCEPTION
    assert "Too many open files" in err.message
    assert "at most 64 open files" in err.message


async def test_within_the_limits_a_node_forks_writes_and_opens_files() -> None:
    code = (
        "import subprocess\n"
        "def main(input):\n"
        "    with open('ok.bin', 'wb') as f:\n"
        "        f.write(b'x' * 1000)\n"
        "    held = [open('ok.bin') for _ in range(10)]\n"
        "    out = subprocess.run(['echo', 'hi'], capture_output=True, text=True, check=True)\n"
        "    return [out.stdout.strip(), len(held)]\n"
    )
    assert await run(code) == ["hi", 10]
