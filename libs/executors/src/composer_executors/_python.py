"""The PYTHON node: run a snippet's ``main(input)`` in a separate, limited process.

How the child is set up, and why:

- ``python -I -B -X utf8``: isolated mode ignores PYTHON* variables, the
  user site directory and the current directory on ``sys.path``; no .pyc
  files are written.
- A clean environment (PATH, a UTF-8 locale, HOME and TMPDIR in the work
  directory): nothing of the worker's, so no COMPOSER_* settings, tokens
  or database URLs reach the snippet.
- A fresh temporary working directory, removed afterwards.
- Its own session and process group, killed when main returns, on a
  timeout and on a cancelled attempt, so nothing the snippet started
  outlives it (unless it started a session of its own: see below).
- RLIMIT_AS set in the child before the snippet is compiled: allocating
  past it raises MemoryError, reported as ``memory_limit``.
- Input and result travel as JSON over stdin and a private copy of the
  child's stdout; the snippet's own stdout is pointed at stderr, of which
  only the last 64 KiB is kept and the last lines are quoted in errors.

This is isolation of the *worker* from a snippet's mistakes (a crash, a
leak, an endless loop, a stray print), not a security sandbox: the snippet
runs as the worker's user, can read every file that user can (the
worker's /proc/<pid>/environ included), leave a process behind with
setsid(), open network connections (the HTTP node's SSRF guard does not
apply), and import whatever is installed next to the worker. Run untrusted
code only on
workers that are themselves confined (a container with no secrets mounted,
a read-only filesystem, network policy, a seccomp profile).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from composer_executors._errors import (
    ExecutionTimeout,
    InvalidSpec,
    PythonError,
)
from composer_rpc.codes import ErrorCode

_CHILD_SOURCE = (Path(__file__).parent / "_child.py").read_text(encoding="utf-8")
_STDERR_KEEP_BYTES = 64 * 1024
_STDERR_QUOTE_LINES = 20
_STDERR_QUOTE_CHARS = 2000
_DRAIN_AFTER_EXIT = 1.0  # seconds to collect the pipes once the process group is dead
_PERMANENT = frozenset(
    {ErrorCode.SYNTAX_ERROR, ErrorCode.NO_MAIN, ErrorCode.NOT_JSON, ErrorCode.RESULT_TOO_LARGE}
)


async def run_python(
    spec: Mapping[str, Any],
    *,
    timeout: float,
    memory_limit_bytes: int,
    max_result_bytes: int = 1024 * 1024,
) -> Any:
    """Run ``spec["code"]``'s ``main(spec["input"])`` in a child process; return its result.

    ``input`` defaults to ``{}``. The result must be JSON (dicts, lists,
    strings, finite numbers, booleans, None) and at most
    ``max_result_bytes`` encoded. Raises :class:`ExecutionTimeout` past
    ``timeout`` seconds and :class:`PythonError` for everything the snippet
    did wrong; see the module docstring for what isolation this gives.
    """
    if timeout <= 0:
        raise ValueError(f"timeout must be positive, got {timeout}")
    if memory_limit_bytes <= 0:
        raise ValueError(f"memory_limit_bytes must be positive, got {memory_limit_bytes}")
    payload = _payload(spec)

    work = tempfile.mkdtemp(prefix="composer-python-")
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-I",
            "-B",
            "-X",
            "utf8",
            "-c",
            _CHILD_SOURCE,
            str(memory_limit_bytes),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=work,
            env=_clean_env(work),
            start_new_session=True,
        )
        assert proc.stdin is not None
        assert proc.stdout is not None
        assert proc.stderr is not None
        result = _CappedReader(max_result_bytes)
        stderr = _TailReader(_STDERR_KEEP_BYTES)
        feeding = asyncio.create_task(_feed(proc.stdin, payload), name="python-node-stdin")
        reading = asyncio.create_task(result.read(proc.stdout), name="python-node-result")
        tailing = asyncio.create_task(stderr.read(proc.stderr), name="python-node-stderr")
        pipes = (feeding, reading, tailing)
        timed_out = False
        try:
            async with asyncio.timeout(timeout):
                # The result channel closes when the child exits (the processes it starts
                # do not inherit it). proc.wait() would also wait for every process that
                # still holds stderr open.
                await asyncio.shield(reading)
        except TimeoutError:
            timed_out = True
        finally:
            # Also after a normal exit: whatever the snippet left running would hold the pipes.
            _kill_group(proc.pid)
            if not await _drain(pipes):
                await _close_transport(proc)
            await proc.wait()
        if timed_out:
            raise ExecutionTimeout(
                f"the python code did not finish within {timeout:g} s and was stopped; "
                "make main faster or raise the node's timeout_seconds" + _quote(stderr.text())
            )
    finally:
        # The snippet may have left many files: remove them off the event loop.
        await asyncio.to_thread(shutil.rmtree, work, ignore_errors=True)

    return _outcome(result, stderr.text(), proc.returncode, memory_limit_bytes)


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
        stdin.close()
        await stdin.wait_closed()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the child died before reading; its exit status says why


class _CappedReader:
    """Reads a pipe to its end, keeping at most ``cap`` bytes and noting an overflow."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.data = bytearray()
        self.overflow = False

    async def read(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(64 * 1024):
            if self.overflow:
                continue  # keep draining so the child is never blocked on a full pipe
            self.data += chunk
            if len(self.data) > self.cap:
                self.overflow = True
                self.data.clear()


class _TailReader:
    """Reads a pipe to its end, keeping the last ``keep`` bytes."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.chunks: deque[bytes] = deque()
        self.size = 0

    async def read(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(64 * 1024):
            self.chunks.append(chunk)
            self.size += len(chunk)
            while self.size - len(self.chunks[0]) >= self.keep:
                self.size -= len(self.chunks.popleft())

    def text(self) -> str:
        return b"".join(self.chunks)[-self.keep :].decode("utf-8", errors="replace")


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


async def _drain(pipes: tuple[asyncio.Task[None], ...]) -> bool:
    """Let the pipe tasks reach EOF; False when a process outside the group holds one open."""
    _, pending = await asyncio.wait(pipes, timeout=_DRAIN_AFTER_EXIT)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pipes, return_exceptions=True)
    return not pending


async def _close_transport(proc: asyncio.subprocess.Process) -> None:
    """Close the pipes a process that escaped the group still holds, so proc.wait() returns.

    Before Python 3.12, wait() also waits for every pipe to close. Process has
    no public close(), hence the private transport. Closing before the child
    watcher has the exit status would make the transport reap the child itself
    (and the watcher report 255), so wait for the status first.
    """
    deadline = asyncio.get_running_loop().time() + _DRAIN_AFTER_EXIT
    # No event announces the exit status before the pipes close: poll, on this rare path only.
    while proc.returncode is None and asyncio.get_running_loop().time() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.01)
    transport = getattr(proc, "_transport", None)
    if transport is not None:
        transport.close()


def _quote(stderr: str) -> str:
    lines = stderr.rstrip().splitlines()[-_STDERR_QUOTE_LINES:]
    text = "\n".join(lines)
    if len(text) > _STDERR_QUOTE_CHARS:
        text = "…" + text[-_STDERR_QUOTE_CHARS:]
    return f"\nstderr (last lines):\n{text}" if text else ""


def _outcome(result: _CappedReader, stderr: str, returncode: int | None, memory_limit: int) -> Any:
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


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):g} MiB"
