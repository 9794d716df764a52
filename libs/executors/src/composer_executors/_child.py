"""The program the PYTHON executor runs in the child process (``python -I -c <this source>``).

It must stand alone: only the standard library, nothing from the worker.
Protocol: the parent writes ``{"code": str, "input": any}`` as JSON to
stdin and closes it; the child writes exactly one JSON object to the fd
that was its stdout and exits:

- ``{"ok": true, "value": <main's return value>}``
- ``{"ok": false, "code": <error code>, "type": <exception type>, "message": str,
  "traceback": str}``

Before user code runs, fd 1 is pointed at stderr, so ``print()`` and
subprocesses the snippet starts write to stderr and cannot corrupt the
result; the result goes to a private duplicate of the original stdout that
is not inherited by subprocesses.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import linecache
import os
import resource
import sys
import traceback
from typing import Any, NoReturn

FILENAME = "<node code>"


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
    with os.fdopen(result_fd, "w", encoding="utf-8") as out:
        out.write(data)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # the user may have closed or replaced it
            stream.flush()
    # No interpreter shutdown: a thread the snippet left running must not hold the result back.
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
        },
    )


def _main() -> NoReturn:
    memory_limit = int(sys.argv[1])
    result_fd = os.dup(1)  # dup() makes a non-inheritable fd (PEP 446)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))

    request = json.loads(sys.stdin.buffer.read())
    source: str = request["code"]
    linecache.cache[FILENAME] = (len(source), None, source.splitlines(True), FILENAME)

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
