"""What every service's entry point does, in one place.

``run(name, settings, serve)`` sets up logging and telemetry, runs ``serve``
until it returns (services return when the stop event from
``stop_on_signals`` is set by SIGTERM or SIGINT) and maps a start-up error
whose message already says what to do (an outdated schema, a missing token)
to exit code 2 with that message, instead of a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable, Coroutine
from typing import Any

from composer_common.logs import setup_logging
from composer_common.settings import CommonSettings
from composer_common.telemetry import setup_telemetry

log = logging.getLogger("composer.service")


class StartupError(Exception):
    """The service cannot start; the message names the fix."""


async def sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds``, or less if ``stop`` is set meanwhile."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


def stop_on_signals() -> asyncio.Event:
    """An event set by SIGTERM or SIGINT (call inside the running loop)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


def run(
    name: str,
    settings: CommonSettings,
    serve: Callable[[], Coroutine[Any, Any, None]],
    *,
    startup_errors: tuple[type[BaseException], ...] = (),
) -> int:
    setup_logging(name, settings.log_level, json_lines=settings.json_logs)
    setup_telemetry(name, otlp_endpoint=settings.otlp_endpoint)
    errors: tuple[type[BaseException], ...] = (StartupError, *startup_errors)
    try:
        asyncio.run(serve())
    except errors as exc:
        log.error("%s cannot start: %s", name, exc)
        return 2
    return 0
