"""What a log record says about the run it is for, and the ALERT level.

Each record logged inside ``log_context(run_id=…, task_id=…)`` carries those
fields, so one run can be followed across services. ALERT sits above ERROR:
it is for a run that cannot go on by itself (a queue with no worker for too
long, attempts spent, an input that no longer decodes), the one level an
on-call person must be paged for.

Dependency-free on purpose: the SDK logs through it. How records are
written (JSON lines or readable ones) is a process's choice, made at its
entry point by ``composer_service.logs.setup_logging``.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Mapping
from types import MappingProxyType

ALERT = 60
logging.addLevelName(ALERT, "ALERT")

#: The record attributes ``log_context`` may set, in the order formatters print them.
CONTEXT_FIELDS = ("run_id", "task_id", "node_id")

_context: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar(
    "composer_log_context", default=MappingProxyType({})
)


class log_context:  # a function to its callers (lower case), a class for its cost
    """Attach fields (run_id, task_id, node_id) to every record logged inside the block.

    A class, not a ``contextlib.contextmanager``: a worker enters one for every task,
    and the generator one cost 4 % of the W1 bench worker's CPU (py-spy)."""

    __slots__ = ("_fields", "_token")

    def __init__(self, **fields: str | None) -> None:
        self._fields = fields
        self._token: contextvars.Token[Mapping[str, str]] | None = None

    def __enter__(self) -> None:
        merged = {**_context.get(), **{k: v for k, v in self._fields.items() if v is not None}}
        self._token = _context.set(merged)

    def __exit__(self, *exc: object) -> None:
        assert self._token is not None
        _context.reset(self._token)


def alert(logger: logging.Logger, message: str, *args: object) -> None:
    logger.log(ALERT, message, *args)


class ContextFilter(logging.Filter):
    """Copies the current ``log_context`` fields onto each record a handler sees."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in _context.get().items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True
