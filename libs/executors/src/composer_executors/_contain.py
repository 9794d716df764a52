"""What confines a PYTHON node's process, seen from the worker: its limits, and ending it
when it runs unsandboxed (COMPOSER_PYTHON_SANDBOX=off; a sandboxed node ends with its
pid namespace, ``_sandbox``).

The child applies the limits to itself (``_child._confine``) before it reads
the snippet. Ending a node (it returned, failed, timed out or was cancelled)
kills every process it started, wherever it went:

- the child runs in its own session, so processes that stay in it are found
  by their session id, even after the child itself died;
- the child is a "child subreaper" (PR_SET_CHILD_SUBREAPER) and stays alive
  after writing its result until the worker kills it, so a process that left
  the session with setsid() and lost its parent (a double-forked daemon) is
  re-parented to the child, not to init, and is found by walking parent ids
  down from the child.

:func:`kill_tree` freezes what it finds with SIGSTOP as it walks, so nothing
can fork faster than it is found, and kills them all with SIGKILL once a walk
finds nothing new.

The limit: a process that left the session *and* whose chain of parents up
to the child broke while the child was already dead (the snippet's own
process died by a signal or called os._exit while a setsid() daemon ran) is
re-parented to init and survives. A cgroup would close that gap; it is not
used because a worker rarely may create one (a container's cgroup tree is
read-only). The snippet is trusted code, and could also undo the subreaper
flag: this cleans up after mistakes, it does not contain an attacker.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

#: Walks of /proc before the processes found so far are killed anyway.
_MAX_WALKS = 50


@dataclass(frozen=True, slots=True)
class ProcessLimits:
    """The limits of one PYTHON node's process and everything it starts."""

    #: RLIMIT_AS of each process: allocating past it raises MemoryError.
    memory_bytes: int
    #: Processes and threads the node may add to what its uid runs (RLIMIT_NPROC).
    processes: int
    #: The largest file the node may write (RLIMIT_FSIZE).
    file_bytes: int
    #: File descriptors per process (RLIMIT_NOFILE).
    open_files: int
    #: Run as this uid (and ``gid``) instead of the worker's; needs a worker running as root.
    uid: int | None = None
    gid: int | None = None

    def __post_init__(self) -> None:
        for name in ("memory_bytes", "processes", "file_bytes", "open_files"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.uid is not None:
            if self.uid == 0:
                raise ValueError("the python uid must not be 0: snippets must not run as root")
            if os.geteuid() != 0:
                raise ValueError(
                    f"running python code as uid {self.uid} needs the worker to run as root; "
                    "unset COMPOSER_PYTHON_UID or start the workers as root"
                )

    def argv(self, *, uid: int | None = None, unreachable: Sequence[str] = ()) -> str:
        """The limits as the child reads them (``argv[1]``). In a sandbox, ``uid`` is the
        node's own uid (the child switches to it, gid the same) and ``unreachable`` the
        networks it closes (``_sandbox.SandboxSetup``)."""
        if uid is None:
            uid = self.uid
            gid = self.gid if self.gid is not None else self.uid
        else:
            gid = uid
        return json.dumps(
            {
                "memory_bytes": self.memory_bytes,
                "processes": self.processes,
                "file_bytes": self.file_bytes,
                "open_files": self.open_files,
                "uid": uid,
                "gid": gid,
                "unreachable": list(unreachable),
            }
        )


def kill_tree(root: int, *, root_reaped: bool) -> None:
    """SIGKILL ``root``'s session and process group and every descendant of ``root``.

    ``root_reaped``: the child's exit status was collected, so its pid may belong
    to another process by now: then only its session and group are searched
    (their ids cannot be reused while a member lives).
    """
    _signal_group(root, signal.SIGSTOP)
    if not sys.platform.startswith("linux"):
        _signal_group(root, signal.SIGKILL)
        return
    if not root_reaped and _children_files() and _running(root):
        # The usual end: the child is alive, and as a subreaper it holds every process
        # the snippet started; walking its tree costs what the tree holds, not a scan
        # of every process on the machine.
        def walk() -> set[int]:
            return _descendants(root)
    else:

        def walk() -> set[int]:
            return _members(root, with_descendants=not root_reaped)

    found: set[int] = set()
    for _ in range(_MAX_WALKS):
        new = walk() - found
        if not new:
            break
        for pid in new:
            _signal(pid, signal.SIGSTOP)
        found |= new
    for pid in found:
        _signal(pid, signal.SIGKILL)
    _signal_group(root, signal.SIGKILL)


@cache
def _children_files() -> bool:
    """Whether /proc lists a task's children (CONFIG_PROC_CHILDREN, on in common kernels)."""
    return os.path.exists(f"/proc/self/task/{os.getpid()}/children")


def _running(pid: int) -> bool:
    """Alive and not a zombie (a zombie holds no children: they went to its reaper)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def _descendants(root: int) -> set[int]:
    """``root`` and every descendant, from each task's ``children`` list."""
    found = {root}
    pending = [root]
    while pending:
        pid = pending.pop()
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue  # gone meanwhile
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                    children = [int(c) for c in f.read().split()]
            except OSError:
                continue
            for child in children:
                if child not in found:
                    found.add(child)
                    pending.append(child)
    return found


def _members(root: int, *, with_descendants: bool) -> set[int]:
    """Processes of ``root``'s session or group, and ``root``'s descendants."""
    parents: dict[int, list[int]] = {}
    members: set[int] = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # gone meanwhile
        # "pid (comm) state ppid pgrp session …": comm may hold spaces and parentheses.
        fields = stat.rsplit(b")", 1)[1].split()
        pid, ppid, pgrp, session = int(entry.name), int(fields[1]), int(fields[2]), int(fields[3])
        parents.setdefault(ppid, []).append(pid)
        if session == root or pgrp == root:
            members.add(pid)
    if with_descendants:
        members.add(root)
    pending = list(members)
    while pending:
        pid = pending.pop()
        for child in parents.get(pid, ()):
            if child not in members:
                members.add(child)
                pending.append(child)
    if not with_descendants:
        members.discard(root)
    return members


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
