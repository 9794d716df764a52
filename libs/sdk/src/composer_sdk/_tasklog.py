"""Task logs: what one attempt logged, kept for its report.

A handler's ``ctx.logger`` is a :class:`TaskLogger`: a ``logging.Logger`` whose
records are kept, formatted one line each, for the attempt it belongs to, and
then passed on to the process's own logging as ``composer.task.<queue>`` (as
before there were task logs, so what a worker's log showed it still shows).
The built-in PYTHON node writes the lines its code printed with
:meth:`TaskLogger.write`. The lines go with the attempt's report, failed or not,
and are stored with it (docs/architecture.md, "Task logs"); an attempt whose
lease was lost reports nothing, so its lines are gone.

Bounded per attempt (``WorkerConfig.log_max_bytes``, ``log_max_lines``): the
first lines are kept, the rest only counted, and a last marker line says how
many were dropped ("… 123 lines truncated").
"""

from __future__ import annotations

import logging
import time
from typing import Final

DEFAULT_MAX_BYTES: Final = 64 * 1024
DEFAULT_MAX_LINES: Final = 1000
#: A longer line is cut here (one line must not take an attempt's whole budget).
MAX_LINE_CHARS: Final = 4096


def marker(truncated: int) -> str:
    """The line that stands for the lines dropped past the bound."""
    return f"… {truncated} lines truncated"


def storable(line: str) -> str:
    """``line`` as PostgreSQL and protobuf take it: a NUL (which TEXT refuses) and a
    lone surrogate (which is no UTF-8) become U+FFFD."""
    if "\x00" in line:
        line = line.replace("\x00", "\ufffd")
    try:
        line.encode()
    except UnicodeEncodeError:
        line = "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in line)
    return line


class AttemptLines:
    """The lines of one attempt: the first ones up to the bound, then a count."""

    __slots__ = ("_lines", "_size", "max_bytes", "max_lines", "truncated")

    def __init__(
        self, *, max_bytes: int = DEFAULT_MAX_BYTES, max_lines: int = DEFAULT_MAX_LINES
    ) -> None:
        if max_bytes < 0 or max_lines < 0:
            raise ValueError(
                f"task log bounds must not be negative (got {max_bytes} bytes, {max_lines} lines)"
            )
        self.max_bytes = max_bytes
        self.max_lines = max_lines
        self._lines: list[str] = []
        self._size = 0
        #: Lines dropped past the bound.
        self.truncated = 0

    def write(self, text: str) -> None:
        """Keep ``text``, one line per line it holds."""
        for line in text.splitlines() or [""]:
            self._add(line)

    def _add(self, line: str) -> None:
        if self.truncated:  # once one is dropped, every later one is: the kept lines
            self.truncated += 1  # stay the attempt's beginning, in order
            return
        if len(line) > MAX_LINE_CHARS:
            line = line[:MAX_LINE_CHARS] + " …(line cut)"
        line = storable(line)
        size = len(line.encode()) + 1
        if len(self._lines) >= self.max_lines or self._size + size > self.max_bytes:
            self.truncated = 1
            return
        self._lines.append(line)
        self._size += size

    def lines(self) -> tuple[str, ...]:
        """The lines kept, then the marker when some were dropped."""
        if self.truncated:
            return (*self._lines, marker(self.truncated))
        return tuple(self._lines)


#: One line of an attempt's log. Shared: a formatter holds no state of a record's,
#: and building one (and a handler, with its lock) for each attempt cost 5 % of the
#: W1 bench worker's CPU (py-spy).
_LINE = logging.Formatter("%(asctime)s.%(msecs)03dZ %(levelname)s %(message)s", "%Y-%m-%dT%H:%M:%S")
_LINE.converter = time.gmtime
#: Reports a record that could not be formatted as any handler would (stderr).
_ERRORS = logging.Handler()


class TaskLogger(logging.Logger):
    """``ctx.logger``: a logger whose records (INFO and up unless its level is changed)
    the attempt keeps for its report; each also goes to the process's logging, as
    ``forward``'s would."""

    def __init__(self, forward: logging.Logger, lines: AttemptLines) -> None:
        super().__init__(forward.name, logging.INFO)
        # Not registered with logging's manager (one per attempt, gone with it) and not
        # propagating: ``handle`` hands each record to ``forward`` only when its level
        # lets it, so the process's log shows what it showed before.
        self.propagate = False
        self.attempt_lines = lines
        self.forward = forward

    def handle(self, record: logging.LogRecord) -> None:
        """Keep ``record`` as a line of the attempt, hand it to the process's logger,
        then to the handlers added to this one (none unless the handler added some)."""
        if self.disabled:
            return
        kept = self.filter(record)
        if not kept:
            return
        if isinstance(kept, logging.LogRecord):  # a filter may hand back another record
            record = kept
        try:
            self.attempt_lines.write(_LINE.format(record))
        except Exception:
            _ERRORS.handleError(record)
        if self.forward.isEnabledFor(record.levelno):
            self.forward.handle(record)
        if self.handlers:
            self.callHandlers(record)

    def write(self, text: str) -> None:
        """Keep lines the attempt printed (a PYTHON node's output) as they are; they do
        not go to the process's log."""
        self.attempt_lines.write(text)
