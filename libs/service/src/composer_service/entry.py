"""A service's ``main()``: run its ``serve`` coroutine, map a start-up error to exit code 2.

A start-up error is one whose message already names the fix (an outdated
schema, a missing token, a port in use): it is logged as one line, not a
traceback, and the process exits 2 so a supervisor can tell it from a crash.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable, Coroutine
from typing import Any

import composer_repo as repo

log = logging.getLogger("composer.service")


class StartupError(Exception):
    """The service cannot start; the message names the fix."""


def run(
    name: str,
    serve: Callable[[], Coroutine[Any, Any, None]],
    *,
    startup_errors: tuple[type[BaseException], ...] = (),
) -> int:
    """``asyncio.run(serve())``; 2 on a StartupError, a SchemaError or one of ``startup_errors``."""
    errors: tuple[type[BaseException], ...] = (StartupError, repo.SchemaError, *startup_errors)
    try:
        asyncio.run(serve())
    except errors as exc:
        if logging.getLogger().handlers:
            log.error("%s cannot start: %s", name, exc)
        else:  # it failed before serving() set up the logs
            print(f"{name} cannot start: {exc}", file=sys.stderr)
        return 2
    return 0
