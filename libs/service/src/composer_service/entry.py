"""A service's ``main()``: run its ``serve`` coroutine, map a start-up error to exit code 2.

A start-up error is one whose message already names the fix (an outdated
schema, a missing token, a port in use): it is logged as one line, not a
traceback, and the process exits 2 so a supervisor can tell it from a crash.

The loop is uvloop's unless COMPOSER_UVLOOP is false: the services spend much of
their CPU in the event loop and its sockets, which uvloop does in C.

Before anything else the process makes itself non-dumpable (``process.py``):
no child of the same user, a PYTHON node's included, can read its environment
or memory.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from uvloop import new_event_loop as new_uvloop

import composer_repo as repo
from composer_common.process import forbid_dumping
from composer_service.settings import ServiceSettings

log = logging.getLogger("composer.service")


class StartupError(Exception):
    """The service cannot start; the message names the fix."""


def run(
    name: str,
    serve: Callable[[], Coroutine[Any, Any, None]],
    *,
    startup_errors: tuple[type[BaseException], ...] = (),
    uvloop: bool | None = None,
) -> int:
    """``asyncio.run(serve())``, on uvloop's loop if ``uvloop`` (None: as COMPOSER_UVLOOP
    says, default true); 2 on a StartupError, a SchemaError or one of ``startup_errors``."""
    forbid_dumping()
    errors: tuple[type[BaseException], ...] = (StartupError, repo.SchemaError, *startup_errors)
    if uvloop is None:
        uvloop = ServiceSettings().uvloop
    try:
        with asyncio.Runner(loop_factory=new_uvloop if uvloop else None) as runner:
            runner.run(serve())
    except errors as exc:
        if logging.getLogger().handlers:
            log.error("%s cannot start: %s", name, exc)
        else:  # it failed before serving() set up the logs
            print(f"{name} cannot start: {exc}", file=sys.stderr)
        return 2
    return 0
