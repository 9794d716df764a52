"""The program the PYTHON executor runs in the child process (``python -I -c <this source>``).

It must stand alone: only the standard library, nothing from the worker.
Protocol: once confined (``_confine``), the child writes the line
``confined`` to the fd that was its stdout; then the parent writes
``{"code": str, "input": any}`` as JSON to stdin and closes it; the child
writes exactly one JSON object, after a line holding its length in bytes, to
that fd:

- ``{"ok": true, "value": <main's return value>}``
- ``{"ok": false, "code": <error code>, "type": <exception type>, "message": str,
  "traceback": str}``

Before user code runs, fd 1 is pointed at stderr, so ``print()`` and
subprocesses the snippet starts write to stderr and cannot corrupt the
result; the result goes to a private duplicate of the original stdout that
is not inherited by subprocesses (nor kept by a plain ``os.fork()``: it would
hold the result open).

``argv[1]`` holds the limits as JSON (see ``_contain``); they, and what else
confines the snippet, are applied by :func:`_confine` before it is read.
After the result is written the process does not exit: it waits for the
parent to kill it together with everything it started. Alive, it stays the
"child subreaper" of its descendants, so a process that double-forked away
from its parent is still found under it (see ``_contain.kill_tree``).
"""

from __future__ import annotations

import builtins
import ctypes
import json
import os
import resource
import signal
import sys
import time
import traceback  # before the code runs: after a uid switch it may not be importable

# What the child imports is what every node pays for at start: only what it needs, the
# rest where it is used (typing only for the type checker, socket for routes).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NoReturn

FILENAME = "<node code>"
#: The node's code, once read: a failure's traceback quotes its lines.
_SOURCE = ""
#: How long a finished child waits for its parent to kill it before it exits anyway.
_AWAIT_KILL_SECONDS = 60.0

# prctl(2) options and capability constants (linux/prctl.h, linux/capability.h).
_PR_SET_PDEATHSIG = 1
_PR_CAPBSET_DROP = 24
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
# rtnetlink (linux/netlink.h, linux/rtnetlink.h): add a route of type "unreachable".
_RTM_NEWROUTE = 24
_NLMSG_ERROR = 2
_NLM_F_REQUEST, _NLM_F_ACK, _NLM_F_EXCL, _NLM_F_CREATE = 0x1, 0x4, 0x200, 0x400
_RT_TABLE_MAIN, _RTPROT_STATIC, _RT_SCOPE_UNIVERSE, _RTN_UNREACHABLE = 254, 4, 0, 7
_RTA_DST = 1


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _libc() -> Any:
    # The C library the interpreter itself is linked with; find_library would run ldconfig.
    return ctypes.CDLL(None, use_errno=True)


def _prctl(libc: Any, option: int, arg: int = 0) -> None:
    if libc.prctl(option, arg, 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"prctl({option}) failed: {os.strerror(errno)}")


def _tasks_of(uid: int) -> int:
    """How many processes and threads ``uid`` runs now: what RLIMIT_NPROC counts."""
    count = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            # Bytes: after a uid switch no codec module may be importable.
            with open(f"/proc/{entry.name}/status", "rb") as f:
                status = f.read()
        except OSError:
            continue  # gone meanwhile
        real_uid = threads = None
        for line in status.splitlines():
            if line.startswith(b"Uid:"):
                real_uid = int(line.split()[1])
            elif line.startswith(b"Threads:"):
                threads = int(line.split()[1])
        if real_uid == uid and threads is not None:
            count += threads
    return count


def _unreachable(networks: list[str]) -> None:
    """Add an "unreachable" route for each IPv4 network (``10.0.0.0/8``) to this network
    namespace: connecting there fails at once (ENETUNREACH), whatever the default route.

    The sandbox's ``outbound`` network closes the host's own addresses and the
    private ranges this way (``_sandbox``); it needs CAP_NET_ADMIN, dropped right
    after. One netlink request per route, all acknowledged; any refusal is an error.
    """
    if not networks:
        return
    import socket
    import struct

    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as nl:
        nl.bind((0, 0))
        for seq, network in enumerate(networks, start=1):
            address, _, length = network.partition("/")
            rtmsg = struct.pack(
                "=BBBBBBBBI",
                socket.AF_INET,
                int(length),
                0,
                0,
                _RT_TABLE_MAIN,
                _RTPROT_STATIC,
                _RT_SCOPE_UNIVERSE,
                _RTN_UNREACHABLE,
                0,
            )
            dst = struct.pack("=HH", 8, _RTA_DST) + socket.inet_aton(address)
            flags = _NLM_F_REQUEST | _NLM_F_ACK | _NLM_F_EXCL | _NLM_F_CREATE
            body = rtmsg + dst
            nl.send(struct.pack("=LHHLL", 16 + len(body), _RTM_NEWROUTE, flags, seq, 0) + body)
        acknowledged = 0
        while acknowledged < len(networks):
            data = nl.recv(65536)
            offset = 0
            while offset + 16 <= len(data):
                length, kind, _, seq, _ = struct.unpack_from("=LHHLL", data, offset)
                if kind == _NLMSG_ERROR:
                    (error,) = struct.unpack_from("=i", data, offset + 16)
                    if error != 0:
                        raise OSError(
                            -error, f"route to {networks[seq - 1]}: {os.strerror(-error)}"
                        )
                    acknowledged += 1
                offset += (length + 3) & ~3


