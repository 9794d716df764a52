"""Start a child process without fork(), and wait for it without a child watcher.

Why not ``asyncio.create_subprocess_exec``: on uvloop (the services' event
loop) it starts the child with libuv's ``fork()``, and ``fork()`` runs every
``pthread_atfork`` handler of the process. gRPC's C core registers such
handlers; while other threads are inside gRPC (a worker always has calls in
flight) its prefork handler gives up ("Other threads are currently calling
into gRPC, skipping fork() handlers") and the child is left to run gRPC's
child-side handlers on state copied mid-operation: about one child in ten
died of SIGSEGV or SIGABRT before it reached ``exec`` (measured with 300
children at 16 concurrent beside a busy channel: 25 crashed; with this
module, 0; see tests/unit/executors/test_spawn.py).

:class:`subprocess.Popen` starts the child with ``vfork()`` (CPython's
``_posixsubprocess``, when no ``preexec_fn``, user or group switch is asked),
which runs no atfork handler: the child shares nothing with gRPC's threads
and execs at once. Its exit is awaited on a pidfd (Linux 5.3+) registered
with the event loop, so no SIGCHLD handler or watcher thread is involved.
Every PYTHON node's process starts here, sandboxed or not.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass
class Child:
    """A started child: its pipes as asyncio streams, and its exit as an awaitable."""

    process: subprocess.Popen[bytes]
    #: None for a ``quiet`` child (stdin and stdout are /dev/null).
    stdin: asyncio.StreamWriter | None
    stdout: asyncio.StreamReader | None
    stderr: asyncio.StreamReader
    _exited: asyncio.Future[None]
    _pidfd: int | None
    _transports: list[asyncio.BaseTransport]

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        """The exit status once :meth:`wait` returned (negative: killed by that signal)."""
        return self.process.returncode

    async def wait(self) -> int:
        """Wait for the child to exit and reap it; its exit status."""
        if self.process.returncode is None:
            await asyncio.shield(self._exited)
            self.process.wait()  # it has exited: this only collects the status
        self._close_pidfd()
        return self.process.returncode

    def kill(self) -> None:
        """SIGKILL the child, unless it was reaped already (its pid may be another's)."""
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()

    def reap_in_background(self) -> None:
        """Stop watching the child and its pipes, and reap it from a thread of its own:
        for a killed child whose exit may take a while and which nobody waits for."""
        self._close_pidfd()
        self.close_pipes()
        threading.Thread(
            target=self.process.wait, name=f"reap-{self.process.pid}", daemon=True
        ).start()

    def close_pipes(self) -> None:
        """Close our ends of its pipes, once read to their end or no longer wanted (a
        process that escaped may still hold theirs). Needed even at their end of file:
        uvloop keeps a read pipe's transport open there."""
        for transport in self._transports:
            transport.close()

    def _close_pidfd(self) -> None:
        if self._pidfd is not None:
            with contextlib.suppress(ValueError, RuntimeError):
                asyncio.get_running_loop().remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None


async def spawn(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | None = None,
    pass_fds: Sequence[int] = (),
    start_new_session: bool = False,
    quiet: bool = False,
) -> Child:
    """Start ``argv`` with piped stdin, stdout and stderr (see the module docstring);
    ``quiet``: only stderr is piped, stdin and stdout are /dev/null.

    Raises OSError when it cannot be started (e.g. FileNotFoundError for a
    missing program). Called on the event loop's thread on purpose: a child
    asking for PR_SET_PDEATHSIG (bubblewrap's --die-with-parent) is tied to
    the thread that started it, and the loop's thread lives as long as the
    worker.
    """
    loop = asyncio.get_running_loop()
    piped = subprocess.DEVNULL if quiet else subprocess.PIPE
    # Popen is the point (vfork, see the module docstring); it returns once the child
    # has exec'd, a millisecond or two.
    process = subprocess.Popen(  # noqa: ASYNC220
        list(argv),
        stdin=piped,
        stdout=piped,
        stderr=subprocess.PIPE,
        env=dict(env),
        cwd=cwd,
        pass_fds=tuple(pass_fds),
        close_fds=True,
        start_new_session=start_new_session,
    )
    exited: asyncio.Future[None] = loop.create_future()
    pidfd: int | None = None
    try:
        pidfd = os.pidfd_open(process.pid)
    except ProcessLookupError:  # already gone (and not yet reaped: cannot happen; be safe)
        exited.set_result(None)
    else:

        def on_exit() -> None:
            loop.remove_reader(pidfd)
            if not exited.done():
                exited.set_result(None)

        loop.add_reader(pidfd, on_exit)
    assert process.stderr is not None
    transports: list[asyncio.BaseTransport] = []
    stdin = None if process.stdin is None else await _writer(loop, process.stdin, transports)
    stdout = None
    if process.stdout is not None:
        stdout = await _reader(loop, process.stdout, transports)
    stderr = await _reader(loop, process.stderr, transports)
    return Child(process, stdin, stdout, stderr, exited, pidfd, transports)


async def _reader(
    loop: asyncio.AbstractEventLoop, pipe: object, transports: list[asyncio.BaseTransport]
) -> asyncio.StreamReader:
    reader = asyncio.StreamReader(limit=2**20)
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    transports.append(transport)
    return reader


async def _writer(
    loop: asyncio.AbstractEventLoop, pipe: object, transports: list[asyncio.BaseTransport]
) -> asyncio.StreamWriter:
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, pipe)
    transports.append(transport)
    return asyncio.StreamWriter(transport, protocol, None, loop)
