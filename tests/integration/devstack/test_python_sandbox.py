"""Under `make run`, a PYTHON node is attacked from inside as the attacker did (issue 25).

The stack runs as `make run` starts it, as root on this machine, with its
defaults. One node tries everything the attack found open: the admin token
in .state/tokens.env, /etc/shadow, PostgreSQL, Redis, the API and the admin
ports on loopback and on the host's own addresses, 120 forks, 128 MiB written
outside its directory, a setsid() daemon, and killing its worker. Then many
one-attempt PYTHON nodes run at once: none may crash (item 2).
"""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from composer_executors._sandbox import host_addresses
from tests.integration.devstack.conftest import Stack, ready, saved_tokens

ATTACK = """
import errno, os, signal, socket, subprocess, time

def attempt(fn):
    try:
        return fn()
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))

def read(path):
    with open(path, 'rb') as f:
        return 'READ ' + f.read(200).decode(errors='replace')

def connect(host, port):
    socket.create_connection((host, port), timeout=3).close()
    return 'CONNECTED'

def forks():
    pids = []
    try:
        for _ in range(120):
            pid = os.fork()
            if pid == 0:
                time.sleep(120)
                os._exit(0)
            pids.append(pid)
        stopped_by = None
    except OSError as exc:
        stopped_by = errno.errorcode[exc.errno]
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    return {'forked': len(pids), 'stopped_by': stopped_by}

def write(path, size):
    with open(path, 'wb') as f:
        for _ in range(size >> 20):
            f.write(b'x' * (1 << 20))
    return 'WROTE'

def main(input):
    out = {'uid': os.getuid()}
    out['files'] = {p: attempt(lambda p=p: read(p)) for p in input['files']}
    out['ports'] = {f'{h}:{p}': attempt(lambda h=h, p=p: connect(h, p))
                    for h in input['hosts'] for p in input['ports']}
    out['forks'] = forks()
    out['write_outside'] = {p: attempt(lambda p=p: write(p, 1 << 20))
                            for p in ('/usr/x', '/var/x', '/x', input['state'] + '/x')}
    out['write_128mib'] = attempt(lambda: write('/tmp/big', 128 << 20))
    subprocess.Popen(['sleep', '600'], start_new_session=True)
    out['kill_worker'] = attempt(lambda: os.kill(input['worker_pid'], signal.SIGKILL))
    out['kill_parent'] = attempt(lambda: os.kill(os.getppid(), signal.SIGKILL))
    return out
"""


def _processes() -> list[int]:
    with os.scandir("/proc") as entries:
        return [int(e.name) for e in entries if e.name.isdigit()]


def _pids_of_uids(first: int, last: int) -> list[int]:
    found = []
    for pid in _processes():
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        uid = next(int(x.split()[1]) for x in status.splitlines() if x.startswith("Uid:"))
        if first <= uid <= last:
            found.append(pid)
    return found


def _workers_pid(stack: Stack) -> int:
    """The workers service's pid: the process listening on its admin port."""
    port = stack.admin_ports[5]  # SERVICES order: …, partition-manager, workers, …
    inode = None
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].split(":")[1], 16) == port and fields[3] == "0A":
            inode = fields[9]
    assert inode is not None, f"nothing listens on the workers' admin port {port}"
    for pid in _processes():
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == f"socket:[{inode}]":
                    return pid
            except OSError:
                continue
    raise AssertionError("no process holds the workers' admin port")


async def _run(
    session: aiohttp.ClientSession, stack: Stack, auth: dict[str, str], body: dict[str, Any]
) -> dict[str, Any]:
    async with session.post(f"{stack.api}/v1/runs", json=body, headers=auth) as r:
        assert r.status == 201, await r.text()
        run_id = (await r.json())["run_id"]
    async with session.get(f"{stack.api}/v1/runs/{run_id}/result?timeout=90", headers=auth) as r:
        result: dict[str, Any] = await r.json()
    return result


