"""The bubblewrap sandbox of a PYTHON node, attacked from inside (issue 25, item 1).

Each test runs a node that tries what the attack on the stack did — read the
host's files, reach the servers, fork without end, write outside its
directory, leave a daemon, kill its worker — and checks it cannot. The
sandbox is the real one (bwrap, slirp4netns); the network tests make a
"public" host of their own in a network namespace (iproute2, as root, which
CI is).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from composer_executors import (
    ErrorCode,
    PythonError,
    Sandbox,
    SandboxPolicy,
    SandboxUnavailable,
    check_sandbox,
    run_python,
)
from composer_executors._guard import refusal_reason
from composer_executors._sandbox import NON_PUBLIC_V4, host_addresses, unreachable_networks

MEMORY = 256 * 1024 * 1024
ROOT = os.geteuid() == 0


async def run(sandbox: Sandbox, code: str, node_input: Any = None, **kw: Any) -> Any:
    spec: dict[str, Any] = {"code": code, "input": node_input or {}}
    kw.setdefault("timeout", 20)
    return await run_python(spec, memory_limit_bytes=MEMORY, sandbox=sandbox, **kw)


def uids_running(first: int, count: int) -> list[int]:
    """Pids of processes (on this host) whose real uid is in [first, first + count)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry.name}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("Uid:") and first <= int(line.split()[1]) < first + count:
                found.append(int(entry.name))
    return found


async def none_left(sandbox: Sandbox, within: float = 5.0) -> bool:
    """No process of the sandbox's uids is left (root workers: a uid per node)."""
    first, count = sandbox.policy.first_uid, sandbox.policy.slots
    deadline = time.monotonic() + within
    while uids_running(first, count):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


# -- who it is, what it sees ------------------------------------------------------------


async def test_a_node_is_an_unprivileged_user_with_nothing_of_the_host(sandbox: Sandbox) -> None:
    code = """
import os
def main(input):
    status = dict(line.split(':', 1) for line in open('/proc/self/status').read().splitlines())
    found = {}
    for path in input['paths']:
        try:
            open(path, 'rb').read(1)
            found[path] = 'read'
        except OSError as exc:
            found[path] = type(exc).__name__
    return {
        'uid': os.getuid(), 'euid': os.geteuid(),
        'caps': [status[k].strip() for k in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb')],
        'no_new_privs': status['NoNewPrivs'].strip(),
        'root': sorted(os.listdir('/')),
        'pids': sorted(int(p) for p in os.listdir('/proc') if p.isdigit()),
        'found': found,
        'hostname': os.uname().nodename,
    }
"""
    secret_file = Path.cwd() / "pyproject.toml"  # any file of the worker's own
    paths = ["/etc/shadow", "/etc/passwd", str(secret_file), "/root/.profile", "/var/log/syslog"]
    out = await run(sandbox, code, {"paths": paths})
    assert out["uid"] == out["euid"] != 0
    if ROOT:  # a uid of its own, not the worker's
        first = sandbox.policy.first_uid
        assert first <= out["uid"] < first + sandbox.policy.slots
    assert out["caps"] == ["0000000000000000"] * 5
    assert out["no_new_privs"] == "1"
    assert set(out["root"]) <= {"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc",
                                "root", "sbin", "tmp", "usr"}  # fmt: skip
    assert out["pids"] == [1, 2]  # bwrap's reaper and the node: no process of the host
    assert out["found"]["/etc/shadow"] == "FileNotFoundError"
    assert out["found"][str(secret_file)] == "FileNotFoundError"
    assert out["found"]["/root/.profile"] == "FileNotFoundError"
    assert out["found"]["/var/log/syslog"] == "FileNotFoundError"
    assert out["found"]["/etc/passwd"] == "read"  # the sandbox's own, made up
    assert out["hostname"] == "sandbox"


async def test_only_its_tmpfs_is_writable_and_it_is_capped_and_gone_after(
    sandbox: Sandbox,
) -> None:
    code = """
import errno, os
def main(input):
    out = {}
    for path in ('/usr/evil', '/etc/evil', '/evil', '/proc/evil', '/root/evil'):
        try:
            open(path, 'wb').write(b'x')
            out[path] = 'written'
        except OSError as exc:
            out[path] = errno.errorcode[exc.errno]
    out['before'] = os.listdir('/tmp')
    open('/tmp/mark', 'w').write('x')
    written = 0
    try:
        for i in range(100):  # 128 MiB in files of 4 MiB, past the 8 MiB tmpfs
            with open(f'/tmp/f{i}', 'wb') as f:
                f.write(b'x' * (4 << 20))
            written += 4 << 20
    except OSError as exc:
        out['full'] = errno.errorcode[exc.errno]
    out['written'] = written
    return out
"""
    small = Sandbox(SandboxPolicy(tmp_bytes=8 * 1024 * 1024, slots=2))
    small.open()
    try:
        first = await run(small, code)
        second = await run(small, code)
    finally:
        small.close()
    for path in ("/usr/evil", "/etc/evil", "/evil", "/root/evil"):
        assert first[path] in ("EROFS", "EACCES"), (path, first[path])
    assert first["full"] == "ENOSPC"
    assert first["written"] <= 8 * 1024 * 1024
    assert first["before"] == [] and second["before"] == []  # nothing of the last node


