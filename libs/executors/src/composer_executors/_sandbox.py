"""The sandbox of a PYTHON node: bubblewrap's namespaces, an unprivileged uid, a capped tmpfs.

A PYTHON node runs code that whoever can publish or start a definition
chose, on a machine that also holds the servers. So the node's process
(``_child.py``) starts inside bubblewrap (``bwrap``, Debian's
``bubblewrap``), a well-kept tool made for this (Flatpak's sandbox):

- **its own pid, ipc, uts, mount and network namespaces**: it sees no other
  process (the worker included: nothing to signal, trace or read), and when
  the node ends the worker kills the namespace's first process, which takes
  every process in it along (setsid() daemons included);
- **no host files but the system's, read-only**: /usr (the interpreter's
  shared libraries; merged-/usr symlinks for /lib, /bin, …), the Python
  installation the worker runs on, the public CA certificates and a made-up
  /etc (passwd, group, hosts, resolv.conf); /proc of its own namespace, a
  minimal /dev, and a size-capped tmpfs at /tmp (and /dev/shm) as the only
  writable places, gone with the node;
- **never the workers' user**: a worker running as root starts bwrap
  privileged and the child switches to a uid of its own before any user code
  is read, one uid per concurrent node (``first_uid`` + slot), so the kernel's
  process limit (RLIMIT_NPROC, never applied to root) counts that node alone;
  a worker that is not root starts bwrap unprivileged, in a user namespace of
  its own (the node's uid inside, 65534, is the worker's uid outside; see
  docs/architecture.md §8.1 for what that shares);
- **network by policy** (:class:`SandboxPolicy.network`): ``none``, only a
  loopback of its own; ``outbound`` (the default), a private namespace whose
  only way out is slirp4netns (user-mode NAT, Debian's ``slirp4netns``) with
  the host's loopback closed, and "unreachable" routes, set by the child
  before the code runs, for the host's own addresses and for every
  non-public range (the HTTP node's rule: COMPOSER_HTTP_ALLOW_NETWORKS opens
  some, COMPOSER_HTTP_ALLOW_PRIVATE all of them, never the host's own);
  ``host``, the worker's network, servers included (a WARNING at start).

The process limits, the result channel and the error reporting are the
child's (``_child.py``) and the executor's (``_python.py``), as without a
sandbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import ipaddress
import json
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from composer_executors._errors import ExecutionError
from composer_executors._spawn import Child, spawn
from composer_rpc.codes import ErrorCode

Network = Literal["none", "outbound", "host"]
NETWORKS: tuple[Network, ...] = ("none", "outbound", "host")
IPv4Network = ipaddress.IPv4Network

#: The uid a node has inside its user namespace when the worker is not root.
INSIDE_UID = 65534
#: Where the node's code runs and may write (a tmpfs of the sandbox).
WORK_DIR = "/tmp"
#: How long bwrap and slirp4netns may take to set a sandbox up.
_SETUP_SECONDS = 10.0

#: IPv4 ranges that are not public (IANA's special-purpose registry: not
#: globally reachable): a node on the ``outbound`` network reaches none of them
#: unless the policy opens it. The HTTP node's guard refuses the same
#: (``_guard.refusal_reason``; tests/unit/executors/test_sandbox.py checks they agree).
NON_PUBLIC_V4: tuple[IPv4Network, ...] = tuple(
    ipaddress.IPv4Network(n)
    for n in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.0.0.0/24",
        "192.0.2.0/24",
        "192.168.0.0/16",
        "198.18.0.0/15",
        "198.51.100.0/24",
        "203.0.113.0/24",
        "224.0.0.0/4",
        "240.0.0.0/4",
    )
)

#: The networks slirp4netns may give the sandbox (its gateway is .2, its DNS .3):
#: the first that holds none of the host's addresses is used.
_SLIRP_CIDRS = ("10.0.2.0/24", "10.200.200.0/24", "172.31.254.0/24", "192.168.254.0/24")


#: Hardening a host may refuse, by what bwrap says then, and what going without it means.
#: Container runtimes do: podman and docker mask /proc (no fresh one can be mounted),
#: mount /proc/sys read-only and refuse sethostname to a container without
#: CAP_SYS_ADMIN. None of it is what isolates a node: its namespaces are.
_OPTIONAL = {
    "proc": (
        "Can't mount proc",
        "no /proc in the sandbox: this host refuses to mount one (a container runtime "
        "masking /proc; podman: --security-opt unmask=/proc/*)",
    ),
    "disable_userns": (
        "max_user_namespaces",
        "nodes may create user namespaces of their own: /proc/sys is read-only here, so "
        "bwrap cannot forbid them",
    ),
    "hostname": (
        "Can't set hostname",
        "the sandbox keeps this host's name: sethostname is refused here",
    ),
}


class SandboxUnavailable(ExecutionError):
    """The sandbox cannot be set up here (a tool is missing, the kernel refuses namespaces).

    ``permanent`` when the workers found it so at start: every PYTHON node
    would fail the same way until the deployment is fixed.
    """

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message, code=ErrorCode.SANDBOX_UNAVAILABLE, permanent=permanent)


@dataclass(frozen=True, slots=True)
class SandboxPolicy:
    """How PYTHON nodes are sandboxed; built once from the workers' settings."""

    #: COMPOSER_PYTHON_NETWORK.
    network: Network = "outbound"
    #: Size of the node's tmpfs at /tmp (and of /dev/shm), COMPOSER_PYTHON_TMP_BYTES.
    tmp_bytes: int = 64 * 1024 * 1024
    #: A worker running as root runs node k of its ``slots`` concurrent ones as
    #: ``first_uid + k`` (COMPOSER_PYTHON_UID; each uid is the node's alone).
    first_uid: int = 50000
    #: How many nodes may run at once (the worker's concurrency).
    slots: int = 32
    #: The HTTP node's rules for private addresses (COMPOSER_HTTP_ALLOW_PRIVATE and
    #: COMPOSER_HTTP_ALLOW_NETWORKS), applied to the ``outbound`` network too.
    allow_private: bool = False
    allow_networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    #: The programs, by name (searched on PATH) or path.
    bwrap: str = "bwrap"
    slirp4netns: str = "slirp4netns"

    def __post_init__(self) -> None:
        if self.network not in NETWORKS:
            raise ValueError(f"network must be one of {', '.join(NETWORKS)}, got {self.network!r}")
        if self.tmp_bytes < 1024 * 1024:
            raise ValueError(f"tmp_bytes must be at least 1 MiB, got {self.tmp_bytes}")
        if self.slots <= 0:
            raise ValueError(f"slots must be positive, got {self.slots}")
        if not 0 < self.first_uid <= 2**31 - 1 - self.slots:
            raise ValueError(
                f"first_uid must be a positive uid with {self.slots} free uids above it, "
                f"got {self.first_uid}"
            )