async def test_a_python_node_under_make_run_reaches_nothing_of_the_stack(
    running_stack: Stack, database_url: str, redis_url: str
) -> None:
    stack = running_stack
    api_port = urlsplit(stack.api).port
    own = [str(a) for a in host_addresses() if not a.is_loopback]
    with socket.create_server(("0.0.0.0", 0)) as listener:  # a server on every address
        spare = listener.getsockname()[1]
        ports = [
            urlsplit(database_url).port or 5432,
            urlsplit(redis_url).port or 6379,
            api_port,
            *stack.admin_ports,
            spare,
        ]
        async with aiohttp.ClientSession() as session:
            await ready(session, f"{stack.api}/healthz")
            for port in stack.admin_ports:
                await ready(session, f"http://127.0.0.1:{port}/readyz")
            worker_pid = _workers_pid(stack)
            auth = {"Authorization": f"Bearer {saved_tokens(stack.state)['COMPOSER_API_TOKEN']}"}
            definition = {
                "id": "attack",
                "nodes": [
                    {
                        "id": "attack",
                        "type": "PYTHON",
                        "timeout_seconds": 120,
                        "retry": {"max_attempts": 1},
                        "spec": {"code": ATTACK, "input": "{{input}}"},
                    }
                ],
                "edges": [],
                "output": "{{tasks.attack.output}}",
            }
            async with session.post(
                f"{stack.api}/v1/workflows?deploy=true", json=definition, headers=auth
            ) as r:
                assert r.status == 201, await r.text()
            attack_input = {
                "files": [str(stack.state / "tokens.env"), "/etc/shadow", "/root/.bash_history"],
                "hosts": ["127.0.0.1", *own],
                "ports": ports,
                "state": str(stack.state),
                "worker_pid": worker_pid,
            }
            run = await _run(session, stack, auth, {"workflow_id": "attack", "input": attack_input})
            assert run["status"] == "SUCCEEDED", run.get("error")
            out = run["output"]

            # Files: none of the host's.
            assert all(v == "ENOENT" for v in out["files"].values()), out["files"]
            # The servers: none, on loopback or on the host's own addresses.
            assert not [k for k, v in out["ports"].items() if v == "CONNECTED"], out["ports"]
            # Not root (a uid of its own: the stack runs as root here), and the limit holds.
            assert out["uid"] != 0
            if os.geteuid() == 0:
                assert 50000 <= out["uid"] < 50000 + 32
            assert out["forks"]["stopped_by"] == "EAGAIN" and out["forks"]["forked"] <= 64
            # Writes: only its capped tmpfs.
            assert all(v in ("EROFS", "EACCES", "ENOENT") for v in out["write_outside"].values())
            assert out["write_128mib"] in ("ENOSPC", "EFBIG")
            # The worker is out of reach, and lives on.
            assert out["kill_worker"] == "ESRCH"
            assert out["kill_parent"] == "EPERM"
            assert _workers_pid(stack) == worker_pid
            # Nothing of the node outlived it: no process of the nodes' uids is left.
            deadline = asyncio.get_running_loop().time() + 10
            while left := _pids_of_uids(50000, 50000 + 32):
                assert asyncio.get_running_loop().time() < deadline, f"left behind: {left}"
                await asyncio.sleep(0.1)


async def test_many_one_attempt_python_nodes_at_once_never_crash(running_stack: Stack) -> None:
    # The pointer of issue 25: 12 runs of 8 one-attempt PYTHON nodes, 6 of 12 failed by
    # SIGSEGV before the workers stopped starting children with fork().
    stack = running_stack
    branches = [
        {
            "id": f"p{i}",
            "type": "PYTHON",
            "retry": {"max_attempts": 1},
            "spec": {
                "code": "import json\ndef main(input):\n    return input['i']\n",
                "input": {"i": i},
            },
        }
        for i in range(8)
    ]
    definition = {
        "id": "fanout",
        "nodes": [
            {"id": "fork", "type": "FORK"},
            *branches,
            {"id": "join", "type": "JOIN"},
        ],
        "edges": [
            *({"from": "fork", "to": b["id"]} for b in branches),
            *({"from": b["id"], "to": "join"} for b in branches),
        ],
    }
    async with aiohttp.ClientSession() as session:
        await ready(session, f"{stack.api}/healthz")
        for port in stack.admin_ports:
            await ready(session, f"http://127.0.0.1:{port}/readyz")
        auth = {"Authorization": f"Bearer {saved_tokens(stack.state)['COMPOSER_API_TOKEN']}"}
        async with session.post(
            f"{stack.api}/v1/workflows?deploy=true", json=definition, headers=auth
        ) as r:
            assert r.status == 201, await r.text()
        runs = await asyncio.gather(
            *(_run(session, stack, auth, {"workflow_id": "fanout", "input": {}}) for _ in range(12))
        )
    failed = [r for r in runs if r["status"] != "SUCCEEDED"]
    assert not failed, failed[:2]
    assert "skipping fork() handlers" not in stack.text