async def test_forking_without_end_stops_at_the_process_limit(sandbox: Sandbox) -> None:
    code = """
import os, time
def main(input):
    pids, error = [], None
    for _ in range(120):
        try:
            pid = os.fork()
        except OSError as exc:
            error = exc.errno
            break
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        pids.append(pid)
    return {'forked': len(pids), 'errno': error}
"""
    out = await run(sandbox, code, max_processes=16)
    assert out["errno"] == 11  # EAGAIN: RLIMIT_NPROC holds (the node is not root)
    assert out["forked"] <= 16
    if ROOT:
        assert await none_left(sandbox)


async def test_a_daemon_does_not_outlive_its_node(sandbox: Sandbox) -> None:
    code = """
import os, subprocess, time
def main(input):
    # double fork + setsid: a daemon re-parented away from the node
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(300)
        os._exit(0)
    time.sleep(0.2)
    subprocess.Popen(['sleep', '300'], start_new_session=True)
    return os.getuid()
"""
    uid = await run(sandbox, code)
    if ROOT:
        assert await none_left(sandbox), f"a process of uid {uid} outlived its node"
    assert not [p for p in _sleepers() if _uid_of(p) == uid]


async def test_a_node_cannot_kill_or_see_its_worker(sandbox: Sandbox) -> None:
    code = """
import os, signal
def main(input):
    tried = {}
    for name, pid in (('worker', input['worker']), ('parent', os.getppid()), ('all', -1)):
        try:
            os.kill(pid, signal.SIGKILL)
            tried[name] = 'sent'
        except OSError as exc:
            tried[name] = type(exc).__name__
    return tried
"""
    out = await run(sandbox, code, {"worker": os.getpid()})
    assert out["worker"] == "ProcessLookupError"  # no such pid in its namespace
    assert out["parent"] == "PermissionError"  # bwrap's reaper runs as another uid
    # kill(-1) reaches only its own namespace: the test process (the worker) lives on.
    assert await run(sandbox, "def main(input):\n    return 1\n") == 1


async def test_the_whole_tree_dies_with_a_timed_out_node(sandbox: Sandbox) -> None:
    code = """
import subprocess, time
def main(input):
    subprocess.Popen(['sleep', '300'], start_new_session=True)
    time.sleep(300)
"""
    with pytest.raises(Exception, match="did not finish within"):
        await run(sandbox, code, timeout=1.0)
    if ROOT:
        assert await none_left(sandbox)


# -- the network --------------------------------------------------------------------------


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP server of the host's on every address (as PostgreSQL or an admin port)."""
    server = socket.create_server(("0.0.0.0", 0))
    server.listen(16)
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


CONNECT = """
import socket
def main(input):
    out = {}
    for host in input['hosts']:
        try:
            socket.create_connection((host, input['port']), timeout=3).close()
            out[host] = 'connected'
        except OSError as exc:
            out[host] = type(exc).__name__
    return out
"""


async def test_outbound_reaches_neither_the_hosts_loopback_nor_its_addresses(
    sandbox: Sandbox, listener: int
) -> None:
    own = [str(a) for a in host_addresses() if not a.is_loopback]
    assert own, "this host has no address but loopback"
    hosts = ["127.0.0.1", "10.0.2.2", *own]
    # The host itself connects to all of them: the listener is there.
    for host in ["127.0.0.1", *own]:
        socket.create_connection((host, listener), timeout=3).close()
    out = await run(sandbox, CONNECT, {"hosts": hosts, "port": listener})
    assert all(v != "connected" for v in out.values()), out


async def test_network_none_reaches_nothing(listener: int) -> None:
    box = Sandbox(SandboxPolicy(network="none", slots=2))
    box.open()
    try:
        own = [str(a) for a in host_addresses() if not a.is_loopback]
        out = await run(box, CONNECT, {"hosts": ["127.0.0.1", *own], "port": listener})
    finally:
        box.close()
    assert all(v != "connected" for v in out.values()), out