@dataclass(frozen=True, slots=True)
class SandboxSetup:
    """What the child applies to itself inside the sandbox (part of its ``argv[1]``)."""

    #: Switch to this uid (and gid) before the code is read: a root worker's node.
    uid: int | None
    #: Make these IPv4 networks unreachable before the code is read (``outbound``).
    unreachable: tuple[str, ...]


class Sandbox:
    """Starts sandboxed PYTHON node processes; one per worker, made at its start.

    :meth:`open` finds the programs and writes the sandbox's /etc; :meth:`close`
    removes it; :meth:`start` starts one node's process.
    """

    def __init__(self, policy: SandboxPolicy) -> None:
        self.policy = policy
        self.privileged = os.geteuid() == 0
        self._free_uids = list(range(policy.first_uid, policy.first_uid + policy.slots))
        self._uid_freed: asyncio.Condition | None = None
        self._etc: Path | None = None
        self._bwrap = ""
        self._slirp = ""
        self._cidr: str | None = None
        #: What the workers' start-up check gave up because the host refused it
        #: (``_python.check_sandbox``, ``give_up_for``).
        self.without: set[str] = set()
        self._python = os.path.realpath(sys.executable)
        self._binds = _python_binds(self._python)

    # -- set-up ---------------------------------------------------------------

    def open(self) -> None:
        """Find bwrap (and slirp4netns for ``outbound``) and write the sandbox's /etc.

        Raises SandboxUnavailable (permanent) naming what to install.
        """
        self._bwrap = _program(self.policy.bwrap, "bubblewrap")
        if self.policy.network == "outbound":
            self._slirp = _program(self.policy.slirp4netns, "slirp4netns")
            self._cidr = _slirp_cidr(host_addresses())
        self._etc = _write_etc(self.policy, self.privileged, self._cidr)

    def close(self) -> None:
        if self._etc is not None:
            shutil.rmtree(self._etc, ignore_errors=True)
            self._etc = None

    def describe(self) -> str:
        """One line for the workers' start-up log."""
        who = (
            f"uids {self.policy.first_uid}-{self.policy.first_uid + self.policy.slots - 1} "
            "(one per running node)"
            if self.privileged
            else f"the workers' uid {os.geteuid()} outside a user namespace of their own"
        )
        return (
            f"PYTHON nodes run sandboxed by {self._bwrap} as {who}; network "
            f"{self.policy.network}; a {self.policy.tmp_bytes / (1024 * 1024):g} MiB tmpfs "
            f"at {WORK_DIR}; python {self._python}"
        )

    def weakened(self) -> list[str]:
        """What the sandbox goes without here, each with why (``give_up_for``)."""
        return [_OPTIONAL[name][1] for name in sorted(self.without)]

    def give_up_for(self, failure: str) -> bool:
        """Go without the hardening that ``failure`` (what bwrap said) shows this host
        refuses; False when it names none left to give up (the sandbox cannot work)."""
        for name, (said, _) in _OPTIONAL.items():
            if said in failure and name not in self.without:
                self.without.add(name)
                return True
        return False

    def restore(self) -> None:
        """Back to full strength (the start-up check failed anyway)."""
        self.without.clear()

    # -- one node ---------------------------------------------------------------

    async def start(
        self, python_args: Sequence[str], settings: Callable[[SandboxSetup], str]
    ) -> Sandboxed:
        """Start the interpreter with ``python_args`` in a new sandbox.

        The child's last argument is ``settings(setup)``: the node's uid and
        routes, to which the executor adds its limits. Returns once bwrap has
        started the namespace's first process (raises SandboxUnavailable
        otherwise, with what bwrap said); call :meth:`Sandboxed.connect` once
        the child has set itself up, before it needs the network.
        """
        if self._etc is None:
            raise RuntimeError("Sandbox.open() was not called")
        uid = await self._take_uid() if self.privileged else None
        try:
            unreachable = self._unreachable() if self._cidr is not None else ()
            argument = settings(SandboxSetup(uid=uid, unreachable=unreachable))
            info_r, info_w = os.pipe()
            try:
                argv = [*self._bwrap_argv(info_w), self._python, *python_args, argument]
                child = await spawn(argv, env={"PATH": os.defpath}, pass_fds=(info_w,))
            except BaseException:
                os.close(info_r)
                raise
            finally:
                os.close(info_w)
        except BaseException:
            if uid is not None:
                self._give_back(uid)
            raise
        sandboxed = Sandboxed(child, uid, self)  # from here on, its end() gives the uid back
        try:
            sandboxed.watch_init(await _read_info(info_r))
        except SandboxUnavailable as exc:
            await sandboxed.end()
            said = await _stderr_of(child)
            child.close_pipes()
            raise SandboxUnavailable(
                f"{exc.message}{': ' + said if said else ''}", permanent=exc.permanent
            ) from None
        except BaseException:
            await sandboxed.end()
            child.close_pipes()
            raise
        return sandboxed

    # -- parts ------------------------------------------------------------------

    def _bwrap_argv(self, info_fd: int) -> list[str]:
        assert self._etc is not None
        tmp = str(self.policy.tmp_bytes)
        argv = [
            self._bwrap,
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--die-with-parent",
            "--new-session",
        ]
        if "hostname" not in self.without:
            argv += ["--hostname", "sandbox"]
        if self.policy.network != "host":
            argv.append("--unshare-net")
        if self.privileged:
            # Root: no user namespace (its uid map could only say root); the child
            # switches to its own uid with these, then drops every capability.
            caps = ["CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_NET_ADMIN"]
        else:
            argv += [
                "--unshare-user",
                *(["--disable-userns"] if "disable_userns" not in self.without else []),
                "--uid",
                str(INSIDE_UID),
                "--gid",
                str(INSIDE_UID),
            ]
            caps = ["CAP_NET_ADMIN"]
        argv += ["--cap-drop", "ALL"]
        for cap in caps:
            argv += ["--cap-add", cap]
        for kind, source, dest in self._binds:
            if kind == "bind":
                # Directories bwrap makes for a mount point copy their host
                # counterpart's mode: /root's 0700 would hide the Python below it.
                for parent in reversed(Path(dest).parents[:-1]):
                    argv += ["--perms", "0755", "--dir", str(parent)]
            argv += ["--symlink" if kind == "symlink" else "--ro-bind", source, dest]
        argv += ["--ro-bind", str(self._etc), "/etc"]
        argv += ["--ro-bind-try", "/etc/ssl/certs", "/etc/ssl/certs"]
        argv += ["--proc", "/proc"] if "proc" not in self.without else ["--dir", "/proc"]
        argv += ["--dev", "/dev"]
        argv += ["--perms", "1777", "--size", tmp, "--tmpfs", WORK_DIR]
        argv += ["--perms", "1777", "--size", tmp, "--tmpfs", "/dev/shm"]
        argv += ["--remount-ro", "/", "--chdir", WORK_DIR, "--clearenv"]
        for name, value in (
            ("PATH", "/usr/local/bin:/usr/bin:/bin"),
            ("LANG", "C.UTF-8"),
            ("LC_ALL", "C.UTF-8"),
            ("HOME", WORK_DIR),
            ("TMPDIR", WORK_DIR),
        ):
            argv += ["--setenv", name, value]
        argv += ["--info-fd", str(info_fd), "--"]
        return argv

    def _unreachable(self) -> tuple[str, ...]:
        # Read for each node: an address the host gains later is closed too.
        blocked = unreachable_networks(
            host_addresses(),
            allow_private=self.policy.allow_private,
            allow=self.policy.allow_networks,
        )
        return tuple(str(n) for n in blocked)

    async def _take_uid(self) -> int:
        if self._uid_freed is None:
            self._uid_freed = asyncio.Condition()
        async with self._uid_freed:
            await self._uid_freed.wait_for(lambda: bool(self._free_uids))
            return self._free_uids.pop()

    def _give_back(self, uid: int) -> None:
        self._free_uids.append(uid)
        freed = self._uid_freed
        if freed is None:
            return

        async def notify() -> None:
            async with freed:
                freed.notify()

        with contextlib.suppress(RuntimeError):  # no loop: nobody can be waiting
            asyncio.get_running_loop().create_task(notify(), name="sandbox-uid-freed")