def _set_limit(which: int, value: int) -> None:
    """Soft and hard limit ``value``, or the hard limit already lower (raising it needs root)."""
    _, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(which, (value, value))


def _confine(limits: dict[str, Any]) -> None:
    """Everything that confines the snippet, applied before its code is even read.

    Order matters: the capability bounding set is dropped while CAP_SETPCAP is
    still held, the uid switch needs CAP_SETUID, and RLIMIT_NPROC is counted
    for the uid the process ends up with.
    """
    _set_limit(resource.RLIMIT_CORE, 0)
    _set_limit(resource.RLIMIT_AS, limits["memory_bytes"])
    # Writing past it fails with EFBIG ("File too large"): CPython ignores SIGXFSZ,
    # which would otherwise kill the process. Pipes and sockets are not files.
    _set_limit(resource.RLIMIT_FSIZE, limits["file_bytes"])
    _set_limit(resource.RLIMIT_NOFILE, limits["open_files"])
    if not sys.platform.startswith("linux"):
        return
    libc = _libc()
    # Orphans among our descendants become our children, not init's: see the docstring.
    _prctl(libc, _PR_SET_CHILD_SUBREAPER, 1)
    # In the sandbox's network namespace, with the CAP_NET_ADMIN bwrap left us for this.
    _unreachable(limits.get("unreachable") or [])
    try:
        with open("/proc/sys/kernel/cap_last_cap", "rb") as f:
            last_cap = int(f.read())
    except OSError:  # a sandbox without /proc (a container runtime masks it)
        last_cap = 63  # every capability a kernel can have; past the last, EINVAL

    for cap in range(last_cap + 1):
        # EPERM without CAP_SETPCAP: then the bounding set is empty or fixed already.
        libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)
    uid = limits.get("uid")
    if uid is not None:
        os.setgroups([])
        os.setgid(limits["gid"])
        os.setuid(uid)
    # The worker's event loop thread started us: if the worker dies, so do we. (After
    # the uid switch, which clears it.)
    _prctl(libc, _PR_SET_PDEATHSIG, signal.SIGKILL)
    # RLIMIT_NPROC counts every process and thread of the real uid, the worker's and
    # (when services share a user) the other services' too, and fork() fails once the
    # count exceeds the forking process's limit. An absolute limit of 64 would leave
    # a worker with 70 threads unable to start a single subprocess; so the snippet
    # gets what its uid runs now plus its allowance. Concurrent nodes of one uid see
    # each other in that count: together they are bounded by about their number
    # times the allowance. The kernel does not apply the limit to root (uid 0), and
    # not to a process holding CAP_SYS_RESOURCE or CAP_SYS_ADMIN (dropped below).
    _set_limit(resource.RLIMIT_NPROC, _tasks_of(os.getuid()) + limits["processes"])
    _prctl(libc, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL)
    # No capability left, and none regained through a setuid or file-capability program
    # (a uid-0 process regains them at execve unless no_new_privs is set): CAP_SYS_PTRACE
    # would read any process's memory, non-dumpable services' included.
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    if libc.capset(ctypes.byref(header), data) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"capset failed: {os.strerror(errno)}")
    _prctl(libc, _PR_SET_NO_NEW_PRIVS, 1)


def _type_name(exc: BaseException) -> str:
    cls = type(exc)
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


def _message(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:
        return "<the exception's message could not be rendered>"


def _user_traceback(exc: BaseException) -> str:
    """The traceback limited to the snippet's own frames (the bootstrap is noise to a user)."""
    import linecache  # traceback's own: loaded already

    if _SOURCE:
        linecache.cache[FILENAME] = (len(_SOURCE), None, _SOURCE.splitlines(True), FILENAME)
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == FILENAME]
    lines = traceback.format_list(frames)
    lines += traceback.format_exception_only(type(exc), exc)
    return "".join(lines)


