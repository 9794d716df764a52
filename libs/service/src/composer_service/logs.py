"""How a service writes its logs: JSON lines for machines, readable lines on a terminal.

Each line carries the service and the ``log_context`` fields
(``composer_common.logs``) of the record, so one run can be followed across
services. Set up once per process, by ``serving()``.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys

from composer_common.logs import CONTEXT_FIELDS, ContextFilter


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
        for key in CONTEXT_FIELDS:
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
    """Configure the root logger, at a service's entry point.

    ``json_lines`` None picks JSON unless stderr is a terminal (COMPOSER_LOG_FORMAT
    can force either; the dev stack asks for human lines).
    """
    handler = logging.StreamHandler(sys.stderr)
    use_json = (not sys.stderr.isatty()) if json_lines is None else json_lines
    handler.setFormatter(JsonFormatter(service) if use_json else HumanFormatter(service))
    handler.addFilter(ContextFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
