"""One process group of services: prefixed, coloured logs; crashed services restarted with
backoff; SIGINT/SIGTERM stops them all (SIGTERM, then SIGKILL after a grace period).

A service exiting with one of the ``fatal`` codes (a port another process holds:
``composer_service.EXIT_PORT_IN_USE``) stops the stack with one line instead:
restarting cannot fix it. Each service is told the supervisor's pid
(COMPOSER_SUPERVISOR_PID) and stops when it dies, even by SIGKILL
(``composer_common.supervised``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from composer_queue import Backoff

_COLOURS = (36, 32, 33, 35, 34, 96, 92, 93, 95, 94)


@dataclass
class Service:
    name: str
    argv: list[str]
    env: Mapping[str, str]
    colour: int = 0
    process: asyncio.subprocess.Process | None = None
    restarts: int = 0
    started_at: float = 0.0
    pumps: list[asyncio.Task[None]] = field(default_factory=list)


class Supervisor:
    def __init__(
        self, *, grace: float = 15.0, width: int = 10, fatal: Mapping[int, str] | None = None
    ) -> None:
        self.services: list[Service] = []
        self.grace = grace
        #: Exit code → what to say when a service exits with it, and stop every service.
        self.fatal = dict(fatal or {})
        #: The fatal exit code that stopped the stack (None: stopped by ``stop()``).
        self.failure: int | None = None
        self._stopping = asyncio.Event()
        self._tty = sys.stdout.isatty()
        self._width = width

    def add(self, name: str, argv: list[str], env: Mapping[str, str]) -> None:
        colour = _COLOURS[len(self.services) % len(_COLOURS)]
        self.services.append(Service(name, argv, env, colour))
        self._width = max(self._width, len(name))

    def say(self, name: str, line: str, colour: int = 0) -> None:
        prefix = f"{name:<{self._width}} |"
        if self._tty and colour:
            prefix = f"\033[{colour}m{prefix}\033[0m"
        sys.stdout.write(f"{prefix} {line}\n")
        sys.stdout.flush()

    def stop(self) -> None:
        self._stopping.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    async def run(self) -> None:
        """Start every service and keep them running until ``stop()``."""
        watchers = [
            asyncio.create_task(self._watch(s), name=f"watch:{s.name}") for s in self.services
        ]
        await self._stopping.wait()
        await self._terminate_all()
        for watcher in watchers:
            watcher.cancel()
        for watcher in watchers:
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

    async def _watch(self, service: Service) -> None:
        backoff = Backoff(1.0, 30.0)
        while not self._stopping.is_set():
            await self._start(service)
            assert service.process is not None
            code = await service.process.wait()
            for pump in service.pumps:
                with contextlib.suppress(asyncio.CancelledError):
                    await pump
            if self._stopping.is_set():
                return
            if code in self.fatal:
                self.failure = code
                self.say(service.name, f"exited with code {code}: {self.fatal[code]}", 31)
                self.stop()
                return
            if time.monotonic() - service.started_at > 60:
                backoff.reset()  # it ran a good while: a fresh failure, not a crash loop
            delay = backoff.next()
            service.restarts += 1
            self.say(
                service.name,
                f"exited with code {code}; restarting in {delay:.0f}s (restart {service.restarts})",
                31,
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)

    async def _start(self, service: Service) -> None:
        watched = {
            "COMPOSER_SUPERVISOR_PID": str(os.getpid()),
            "COMPOSER_SUPERVISOR_GRACE": str(self.grace),
        }
        service.process = await asyncio.create_subprocess_exec(
            *service.argv,
            env={**service.env, **watched},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,  # our Ctrl-C is for us; we stop the children ourselves
        )
        service.started_at = time.monotonic()
        service.pumps = [asyncio.create_task(self._pump(service), name=f"log:{service.name}")]

    async def _pump(self, service: Service) -> None:
        assert service.process is not None and service.process.stdout is not None
        while line := await service.process.stdout.readline():
            self.say(service.name, line.decode(errors="replace").rstrip(), service.colour)

    async def _terminate_all(self) -> None:
        running = [
            s for s in self.services if s.process is not None and s.process.returncode is None
        ]
        for s in running:
            assert s.process is not None
            with contextlib.suppress(ProcessLookupError):
                s.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.grace
        for s in running:
            assert s.process is not None
            try:
                await asyncio.wait_for(s.process.wait(), max(0.1, deadline - time.monotonic()))
            except TimeoutError:
                self.say(s.name, f"did not stop within {self.grace:.0f}s: killing it", 31)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(s.process.pid, signal.SIGKILL)
                await s.process.wait()
        for s in running:
            for pump in s.pumps:
                with contextlib.suppress(asyncio.CancelledError):
                    await pump
