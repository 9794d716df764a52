"""Faults, injected at random moments while the load runs.

Each kind once per round, in a random order per round, a random gap apart:

- ``kill:<service>``  SIGKILL one replica of that service, restarted after a random delay;
- ``redis-flushall``  every stream, consumer group and hint gone at once;
- ``redis-restart``   Redis stopped (it keeps nothing) and started again on its port;
- ``pg-restart``      PostgreSQL fast shutdown (open transactions rolled back) and start;
- ``sigstop-worker``  a chaos worker frozen for longer than its lease TTL, then resumed:
                      the zombie whose late report must be rejected.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import random
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from tests.chaos.cluster import Cluster, Replica

KILLED = (
    "coordinator",
    "outbox-enqueuer",
    "timer",
    "lease-sweeper",
    "workers",
    "chaos-workers",
    "api-gateway",
    "partition-manager",
)
KINDS = (
    *(f"kill:{s}" for s in KILLED),
    "redis-flushall",
    "redis-restart",
    "pg-restart",
    "sigstop-worker",
)


@dataclass
class Fault:
    kind: str
    at: float
    detail: str = ""


@dataclass
class Injector:
    cluster: Cluster
    rng: random.Random
    #: Seconds between two faults (uniform in this range).
    gap: tuple[float, float] = (2.0, 5.0)
    #: Seconds a killed replica stays down.
    down: tuple[float, float] = (0.5, 3.0)
    injected: list[Fault] = field(default_factory=list)
    _pending: set[asyncio.Task[None]] = field(default_factory=set)
    #: When the last fault's effects ended (the last replica back, the worker thawed).
    ended_at: float = 0.0

    def counts(self) -> dict[str, int]:
        return dict(collections.Counter(f.kind for f in self.injected))

    async def run(self, stop: asyncio.Event, *, rounds: int | None = None) -> None:
        """Inject until ``stop`` is set (after finishing the current fault), or ``rounds``."""
        done = 0
        while rounds is None or done < rounds:
            order = list(KINDS)
            self.rng.shuffle(order)
            for kind in order:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.rng.uniform(*self.gap))
                if stop.is_set():
                    return
                await self.inject(kind)
            done += 1

    async def inject(self, kind: str) -> None:
        c = self.cluster
        fault = Fault(kind, time.time())
        if kind.startswith("kill:"):
            replica = await c.kill(kind.removeprefix("kill:"), self.rng)
            delay = self.rng.uniform(*self.down)
            fault.detail = f"{replica.name}, back after {delay:.1f}s"
            self._later(self._release(replica, delay))
        elif kind == "redis-flushall":
            await c.flush_redis()
        elif kind == "redis-restart":
            down = self.rng.uniform(0.3, 2.0)
            fault.detail = f"down {down:.1f}s"
            await c.restart_redis(down)
        elif kind == "pg-restart":
            began = time.monotonic()
            await c.restart_postgres()
            fault.detail = f"down {time.monotonic() - began:.1f}s"
        elif kind == "sigstop-worker":
            target, busy = await self._busy_worker()
            if target is None:
                fault.detail = "skipped: no live chaos worker"
            else:
                frozen_for = c.timings.lease_ttl * self.rng.uniform(2.5, 3.5)
                fault.detail = f"{target.name} with {busy} task(s) in hand, for {frozen_for:.1f}s"
                c.freeze(target)
                self._later(self._thaw(target, frozen_for))
        else:  # pragma: no cover - KINDS is closed
            raise ValueError(kind)
        self.injected.append(fault)
        self.ended_at = max(self.ended_at, time.time())
        print(f"chaos | fault {len(self.injected):3d}: {kind} {fault.detail}", flush=True)

    async def _busy_worker(self) -> tuple[Replica | None, int]:
        """The live chaos worker running the most handlers (waiting up to 5 s for one
        that runs any): freezing an idle worker would test nothing."""
        deadline = time.monotonic() + 5.0
        while True:
            live = [r for r in self.cluster.of("chaos-workers") if r.alive and not r.frozen]
            if not live:
                return None, 0
            busy = max(live, key=self.cluster.in_flight)
            n = self.cluster.in_flight(busy)
            if n or time.monotonic() > deadline:
                return busy, n
            await asyncio.sleep(0.1)

    def _later(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _release(self, replica: Replica, delay: float) -> None:
        await asyncio.sleep(delay)
        self.cluster.release(replica)
        self.ended_at = max(self.ended_at, time.time())

    async def _thaw(self, replica: Replica, delay: float) -> None:
        await asyncio.sleep(delay)
        self.cluster.thaw(replica)
        self.ended_at = max(self.ended_at, time.time())

    async def settle(self) -> None:
        """Let every pending restart and thaw happen now-ish (they are short)."""
        if self._pending:
            await asyncio.wait(self._pending)