@dataclass
class Sandboxed:
    """One node's sandbox: the bwrap process (our child), the namespace's first process
    (``init_pid``, held through a pidfd), and slirp4netns for ``outbound``."""

    child: Child
    uid: int | None
    sandbox: Sandbox
    init_pid: int = 0
    slirp: Child | None = None
    _init_fd: int | None = field(default=None, repr=False)
    _reaping: asyncio.Future[None] | None = field(default=None, repr=False)

    def watch_init(self, pid: int) -> None:
        """Hold a pidfd of the namespace's first process, so that killing it hits no other.

        It is bwrap's child: checked through its parent, since between bwrap's
        word and the pidfd it might have died and its pid gone to another process.
        """
        self.init_pid = pid
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            return  # gone already, and its namespace with it
        if _parent_of(pid) != self.child.pid:
            os.close(fd)
            return
        self._init_fd = fd

    async def connect(self) -> None:
        """Give an ``outbound`` sandbox its way out (slirp4netns); nothing for the others.

        Not before: bwrap tells the namespace's pid before it has set up the
        namespace's loopback, and slirp4netns configuring the same namespace
        meanwhile made that set-up fail ("loopback: Failed RTM_NEWADDR") about
        once in 13 starts. The child says when it is set up (``_python``).
        """
        sandbox = self.sandbox
        if sandbox._cidr is None or self.slirp is not None:
            return
        self.slirp = await _start_slirp(
            sandbox._slirp, self.init_pid, sandbox._cidr, sandbox.privileged
        )

    def kill(self) -> None:
        """SIGKILL everything in the sandbox at once (synchronous: no await can skip it).

        Killing the pid namespace's first process makes the kernel kill every
        other process in it; bwrap exits with it.
        """
        if self._init_fd is not None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._init_fd, signal.SIGKILL)
        self.child.kill()
        if self.slirp is not None:
            self.slirp.kill()

    async def end(self) -> None:
        """Kill what is left and reap it; the node's uid is free again after this.

        The reaping goes on even if the caller is cancelled meanwhile, so the uid
        always comes back, and only once nothing runs as it.
        """
        if self._reaping is None:
            self.kill()
            self._reaping = asyncio.ensure_future(self._reap())
        await asyncio.shield(self._reaping)

    async def _reap(self) -> None:
        await self.child.wait()
        if self._init_fd is not None:
            os.close(self._init_fd)
            self._init_fd = None
        if self.uid is not None:
            # bwrap exits only after its child, the namespace's first process, did, and
            # that one exits only once every process of the namespace is gone: the uid
            # runs nothing now.
            self.sandbox._give_back(self.uid)
        if self.slirp is not None:
            # Killed already; its exit takes ~20 ms (the kernel unregisters its tap
            # device as it closes it), which the node's result need not wait for.
            self.slirp.reap_in_background()


