"""A service's ``main()``: run its ``serve`` coroutine, map a start-up error to exit code 2.

A start-up error is one whose message already names the fix (an outdated
schema, a missing token): it is logged as one line, not a traceback, and the
process exits 2 so a supervisor can tell it from a crash. A port taken by
another process exits 3 (``EXIT_PORT_IN_USE``): restarting cannot free it, so
a supervisor stops rather than loop.

Started by a supervisor (COMPOSER_SUPERVISOR_PID), the process dies with it
(``composer_common.supervised``).

The loop is uvloop's unless COMPOSER_UVLOOP is false: the services spend much of
their CPU in the event loop and its sockets, which uvloop does in C.

The garbage collector is tuned for a long life (``composer_common.gc_tuning``):
what start-up allocated is frozen out of its scans, and the youngest generation
is collected after 10,000 allocations, not 700.

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
from composer_common.gc_tuning import tune_gc
from composer_common.process import forbid_dumping
from composer_common.supervised import die_with_parent
from composer_service.errors import EXIT_PORT_IN_USE, PortInUse, StartupError
from composer_service.settings import ServiceSettings

__all__ = ["StartupError", "run"]

log = logging.getLogger("composer.service")


def run(
    name: str,
    serve: Callable[[], Coroutine[Any, Any, None]],
    *,
    startup_errors: tuple[type[BaseException], ...] = (),
    uvloop: bool | None = None,
) -> int:
    """``asyncio.run(serve())``, on uvloop's loop if ``uvloop`` (None: as COMPOSER_UVLOOP
    says, default true); 2 on a StartupError, a SchemaError or one of ``startup_errors``,
    3 on a PortInUse; 1 when the supervisor that started it is already gone."""
    forbid_dumping()
    settings = ServiceSettings()
    if settings.supervisor_pid is not None and not die_with_parent(
        settings.supervisor_pid, grace=settings.supervisor_grace
    ):
        print(f"{name}: its supervisor (pid {settings.supervisor_pid}) is gone", file=sys.stderr)
        return 1
    errors: tuple[type[BaseException], ...] = (StartupError, repo.SchemaError, *startup_errors)
    if uvloop is None:
        uvloop = settings.uvloop
    tune_gc()
    try:
        with asyncio.Runner(loop_factory=new_uvloop if uvloop else None) as runner:
            runner.run(serve())
    except errors as exc:
        if logging.getLogger().handlers:
            log.error("%s cannot start: %s", name, exc)
        else:  # it failed before serving() set up the logs
            print(f"{name} cannot start: {exc}", file=sys.stderr)
        return EXIT_PORT_IN_USE if isinstance(exc, PortInUse) else 2
    return 0
