"""``forbid_dumping()``: no process of the same user may read a service's memory or environment.

A service holds secrets in its environment (tokens, the database and Redis
URLs) and in its memory. By default Linux lets any process of the same uid
read ``/proc/<pid>/environ`` and ``/proc/<pid>/mem``: a PYTHON node's child,
or under ``make run`` any service's child, could read them all.
``prctl(PR_SET_DUMPABLE, 0)`` closes that: the kernel then owns the
process's ``/proc/<pid>/`` files by root and refuses ptrace-mode access to
any process without CAP_SYS_PTRACE (the PYTHON executor drops every
capability in its child, so a worker running as root is covered too). It
also disables core dumps, which would hold the same secrets.

The price: a debugger or ``py-spy`` of the same user cannot attach either
(root with CAP_SYS_PTRACE still can). The flag is reset by execve, so it
protects this process only, not the programs it starts.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

PR_GET_DUMPABLE = 3
PR_SET_DUMPABLE = 4


def forbid_dumping() -> bool:
    """Make this process non-dumpable; True when it is (always on Linux), False elsewhere.

    Every service calls it first thing (``composer_service.run`` does). It
    raises ``OSError`` when Linux refuses, which it never does for this flag.
    """
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, "prctl(PR_SET_DUMPABLE, 0) failed")
    return True


def is_dumpable() -> bool | None:
    """Whether this process is dumpable (None where the question has no answer: not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    return bool(libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0))