async def _stderr_of(child: Child) -> str:
    """What a failed sandbox's bwrap wrote (its last 500 characters)."""
    try:
        async with asyncio.timeout(1.0):
            data = await child.stderr.read()
    except TimeoutError:
        data = b""
    return data.decode(errors="replace").strip()[-500:]


def _parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


async def _read_info(fd: int) -> int:
    """The pid of the namespace's first process, from bwrap's --info-fd."""
    try:
        data = await _read_pipe(fd)
    except TimeoutError:
        raise SandboxUnavailable("bwrap did not set the sandbox up in time") from None
    try:
        return int(json.loads(data)["child-pid"])
    except (ValueError, KeyError, TypeError):
        # bwrap said why on stderr, which the node's error quotes.
        raise SandboxUnavailable("bwrap could not set the sandbox up") from None


async def _start_slirp(program: str, pid: int, cidr: str, privileged: bool) -> Child:
    """slirp4netns on the network namespace of ``pid``; returns once its device is up.

    It is this process's child and is killed with the node (``Sandboxed.kill``);
    if the worker dies, the namespace it serves dies too (bwrap's
    --die-with-parent) and slirp4netns exits when its tap device goes.
    """
    ready_r, ready_w = os.pipe()
    pass_fds = [ready_w]
    argv = [
        program,
        "--configure",
        "--mtu=65520",
        "--disable-host-loopback",
        f"--cidr={cidr}",
        "--enable-sandbox",
        "--enable-seccomp",
        f"--ready-fd={ready_w}",
    ]
    owner: int | None = None
    if not privileged:
        # The user namespace that owns the network namespace: bwrap runs the node in a
        # second one nested in it (to give it its uid), which could not configure it.
        owner = _owner_of_netns(pid)
        pass_fds.append(owner)
        argv.append(f"--userns-path=/proc/self/fd/{owner}")
    argv += [str(pid), "tap0"]
    if privileged:
        # As root, slirp4netns's --enable-sandbox makes a mount namespace whose "/" it
        # makes private but not its submounts, then detaches the old root: the unmounts
        # of every shared submount reach the host (podman's /run/netns/* went, and with
        # them its containers' networks). A namespace of its own, private throughout,
        # keeps them there. (Unprivileged, its user namespace turns them into slaves.)
        argv = ["unshare", "--mount", "--propagation", "private", "--", *argv]
    try:
        child = await spawn(argv, env={"PATH": os.defpath}, pass_fds=pass_fds, quiet=True)
    except OSError as exc:
        os.close(ready_r)
        raise SandboxUnavailable(f"slirp4netns did not start: {exc}") from None
    finally:
        for fd in pass_fds:
            os.close(fd)
    try:
        ready = await _read_pipe(ready_r, 1)
    except TimeoutError:
        ready = b""
    if ready != b"1":
        child.kill()
        await child.wait()
        said = await _stderr_of(child)
        child.close_pipes()
        raise SandboxUnavailable(f"slirp4netns could not connect the sandbox: {said}")
    return child


