"""Logs for every service: JSON lines for machines, readable lines on a terminal.

Each record carries the service and, when set, the run and task it is about
(``log_context(run_id=…, task_id=…)``), so one run can be followed across
services. ALERT sits above ERROR: it is for a run that cannot go on by
itself (a queue with no worker for too long, attempts spent, an input that no
longer decodes), the one level an on-call person must be paged for.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import json
import logging
import sys
from collections.abc import Iterator, Mapping
from types import MappingProxyType

ALERT = 60
logging.addLevelName(ALERT, "ALERT")

_context: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar(
    "composer_log_context", default=MappingProxyType({})
)


@contextlib.contextmanager
def log_context(**fields: str | None) -> Iterator[None]:
    """Attach fields (run_id, task_id, node_id) to every record logged inside the block."""
    merged = {**_context.get(), **{k: v for k, v in fields.items() if v is not None}}
    token = _context.set(merged)
    try:
        yield
    finally:
        _context.reset(token)


def alert(logger: logging.Logger, message: str, *args: object) -> None:
    logger.log(ALERT, message, *args)


class _ContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in _context.get().items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


class JsonFormatter(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "service": self.service,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in ("run_id", "task_id", "node_id"):
            if hasattr(record, key):
                entry[key] = getattr(record, key)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


class HumanFormatter(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__(f"%(asctime)s %(levelname)-5s {service} %(name)s: %(message)s", "%H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        ids = " ".join(
            f"{k}={getattr(record, k)}" for k in ("run_id", "task_id") if hasattr(record, k)
        )
        return f"{line} [{ids}]" if ids else line


def setup_logging(service: str, level: str = "INFO", *, json_lines: bool | None = None) -> None:
    """Configure the root logger once, at a service's entry point.

    ``json_lines`` None picks JSON unless stderr is a terminal (COMPOSER_LOG_FORMAT
    can force either; the dev stack asks for human lines).
    """
    handler = logging.StreamHandler(sys.stderr)
    use_json = (not sys.stderr.isatty()) if json_lines is None else json_lines
    handler.setFormatter(JsonFormatter(service) if use_json else HumanFormatter(service))
    handler.addFilter(_ContextFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
