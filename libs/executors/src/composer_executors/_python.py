"""The PYTHON node: run a snippet's ``main(input)`` in a separate, sandboxed process.

A PYTHON node runs code that whoever publishes or starts a definition chose.
With a :class:`Sandbox` (the workers' default, ``_sandbox``) the child runs
in bubblewrap's namespaces as a uid of its own, with none of the host's files
and a network of the deployment's choice; without one
(COMPOSER_PYTHON_SANDBOX=off) it runs as a contained process of the worker's
user. Either way (docs/architecture.md §8.1):

- ``python -I -S -B -X utf8``: isolated mode ignores PYTHON* variables and
  the current directory; no site-packages (the standard library only); no
  .pyc files are written.
- A clean environment (PATH, a UTF-8 locale, HOME and TMPDIR in the work
  directory): no COMPOSER_* settings, tokens or database URLs.
- No capabilities and no_new_privs; limits set in the child before the
  snippet is compiled (``_child._confine``): RLIMIT_AS (allocating past it
  raises MemoryError, reported as ``memory_limit``), RLIMIT_NPROC, RLIMIT_FSIZE
  and RLIMIT_NOFILE; an error that hits one of the last three names the limit.
- When the node ends (returned, failed, timed out or cancelled) every process
  it started is killed: the sandbox's pid namespace, or, unsandboxed, the
  child's session and descendants (``_contain.kill_tree``).
- Input and result travel as JSON over stdin and a private copy of the
  child's stdout; the snippet's own stdout is pointed at stderr, of which
  only the last 64 KiB is kept and the last lines are quoted in errors.
  Each line of it also goes to ``output`` as it comes (the node's task log).
- Processes start without fork() (``_spawn``): gRPC's atfork handlers
  crashed children started by uvloop's fork().
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import pwd
import shutil
import signal
import sys
import tempfile
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from composer_executors._contain import ProcessLimits, kill_tree
from composer_executors._errors import (
    ExecutionError,
    ExecutionTimeout,
    InvalidSpec,
    PythonError,
)
from composer_executors._sandbox import Sandbox, Sandboxed, SandboxUnavailable
from composer_executors._secret_references import run_with_secrets
from composer_executors._secret_sources import SecretSource
from composer_executors._spawn import Child, spawn
from composer_rpc.codes import ErrorCode

_CHILD_SOURCE = (Path(__file__).parent / "_child.py").read_text(encoding="utf-8")
_STDERR_KEEP_BYTES = 64 * 1024
_STDERR_QUOTE_LINES = 20
_STDERR_QUOTE_CHARS = 2000
_DRAIN_AFTER_EXIT = 1.0  # seconds to collect the pipes once the process group is dead
#: The interpreter's arguments before the limits: isolated mode, no site-packages
#: (the standard library only), no .pyc files, UTF-8.
_PYTHON_ARGS = ("-I", "-S", "-B", "-X", "utf8", "-c", _CHILD_SOURCE)
#: How long the start-up check's trivial node may take.
_CHECK_SECONDS = 30.0
_PERMANENT = frozenset(
    {ErrorCode.SYNTAX_ERROR, ErrorCode.NO_MAIN, ErrorCode.NOT_JSON, ErrorCode.RESULT_TOO_LARGE}
)


async def run_python(
    spec: Mapping[str, Any],
    *,
    timeout: float,
    memory_limit_bytes: int,
    max_result_bytes: int = 1024 * 1024,
    max_processes: int = 64,
    max_file_bytes: int = 16 * 1024 * 1024,
    max_open_files: int = 256,
    uid: int | None = None,
    secrets: SecretSource | None = None,
    output: Callable[[str], None] | None = None,
    sandbox: Sandbox | None = None,
) -> Any:
    """Run ``spec["code"]``'s ``main(spec["input"])`` in a child process; return its result.

    ``input`` defaults to ``{}``. The result must be JSON (dicts, lists,
    strings, finite numbers, booleans, None) and at most
    ``max_result_bytes`` encoded. ``max_processes`` (processes and threads
    the node may add to those its uid runs), ``max_file_bytes`` and
    ``max_open_files`` limit the child and all it starts. With ``sandbox``
    (an opened :class:`Sandbox`) the child runs in it (``_sandbox``: its own
    namespaces, uid, files and network); without, as a contained process of
    the worker's (COMPOSER_PYTHON_SANDBOX=off), as ``uid`` when that is set
    (the worker must run as root). Raises :class:`ExecutionTimeout` past
    ``timeout`` seconds, :class:`PythonError` for everything the snippet did
    wrong and :class:`SandboxUnavailable` when the sandbox could not be set
    up. The secret references ``input`` holds (listed under ``$secrets``)
    are resolved from ``secrets`` and handed to the code; their values are
    scrubbed from its result and errors, as far as they appear as they are
    (docs/secrets.md). ``output`` gets each line the code printed (its stdout
    and stderr, and its subprocesses'), as it comes, with the secrets
    scrubbed too.
    """
    if timeout <= 0:
        raise ValueError(f"timeout must be positive, got {timeout}")
    if memory_limit_bytes <= 0:
        raise ValueError(f"memory_limit_bytes must be positive, got {memory_limit_bytes}")
    limits = ProcessLimits(
        memory_bytes=memory_limit_bytes,
        processes=max_processes,
        file_bytes=max_file_bytes,
        open_files=max_open_files,
        uid=None if sandbox is not None else uid,
        gid=None if sandbox is not None else _primary_gid(uid),
    )

    scrub: list[Callable[[str], str]] = []

    def printed(line: str) -> None:
        if output is not None:
            output(scrub[0](line) if scrub else line)

    async def call(resolved: Mapping[str, Any]) -> Any:
        payload = _payload(resolved)
        if sandbox is not None:
            node: _Node = await _Sandboxed.start(sandbox, limits)
        else:
            node = await _Contained.start(limits)
        return await _run(node, payload, timeout, max_result_bytes, limits, printed)

    return await run_with_secrets(
        spec, secrets, call, on_resolved=lambda r: scrub.append(r.scrub_text)
    )


async def check_sandbox(sandbox: Sandbox) -> None:
    """Run one trivial node in ``sandbox``: what a worker does at start to learn that
    the sandbox works here. Raises SandboxUnavailable (permanent) saying why not.

    A container runtime may mask /proc (no fresh one can be mounted), keep
    /proc/sys read-only (bwrap cannot forbid nested user namespaces) or refuse
    sethostname: the check then tries again without what bwrap said it could
    not do, and the sandbox says what it went without (``Sandbox.weakened``).
    Namespaces themselves are never given up.
    """
    while True:
        try:
            await _check_once(sandbox)
            return
        except SandboxUnavailable as exc:
            if not sandbox.give_up_for(exc.message):
                sandbox.restore()
                raise


async def _check_once(sandbox: Sandbox) -> None:
    try:
        value = await run_python(
            {"code": "def main(input):\n    return input\n", "input": {"ok": True}},
            timeout=_CHECK_SECONDS,
            memory_limit_bytes=256 * 1024 * 1024,
            sandbox=sandbox,
        )
    except ExecutionError as exc:
        raise SandboxUnavailable(
            f"a trivial PYTHON node failed in the sandbox: {exc.message}", permanent=True
        ) from None
    if value != {"ok": True}:
        raise SandboxUnavailable(
            f"a trivial PYTHON node returned {value!r} in the sandbox", permanent=True
        )


class _Node:
    """One node's running process, however it was started: its pipes, and its end."""

    child: Child

    async def connect(self) -> None:
        """Once the child is confined: give it its network, if it has one to get."""

    def status(self) -> int | None:
        """The child's exit status once ended (negative: killed by that signal)."""
        return self.child.returncode

    def kill(self) -> None:
        """SIGKILL the process and all it started (synchronous: no await can skip it)."""
        raise NotImplementedError

    async def end(self) -> None:
        """Reap what is left and release what the node held."""
        raise NotImplementedError


class _Sandboxed(_Node):
    def __init__(self, sandboxed: Sandboxed) -> None:
        self.sandboxed = sandboxed
        self.child = sandboxed.child

    @classmethod
    async def start(cls, sandbox: Sandbox, limits: ProcessLimits) -> _Sandboxed:
        sandboxed = await sandbox.start(
            _PYTHON_ARGS,
            lambda setup: limits.argv(uid=setup.uid, unreachable=setup.unreachable),
        )
        return cls(sandboxed)

    async def connect(self) -> None:
        await self.sandboxed.connect()

    def status(self) -> int | None:
        # bwrap exits as its command did, a death by signal N as status 128 + N.
        code = self.child.returncode
        if code is not None and 128 < code < 128 + signal.NSIG:
            return -(code - 128)
        return code

    def kill(self) -> None:
        self.sandboxed.kill()

    async def end(self) -> None:
        await self.sandboxed.end()


class _Contained(_Node):
    """COMPOSER_PYTHON_SANDBOX=off: a process of the worker's own, in its own session,
    in a temporary work directory (``_contain`` kills what it leaves)."""

    def __init__(self, child: Child, work: str) -> None:
        self.child = child
        self.work = work

    @classmethod
    async def start(cls, limits: ProcessLimits) -> _Contained:
        work = tempfile.mkdtemp(prefix="composer-python-")
        try:
            if limits.uid is not None:
                os.chown(work, limits.uid, limits.gid if limits.gid is not None else limits.uid)
            child = await spawn(
                [sys.executable, *_PYTHON_ARGS, limits.argv()],
                env=_clean_env(work),
                cwd=work,
                start_new_session=True,
            )
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        return cls(child, work)

    def kill(self) -> None:
        kill_tree(self.child.pid, root_reaped=self.child.returncode is not None)

    async def end(self) -> None:
        try:
            await self.child.wait()
        finally:
            # The snippet may have left many files: remove them off the event loop.
            await asyncio.to_thread(shutil.rmtree, self.work, ignore_errors=True)


async def _run(
    node: _Node,
    payload: bytes,
    timeout: float,
    max_result_bytes: int,
    limits: ProcessLimits,
    printed: Callable[[str], None],
) -> Any:
    """Feed the node's process ``payload`` and turn what it left into the result or an error."""
    child = node.child
    assert child.stdin is not None
    assert child.stdout is not None
    result = _CappedReader(max_result_bytes)
    stderr = _TailReader(_STDERR_KEEP_BYTES, printed)
    reading = asyncio.create_task(result.read(child.stdout), name="python-node-result")
    tailing = asyncio.create_task(stderr.read(child.stderr), name="python-node-stderr")
    pipes = [reading, tailing]
    timed_out = False
    try:
        try:
            async with asyncio.timeout(timeout):
                # The child says when it has confined itself (or fails before): only then
                # does the sandbox get its network, and the child its request.
                confined = asyncio.create_task(result.confined.wait())
                await asyncio.wait((confined, reading), return_when=asyncio.FIRST_COMPLETED)
                confined.cancel()
                if result.confined.is_set():
                    await node.connect()
                    pipes.append(
                        asyncio.create_task(_feed(child.stdin, payload), name="python-node-stdin")
                    )
                # The result is read once the child has written it (or the pipe ends).
                # Waiting for the process would also wait for every process that still
                # holds stderr open.
                await asyncio.shield(reading)
        except TimeoutError:
            timed_out = True
        finally:
            # Also after a normal end: the child waits for this, and whatever the snippet
            # left running must not outlive the node. Synchronous, so that a second
            # cancellation cannot skip it.
            node.kill()
            await _drain(pipes)  # False: a process that escaped still holds a pipe
            # Closed by us in any case: uvloop keeps a read pipe open at its end of file.
            child.close_pipes()
    finally:
        await node.end()
    if timed_out:
        raise ExecutionTimeout(
            f"the python code did not finish within {timeout:g} s and was stopped; "
            "make main faster or raise the node's timeout_seconds" + _quote(stderr.text())
        )
    return _outcome(result, stderr.text(), node.status(), limits)


def _primary_gid(uid: int | None) -> int | None:
    if uid is None:
        return None
    try:
        return pwd.getpwuid(uid).pw_gid
    except KeyError:
        return uid  # a uid without a passwd entry (a container's): its own number as gid


def _payload(spec: Mapping[str, Any]) -> bytes:
    if not isinstance(spec, Mapping):
        raise InvalidSpec(f"a PYTHON spec must be an object, got {type(spec).__name__}")
    code = spec.get("code")
    if not isinstance(code, str) or not code.strip():
        raise InvalidSpec("code must be a non-empty string holding a function main(input)")
    node_input = spec.get("input", {})
    try:
        return json.dumps({"code": code, "input": node_input}, allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise InvalidSpec(f"input cannot be passed as JSON: {exc}") from exc


def _clean_env(work: str) -> dict[str, str]:
    return {
        "PATH": os.defpath,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "HOME": work,
        "TMPDIR": work,
    }


async def _feed(stdin: asyncio.StreamWriter, payload: bytes) -> None:
    try:
        stdin.write(payload)
        await stdin.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the child died before reading; its exit status says why
    finally:
        stdin.close()


class _CappedReader:
    """Reads the child's one result (a line with its length, then that many bytes),
    keeping it if it is at most ``cap`` bytes and noting an overflow otherwise.

    Returns once the result is read, an overflow is known, or the pipe ends
    (the child died first: no result).
    """

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.data = b""
        self.overflow = False
        #: Set when the child says it is confined and waits for its request.
        self.confined = asyncio.Event()

    async def read(self, stream: asyncio.StreamReader) -> None:
        header = await stream.readline()
        if header == b"confined\n":
            self.confined.set()
            header = await stream.readline()
        try:
            size = int(header)
        except ValueError:
            return  # the pipe ended (or held something else): no result
        if size > self.cap:
            self.overflow = True
            return
        try:
            self.data = await stream.readexactly(size)
        except asyncio.IncompleteReadError:
            return


class _TailReader:
    """Reads a pipe to its end, keeping the last ``keep`` bytes, and hands each line
    to ``lines`` as it completes (a line longer than ``keep`` in pieces of ``keep``)."""

    def __init__(self, keep: int, lines: Callable[[str], None] | None = None) -> None:
        self.keep = keep
        self.chunks: deque[bytes] = deque()
        self.size = 0
        self._lines = lines
        self._partial = b""

    async def read(self, stream: asyncio.StreamReader) -> None:
        try:
            while chunk := await stream.read(64 * 1024):
                self.chunks.append(chunk)
                self.size += len(chunk)
                while self.size - len(self.chunks[0]) >= self.keep:
                    self.size -= len(self.chunks.popleft())
                self._split(chunk)
        finally:  # the last line, even when the pipe was cut short
            if self._partial and self._lines is not None:
                self._lines(_decoded(self._partial))
                self._partial = b""

    def _split(self, chunk: bytes) -> None:
        if self._lines is None:
            return
        *complete, self._partial = (self._partial + chunk).split(b"\n")
        for line in complete:
            self._lines(_decoded(line))
        while len(self._partial) > self.keep:
            self._lines(_decoded(self._partial[: self.keep]))
            self._partial = self._partial[self.keep :]

    def text(self) -> str:
        return b"".join(self.chunks)[-self.keep :].decode("utf-8", errors="replace")


def _decoded(line: bytes) -> str:
    return line.rstrip(b"\r").decode("utf-8", errors="replace")


async def _drain(pipes: list[asyncio.Task[None]]) -> bool:
    """Let the pipe tasks reach EOF; False when a process outside the group holds one open."""
    _, pending = await asyncio.wait(pipes, timeout=_DRAIN_AFTER_EXIT)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pipes, return_exceptions=True)
    return not pending


def _quote(stderr: str) -> str:
    lines = stderr.rstrip().splitlines()[-_STDERR_QUOTE_LINES:]
    text = "\n".join(lines)
    if len(text) > _STDERR_QUOTE_CHARS:
        text = "…" + text[-_STDERR_QUOTE_CHARS:]
    return f"\nstderr (last lines):\n{text}" if text else ""


def _outcome(
    result: _CappedReader, stderr: str, returncode: int | None, limits: ProcessLimits
) -> Any:
    memory_limit = limits.memory_bytes
    if result.overflow:
        raise PythonError(
            f"main's result is larger than {result.cap} bytes as JSON; return less "
            "(store big data elsewhere and return a reference)",
            code=ErrorCode.RESULT_TOO_LARGE,
            permanent=True,
        )
    if not result.data:
        return _crashed(stderr, returncode, memory_limit)
    try:
        frame = json.loads(result.data)
    except ValueError:
        return _crashed(stderr, returncode, memory_limit)
    if not isinstance(frame, dict):
        return _crashed(stderr, returncode, memory_limit)
    if frame.get("ok") is True:
        return frame.get("value")

    try:
        code = ErrorCode(str(frame.get("code")))
    except ValueError:
        code = ErrorCode.EXCEPTION
    exc_type: str | None = frame.get("type")
    message: str = frame.get("message", "")
    if code is ErrorCode.SANDBOX_UNAVAILABLE:
        raise SandboxUnavailable(
            f"the node's process could not confine itself before running the code: {message}"
            + _quote(stderr)
        )
    if code is ErrorCode.MEMORY_LIMIT:
        text = f"the python code ran out of memory (limit {_mib(memory_limit)})"
        text += f": {exc_type}: {message}" if message else ""
    elif code is ErrorCode.SYNTAX_ERROR:
        text = f"the python code does not compile: {exc_type}: {message}"
    elif code is ErrorCode.NO_MAIN:
        text = f"{message}; define def main(input): … returning the node's output"
    elif code is ErrorCode.NOT_JSON:
        text = message
    else:
        text = f"{exc_type}: {message}" if message else f"{exc_type}"
    hint = _limit_hint(frame.get("errno"), limits)
    if hint:
        text += f" ({hint})"
    tb = frame.get("traceback", "").rstrip()
    if tb and code in (ErrorCode.EXCEPTION, ErrorCode.MEMORY_LIMIT):
        text += f"\ntraceback:\n{tb}"
    raise PythonError(
        text + _quote(stderr), code=code, permanent=code in _PERMANENT, exc_type=exc_type
    )


def _crashed(stderr: str, returncode: int | None, memory_limit: int) -> Any:
    if returncode is not None and returncode < 0:
        try:
            how = f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            how = f"was killed by signal {-returncode}"
    else:
        how = f"exited with status {returncode} before returning a result"
    if "MemoryError" in stderr or "Cannot allocate memory" in stderr:
        raise PythonError(
            f"the python code ran out of memory (limit {_mib(memory_limit)}) and {how}"
            + _quote(stderr),
            code=ErrorCode.MEMORY_LIMIT,
            permanent=False,
            exc_type="MemoryError",
        )
    raise PythonError(
        f"the python process {how}" + _quote(stderr), code=ErrorCode.CRASHED, permanent=False
    )


def _limit_hint(err: object, limits: ProcessLimits) -> str | None:
    """Which limit an OSError probably hit, named with the setting that raises it."""
    if err == errno.EFBIG:
        return (
            f"a PYTHON node writes files of at most {_mib(limits.file_bytes)}: "
            "COMPOSER_PYTHON_MAX_FILE_BYTES"
        )
    if err == errno.EMFILE:
        return (
            f"a PYTHON node has at most {limits.open_files} open files: "
            "COMPOSER_PYTHON_MAX_OPEN_FILES"
        )
    if err == errno.EAGAIN:
        return (
            f"if it came from starting a process or thread: a PYTHON node may start at most "
            f"{limits.processes} processes and threads: COMPOSER_PYTHON_MAX_PROCESSES"
        )
    return None


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):g} MiB"
