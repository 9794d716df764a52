"""Run the ``composer`` command in this process, as a shell would, and keep what it printed.

Standard output and error are caught (``output`` holds both, interleaved as a terminal
shows them), the environment is the one given on top of this process's for the call
only, and the exit code is the one the console script would return.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from composer_cli.main import main


@dataclass(frozen=True, slots=True)
class Result:
    exit_code: int
    stdout: str
    stderr: str
    #: stdout and stderr, interleaved as written
    output: str


class _Tee(io.StringIO):
    def __init__(self, both: io.StringIO) -> None:
        super().__init__()
        self._both = both

    def write(self, text: str) -> int:
        self._both.write(text)
        return super().write(text)

    def isatty(self) -> bool:
        return False


@contextlib.contextmanager
def _environment(env: Mapping[str, str | None]) -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in env}
    try:
        for key, value in env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def invoke(
    args: Sequence[str], env: Mapping[str, str | None] | None = None, stdin: str = ""
) -> Result:
    """``composer ARGS`` with ``env`` set (None unsets a variable)."""
    both = io.StringIO()
    out, err = _Tee(both), _Tee(both)
    saved_in = sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        with (
            _environment(env or {}),
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            try:
                code = main(list(args))
            except SystemExit as exc:  # argparse: a usage error (2), or --help (0)
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.stdin = saved_in
    return Result(code, out.getvalue(), err.getvalue(), both.getvalue())
