"""A process started by a supervisor dies with it, even when it is SIGKILLed.

``make run``'s supervisor starts each service in its own session (Ctrl-C is the
supervisor's to handle), so nothing else stops a service whose supervisor is
gone: it ran on as an orphan, holding its ports, and the next ``make run``
met them taken. So the supervisor passes its pid (COMPOSER_SUPERVISOR_PID,
read by ``composer_service.run``) and each service, first thing:

- on Linux asks the kernel for SIGTERM when its parent dies
  (``prctl(PR_SET_PDEATHSIG)``): it stops as on Ctrl-C, draining;
- checks its parent is still that pid, which closes the race of a
  supervisor that died before the ``prctl``;
- watches its parent from a thread: elsewhere than Linux that thread sends
  the SIGTERM, and everywhere it SIGKILLs the process when the graceful stop
  outlasts ``grace`` (the supervisor, alive, would have done the same).

``make run`` asks the same of the supervisor itself towards ``make``
(``--parent-pid``), so killing ``make`` stops the whole stack.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1
#: How often the watching thread looks at its parent.
POLL_SECONDS = 0.5


def die_with_parent(parent_pid: int, *, grace: float) -> bool:
    """Stop this process (SIGTERM, then SIGKILL after ``grace`` seconds) when ``parent_pid``,
    its parent, dies. False when it is already gone (the caller exits at once)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent_pid:  # it died before the prctl: no signal will come
        return False
    threading.Thread(
        target=_watch, args=(parent_pid, grace), name="supervisor-watch", daemon=True
    ).start()
    return True


def _watch(parent_pid: int, grace: float) -> None:
    while os.getppid() == parent_pid:
        time.sleep(POLL_SECONDS)
    if not sys.platform.startswith("linux"):
        os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(grace)
    os.kill(os.getpid(), signal.SIGKILL)  # its graceful stop took too long