#: ioctl(2) on a namespace's file: a file of the user namespace that owns it (linux/nsfs.h).
_NS_GET_USERNS = 0xB701


def _owner_of_netns(pid: int) -> int:
    """An fd of the user namespace owning ``pid``'s network namespace."""
    try:
        net = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise SandboxUnavailable(f"the sandbox's network namespace is gone: {exc}") from None
    try:
        return fcntl.ioctl(net, _NS_GET_USERNS)
    except OSError as exc:
        raise SandboxUnavailable(f"cannot find who owns the sandbox's network: {exc}") from None
    finally:
        os.close(net)


async def _read_pipe(fd: int, n: int = -1) -> bytes:
    """Read ``fd`` (a pipe's read end, closed after) to its end, or ``n`` bytes."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0)
    )
    try:
        async with asyncio.timeout(_SETUP_SECONDS):
            return await (reader.read() if n < 0 else reader.readexactly(n))
    except asyncio.IncompleteReadError as exc:
        return exc.partial
    finally:
        transport.close()


def _slirp_cidr(hosts: Sequence[ipaddress.IPv4Address]) -> str:
    for cidr in _SLIRP_CIDRS:
        if not any(a in IPv4Network(cidr) for a in hosts):
            return cidr
    raise SandboxUnavailable(
        "every network slirp4netns could give the sandbox overlaps this host's addresses "
        f"({', '.join(_SLIRP_CIDRS)}); set COMPOSER_PYTHON_NETWORK=none",
        permanent=True,
    )


def host_addresses() -> list[ipaddress.IPv4Address]:
    """This host's own IPv4 addresses (its network namespace's), from /proc/net/fib_trie."""
    found: dict[ipaddress.IPv4Address, None] = {}
    try:
        text = Path("/proc/net/fib_trie").read_text()
    except OSError:
        return []
    last: str | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("|--"):
            last = stripped[3:].strip()
        elif stripped.startswith("/32 host LOCAL") and last is not None:
            with contextlib.suppress(ValueError):
                found[ipaddress.IPv4Address(last)] = None
    return list(found)


def unreachable_networks(
    hosts: Iterable[ipaddress.IPv4Address],
    *,
    allow_private: bool,
    allow: Iterable[ipaddress.IPv4Network | ipaddress.IPv6Network],
) -> list[IPv4Network]:
    """What an ``outbound`` sandbox may not reach: the host's own addresses, always, and
    the non-public ranges but the ``allow``\\ ed networks (none with ``allow_private``)."""
    blocked: list[IPv4Network] = [IPv4Network(f"{h}/32") for h in hosts]
    if allow_private:
        return blocked
    opened = [n for n in allow if isinstance(n, IPv4Network)]
    for network in NON_PUBLIC_V4:
        blocked += _excluding(network, opened)
    return list(dict.fromkeys(blocked))


def _excluding(network: IPv4Network, opened: Sequence[IPv4Network]) -> list[IPv4Network]:
    parts = [network]
    for hole in opened:
        next_parts: list[IPv4Network] = []
        for part in parts:
            if part.subnet_of(hole):
                continue  # opened whole
            if hole.subnet_of(part):
                next_parts += part.address_exclude(hole)
            else:
                next_parts.append(part)
        parts = next_parts
    return parts


def _program(name: str, package: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise SandboxUnavailable(
            f"{name} is not installed: PYTHON nodes run sandboxed by it (Debian/Ubuntu: "
            f"apt-get install {package}); or set COMPOSER_PYTHON_SANDBOX=off to run them "
            "unsandboxed (only for code you trust)",
            permanent=True,
        )
    return found


def _python_binds(python: str) -> list[tuple[str, str, str]]:
    """/usr and the merged-/usr links, and the Python installation when it is elsewhere."""
    binds: list[tuple[str, str, str]] = [("bind", "/usr", "/usr")]
    for top in ("/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin"):
        if os.path.islink(top):
            binds.append(("symlink", os.readlink(top), top))
        elif os.path.isdir(top):
            binds.append(("bind", top, top))
    prefixes = {os.path.realpath(sys.base_prefix), os.path.dirname(os.path.dirname(python))}
    for prefix in sorted(prefixes):
        if prefix != "/usr" and not prefix.startswith("/usr/") and os.path.isdir(prefix):
            binds.append(("bind", prefix, prefix))
    return binds


def _write_etc(policy: SandboxPolicy, privileged: bool, cidr: str | None) -> Path:
    """The sandbox's /etc: who its users are, its hosts, its DNS server; nothing else."""
    etc = Path(tempfile.mkdtemp(prefix="composer-sandbox-etc-"))
    etc.chmod(0o755)
    users = ["root:x:0:0:root:/root:/usr/sbin/nologin"]
    groups = ["root:x:0:"]
    uids = range(policy.first_uid, policy.first_uid + policy.slots) if privileged else [INSIDE_UID]
    for uid in uids:
        users.append(f"sandbox{uid}:x:{uid}:{uid}:PYTHON node:{WORK_DIR}:/usr/sbin/nologin")
        groups.append(f"sandbox{uid}:x:{uid}:")
    files = {
        "passwd": "\n".join(users) + "\n",
        "group": "\n".join(groups) + "\n",
        "hosts": "127.0.0.1 localhost sandbox\n::1 localhost\n",
        "hostname": "sandbox\n",
        # slirp4netns answers DNS on .3 of its network.
        "resolv.conf": f"nameserver {IPv4Network(cidr)[3]}\n" if cidr else "",
        "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files dns\n",
    }
    for name, text in files.items():
        (etc / name).write_text(text)
        (etc / name).chmod(0o644)
    (etc / "ssl" / "certs").mkdir(parents=True)
    for path in (etc / "ssl", etc / "ssl" / "certs"):
        path.chmod(0o755)
    with contextlib.suppress(OSError):
        shutil.copyfile("/etc/ssl/openssl.cnf", etc / "ssl" / "openssl.cnf")
    with contextlib.suppress(OSError):
        (etc / "localtime").symlink_to(os.readlink("/etc/localtime"))
    return etc
