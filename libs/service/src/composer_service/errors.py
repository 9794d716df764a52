"""Why a service cannot start, in one line that names the fix.

StartupError          the message names the fix; ``run`` exits 2 with it
 └── PortInUse        its port is taken by another process; ``run`` exits 3
                      (EXIT_PORT_IN_USE), so a supervisor stops instead of
                      restarting it into the same wall
"""

from __future__ import annotations

import errno
import socket

#: ``run``'s exit code for a port taken by another process (2 is any other start-up error).
EXIT_PORT_IN_USE = 3


class StartupError(Exception):
    """The service cannot start; the message names the fix."""


class PortInUse(StartupError):
    """Another process listens on the port; ``setting`` is the variable that moves it."""

    def __init__(self, port: int, setting: str) -> None:
        super().__init__(
            f"port {port} ({setting}) is in use by another process: stop it or set {setting}"
        )
        self.port = port
        self.setting = setting


def listen_error(exc: BaseException, host: str, port: int, setting: str) -> StartupError:
    """The StartupError for ``exc``, raised while listening on ``host``:``port``:
    PortInUse when another process holds the port, else one naming the reason and
    ``setting``. gRPC says only "Failed to bind" (no errno), so the port is asked again."""
    code = exc.errno if isinstance(exc, OSError) else None
    if code == errno.EADDRINUSE or (code is None and port_taken(host, port)):
        return PortInUse(port, setting)
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return StartupError(f"cannot listen on {host}:{port} ({reason}): set {setting}")


def port_taken(host: str, port: int) -> bool:
    """Whether binding ``host``:``port`` fails with EADDRINUSE now (SO_REUSEADDR set as
    the servers set it, so a port in TIME_WAIT counts as free)."""
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM)
    except OSError:
        return False
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False
