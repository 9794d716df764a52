"""Issue 17, item 2: a port another process holds is one line naming the setting to
change, and exit code 3 (EXIT_PORT_IN_USE), not a traceback a supervisor restarts."""

from __future__ import annotations

import errno
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from composer_service import EXIT_PORT_IN_USE, PortInUse, StartupError, listen_error, serve_admin


@pytest.fixture
def taken() -> Iterator[int]:
    """A port another program listens on."""
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        yield int(squatter.getsockname()[1])


def test_the_message_names_the_port_and_the_setting() -> None:
    error = PortInUse(8080, "COMPOSER_API_PORT")
    assert str(error) == (
        "port 8080 (COMPOSER_API_PORT) is in use by another process: "
        "stop it or set COMPOSER_API_PORT"
    )
    assert isinstance(error, StartupError)


def test_an_address_in_use_is_port_in_use(taken: int) -> None:
    raised = OSError(errno.EADDRINUSE, "address already in use")
    assert isinstance(listen_error(raised, "127.0.0.1", taken, "X"), PortInUse)
    # gRPC says only "Failed to bind": the port itself is asked
    grpc_says = RuntimeError(f"Failed to bind to address 127.0.0.1:{taken}")
    error = listen_error(grpc_says, "127.0.0.1", taken, "COMPOSER_GRPC_ADDR")
    assert isinstance(error, PortInUse) and error.setting == "COMPOSER_GRPC_ADDR"


def test_another_listen_failure_is_a_plain_startup_error() -> None:
    with socket.socket() as s:  # a port nobody holds
        s.bind(("127.0.0.1", 0))
        free = int(s.getsockname()[1])
    error = listen_error(RuntimeError("Failed to bind"), "127.0.0.1", free, "COMPOSER_GRPC_ADDR")
    assert not isinstance(error, PortInUse)
    refused = OSError(errno.EACCES, "Permission denied")
    error = listen_error(refused, "127.0.0.1", 80, "COMPOSER_API_PORT")
    assert str(error) == "cannot listen on 127.0.0.1:80 (Permission denied): set COMPOSER_API_PORT"


async def test_a_taken_admin_port_names_its_setting(taken: int) -> None:
    with pytest.raises(PortInUse, match=rf"port {taken} \(COMPOSER_ADMIN_PORT\) is in use"):
        async with serve_admin(taken, {}):
            pass


#: A service whose admin port is taken, run as services run.
PROBE = r"""
import sys
from composer_service import run, serve_admin

async def serve():
    async with serve_admin(int(sys.argv[1]), {}):
        pass

sys.exit(run("probe", serve, uvloop=True))
"""


def test_a_service_exits_3_with_one_line(taken: int) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(taken)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == EXIT_PORT_IN_USE == 3, done.stderr
    assert done.stderr == (
        f"probe cannot start: port {taken} (COMPOSER_ADMIN_PORT) is in use by another "
        "process: stop it or set COMPOSER_ADMIN_PORT\n"
    )