@pytest.fixture
def public_host() -> Iterator[str]:
    """An HTTP server on a public address, in a network namespace behind a veth pair
    (11.x is globally routable, so the sandbox must let it through; this machine's
    network is closed, so nothing real is shadowed)."""
    if not ROOT:
        pytest.fail("the network tests make a namespace with ip netns: run them as root")
    name = f"cmp{uuid.uuid4().hex[:6]}"
    octet = int(uuid.uuid4().hex[:2], 16) % 250 + 1
    here, there = f"11.{octet}.77.1", f"11.{octet}.77.2"
    steps = [
        ["ip", "netns", "add", name],
        ["ip", "link", "add", f"{name}a", "type", "veth", "peer", "name", f"{name}b"],
        ["ip", "link", "set", f"{name}b", "netns", name],
        ["ip", "addr", "add", f"{here}/30", "dev", f"{name}a"],
        ["ip", "link", "set", f"{name}a", "up"],
        ["ip", "netns", "exec", name, "ip", "addr", "add", f"{there}/30", "dev", f"{name}b"],
        ["ip", "netns", "exec", name, "ip", "link", "set", f"{name}b", "up"],
        ["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"],
    ]
    server = None
    try:
        for step in steps:
            subprocess.run(step, check=True, capture_output=True)
        server = subprocess.Popen(
            ["ip", "netns", "exec", name, "python3", "-m", "http.server", "8000", "--bind", there],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection((there, 8000), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the test's public host did not start"
                time.sleep(0.05)
        yield there
    finally:
        if server is not None:
            server.kill()
            server.wait()
        subprocess.run(["ip", "link", "del", f"{name}a"], capture_output=True)
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


async def test_outbound_reaches_a_public_address_but_not_the_hosts_own(
    sandbox: Sandbox, public_host: str
) -> None:
    here = str(ipaddress.IPv4Address(public_host) - 1)  # the host's end of the veth: public
    out = await run(sandbox, CONNECT, {"hosts": [public_host], "port": 8000})
    assert out == {public_host: "connected"}
    # An address of the host's own is closed even when it is public.
    with socket.create_server((here, 0)) as server:
        port = server.getsockname()[1]
        out = await run(sandbox, CONNECT, {"hosts": [here], "port": port})
    assert out[here] != "connected"


async def test_outbound_opens_the_networks_the_http_rules_open(public_host: str) -> None:
    # A "private" network opened by COMPOSER_HTTP_ALLOW_NETWORKS is reachable; 11/8 is
    # public anyway, so the check is that a non-public range stays closed beside it.
    private = Sandbox(
        SandboxPolicy(slots=2, allow_networks=(ipaddress.ip_network("10.20.0.0/16"),))
    )
    private.open()
    try:
        out = await run(private, CONNECT, {"hosts": [public_host, "10.21.0.1"], "port": 8000})
    finally:
        private.close()
    assert out[public_host] == "connected"
    assert out["10.21.0.1"] in ("OSError", "TimeoutError", "ConnectionRefusedError")


def test_the_closed_ranges_hold_every_range_the_http_guard_refuses() -> None:
    # Every range the standard library calls private (what the guard refuses) is closed;
    # each closed range is one the guard refuses too (IANA's whole 192.0.0.0/24 is closed,
    # where Python calls only parts of it private).
    private = ipaddress.IPv4Address._constants._private_networks  # type: ignore[attr-defined]
    for network in [*private, ipaddress.ip_network("224.0.0.0/4")]:
        assert any(network.subnet_of(n) for n in NON_PUBLIC_V4), network
    for network in NON_PUBLIC_V4:
        assert refusal_reason(network[0]) is not None, network


def test_the_allowed_networks_are_cut_out_of_the_closed_ones() -> None:
    hosts = [ipaddress.IPv4Address("10.20.5.5")]
    blocked = unreachable_networks(
        hosts, allow_private=False, allow=[ipaddress.ip_network("10.20.0.0/16")]
    )

    def covered(address: str) -> bool:
        return any(ipaddress.IPv4Address(address) in n for n in blocked)

    assert not covered("10.20.1.1")  # opened
    assert covered("10.21.1.1")  # the rest of 10/8 stays closed
    assert covered("10.20.5.5")  # the host's own address, always
    assert covered("192.168.1.1")
    assert not covered("11.1.1.1")
    everything = unreachable_networks(hosts, allow_private=True, allow=[])
    assert [str(n) for n in everything] == ["10.20.5.5/32"]


# -- when it cannot work -----------------------------------------------------------------


async def test_a_missing_bwrap_is_named_with_its_package_and_the_way_out() -> None:
    box = Sandbox(SandboxPolicy(bwrap="/nonexistent/bwrap", slots=1))
    with pytest.raises(SandboxUnavailable) as caught:
        box.open()
    assert caught.value.permanent
    assert "apt-get install bubblewrap" in caught.value.message
    assert "COMPOSER_PYTHON_SANDBOX=off" in caught.value.message


async def test_a_sandbox_the_kernel_refuses_fails_the_check_with_what_bwrap_said(
    tmp_path: Path,
) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text(
        "#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n"
    )
    fake.chmod(0o755)
    box = Sandbox(SandboxPolicy(bwrap=str(fake), slots=1))
    box.open()
    try:
        with pytest.raises(SandboxUnavailable) as caught:
            await check_sandbox(box)
    finally:
        box.close()
    assert caught.value.permanent
    assert "No permissions to creating new namespace" in caught.value.message
    assert caught.value.code == ErrorCode.SANDBOX_UNAVAILABLE


async def test_nodes_run_concurrently_each_in_a_sandbox_of_its_own(sandbox: Sandbox) -> None:
    code = "import os, time\ndef main(input):\n    time.sleep(0.3)\n    return os.getuid()\n"
    uids = await asyncio.gather(*(run(sandbox, code) for _ in range(6)))
    if ROOT:
        assert len(set(uids)) == 6  # one uid per running node
    with pytest.raises(PythonError):
        await run(sandbox, "def main(input):\n    raise ValueError('x')\n")


def _sleepers() -> list[int]:
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if Path(f"/proc/{entry.name}/cmdline").read_bytes().startswith(b"sleep\x00300"):
                    pids.append(int(entry.name))
    return pids


def _uid_of(pid: int) -> int | None:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    return None


async def test_where_a_runtime_refuses_proc_and_hostname_the_check_goes_without_them(
    tmp_path: Path,
) -> None:
    # As podman's defaults do inside a container: no fresh /proc, no sethostname.
    fake = tmp_path / "bwrap"
    fake.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do\n'
        '  [ "$a" = --proc ] && { echo "bwrap: Can\'t mount proc on /newroot/proc: '
        'Operation not permitted" >&2; exit 1; }\n'
        '  [ "$a" = --hostname ] && { echo "bwrap: Can\'t set hostname to sandbox: '
        'Operation not permitted" >&2; exit 1; }\n'
        "done\n"
        f'exec {shutil.which("bwrap")} "$@"\n'
    )
    fake.chmod(0o755)
    box = Sandbox(SandboxPolicy(bwrap=str(fake), slots=1))
    box.open()
    try:
        await check_sandbox(box)
        out = await run(box, "import os\ndef main(input):\n    return os.listdir('/proc')\n")
    finally:
        box.close()
    assert out == []
    weakened = " ".join(box.weakened())
    assert "no /proc" in weakened and "host's name" in weakened


async def test_a_refusal_that_is_not_optional_hardening_fails_the_check(tmp_path: Path) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    fake.chmod(0o755)
    box = Sandbox(SandboxPolicy(bwrap=str(fake), slots=1))
    box.open()
    try:
        with pytest.raises(SandboxUnavailable, match="setting up uid map"):
            await check_sandbox(box)
    finally:
        box.close()
    assert box.weakened() == []


@pytest.fixture
def shared_mount(tmp_path: Path) -> Iterator[Path]:
    """A mount of the host's inside a shared one, as podman's /run/netns/netns-* are in
    /run/netns: the inner one is what must stay."""
    if not ROOT:
        pytest.fail("the mount test mounts a tmpfs: run it as root")
    outer = tmp_path / "shared"
    outer.mkdir()
    tmpfs = ["mount", "-t", "tmpfs", "-o", "size=64k", "composer-test"]
    subprocess.run([*tmpfs, str(outer)], check=True)
    subprocess.run(["mount", "--make-shared", str(outer)], check=True)
    inner = outer / "inner"
    inner.mkdir()
    subprocess.run([*tmpfs, str(inner)], check=True)
    try:
        yield inner
    finally:
        subprocess.run(["umount", str(inner)], check=False, capture_output=True)
        subprocess.run(["umount", str(outer)], check=False, capture_output=True)


def _mounted(point: Path) -> bool:
    with open("/proc/self/mountinfo") as info:
        return any(line.split()[4] == str(point) for line in info)


async def test_an_outbound_sandbox_leaves_the_hosts_shared_mounts_alone(
    sandbox: Sandbox, shared_mount: Path
) -> None:
    # slirp4netns --enable-sandbox, run as root, detached the host's mounts inside shared
    # ones (podman's network namespaces went, and its containers' networks with them);
    # it runs in a mount namespace of its own
    assert _mounted(shared_mount)
    out = await run(sandbox, "def main(input):\n    return 'ran'\n")
    assert out == "ran"
    assert _mounted(shared_mount), "the sandbox's network helper unmounted a host mount"
