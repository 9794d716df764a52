"""The stop event every service loop watches, set by SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Iterator

SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[asyncio.Event]:
    """An event set by SIGTERM or SIGINT while the block runs (call inside the running
    loop); the handlers are removed after, so a second Ctrl-C then stops the process."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    try:
        yield stop
    finally:
        for sig in SIGNALS:
            loop.remove_signal_handler(sig)


async def sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds``, or less if ``stop`` is set meanwhile."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