def _finish(result_fd: int, payload: dict[str, Any]) -> NoReturn:
    try:
        data = json.dumps(payload, ensure_ascii=False, allow_nan=False)
    except MemoryError:
        data = json.dumps(
            {
                "ok": False,
                "code": "memory_limit",
                "type": "MemoryError",
                "message": "out of memory while encoding the result",
                "traceback": "",
            }
        )
    for stream in (sys.stdout, sys.stderr):
        try:  # noqa: SIM105 (contextlib: 6 ms more at every node's start)
            stream.flush()
        except Exception:  # the user may have closed or replaced it
            pass
    encoded = data.encode("utf-8", errors="surrogatepass")
    with os.fdopen(result_fd, "wb") as out:
        # Framed by its length: in a sandbox, bubblewrap's own processes hold the
        # parent's end of this pipe open, so its end of file would come only with them.
        out.write(b"%d\n" % len(encoded))
        out.write(encoded)
    # The result tells the parent we are done: it kills this process and every
    # descendant while we are still alive to hold them (see the module docstring).
    # No interpreter shutdown: a thread the snippet left running must not hold us back.
    deadline = time.monotonic() + _AWAIT_KILL_SECONDS
    while (left := deadline - time.monotonic()) > 0:
        try:  # noqa: SIM105
            time.sleep(left)
        except BaseException:  # a signal handler the snippet installed
            pass
    os._exit(0)


def _fail(result_fd: int, code: str, exc: BaseException, message: str | None = None) -> NoReturn:
    if isinstance(exc, MemoryError):
        code = "memory_limit"
    _finish(
        result_fd,
        {
            "ok": False,
            "code": code,
            "type": _type_name(exc),
            "message": message if message is not None else _message(exc),
            "traceback": _user_traceback(exc),
            "errno": exc.errno if isinstance(exc, OSError) else None,
        },
    )


def _close_quietly(fd: int) -> None:
    try:  # noqa: SIM105
        os.close(fd)
    except OSError:
        pass


def _main() -> NoReturn:
    limits = json.loads(sys.argv[1])
    # Whatever the worker let through beyond stdio goes: uvloop hands its children
    # inheritable copies of their stdio sockets, and a copy of stdout would keep the
    # result open after it was written (and leak into every process started here).
    open_max = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    os.closerange(3, open_max if open_max != resource.RLIM_INFINITY else 1 << 20)
    result_fd = os.dup(1)  # dup() makes a non-inheritable fd (PEP 446)
    os.register_at_fork(after_in_child=lambda: _close_quietly(result_fd))
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        _confine(limits)
    except BaseException as exc:
        _fail(result_fd, "sandbox_unavailable", exc, f"{_type_name(exc)}: {_message(exc)}")
    # Only now does the parent give a sandbox its network, and us the request.
    os.write(result_fd, b"confined\n")

    request = json.loads(sys.stdin.buffer.read())
    global _SOURCE
    source: str = request["code"]
    _SOURCE = source  # for the traceback's lines, should the code fail

    try:
        code = compile(source, FILENAME, "exec")
    except SyntaxError as exc:
        where = f" (line {exc.lineno})" if exc.lineno else ""
        _fail(result_fd, "syntax_error", exc, f"{exc.msg}{where}")
    except BaseException as exc:  # e.g. ValueError for a NUL byte in the source
        _fail(result_fd, "syntax_error", exc)

    namespace: dict[str, Any] = {"__name__": "__composer_node__", "__builtins__": builtins}
    try:
        exec(code, namespace)
    except BaseException as exc:
        _fail(result_fd, "exception", exc)

    main = namespace.get("main")
    if not callable(main):
        _finish(
            result_fd,
            {
                "ok": False,
                "code": "no_main",
                "type": None,
                "message": "the code defines no function main(input)"
                if main is None
                else f"main is a {type(main).__name__}, not a function",
                "traceback": "",
            },
        )

    try:
        value = main(request["input"])
        if hasattr(value, "__await__"):  # async def main: run it to completion
            import asyncio

            async def _await() -> Any:
                return await value

            value = asyncio.run(_await())
    except BaseException as exc:
        _fail(result_fd, "exception", exc)

    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        _fail(
            result_fd,
            "not_json",
            exc,
            f"main returned a value JSON cannot hold ({type(value).__name__}: {_message(exc)}); "
            "return dicts, lists, strings, finite numbers, booleans or None",
        )
    except MemoryError as exc:
        _fail(result_fd, "memory_limit", exc)
    _finish(result_fd, {"ok": True, "value": value})


if __name__ == "__main__":
    _main()
