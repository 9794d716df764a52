"""The bulk operations' loop (POST /v1/runs/bulk/cancel and /bulk/retry): it moves
the stored operations on at a bounded rate, beside the sweeps.

It lives here because the lease-sweeper already runs one replica's upkeep at a
time; the work itself is the engine's (``Engine.operations.advance``:
docs/architecture.md §6.7). One replica runs operations at a time (an advisory
lock per Redis prefix, held for a tick), and each tick settles at most
``runs_per_second * interval_seconds`` runs, so a bulk cancel of a million runs
never crowds out the runs still going. The operation's state is all in the
database, so a restart of this service resumes where it stopped.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from composer_common.logs import ALERT
from composer_engine import Engine, Unavailable
from composer_service import sleep_or_stop

log = logging.getLogger("composer.operations")


@dataclass
class OperationRunner:
    engine: Engine
    prefix: str = "composer"
    runs_per_second: float = 20.0
    interval_seconds: float = 1.0

    def __post_init__(self) -> None:
        #: Runs this replica settled (cancelled, retried, skipped or failed).
        self.settled = 0

    @property
    def budget(self) -> int:
        """Runs one tick may settle."""
        return max(1, int(self.runs_per_second * self.interval_seconds))

    async def run(self, stop: asyncio.Event) -> None:
        """Tick every ``interval_seconds`` until ``stop`` is set."""
        while not stop.is_set():
            try:
                await self.tick()
            except Unavailable as exc:
                log.warning("operations: %s; next tick in %.1fs", exc, self.interval_seconds)
            except Exception as exc:  # a bug: say so, and tick again (no crash loop)
                log.log(
                    ALERT,
                    "operations tick failed unexpectedly (%s: %s)",
                    type(exc).__name__,
                    exc,
                    exc_info=True,
                )
            await sleep_or_stop(stop, self.interval_seconds)

    async def tick(self) -> int | None:
        """One tick, if no other replica is running operations; None if one is."""
        async with self.engine.upkeep.sole(f"composer-operations:{self.prefix}") as mine:
            if not mine:
                return None
            settled = await self.engine.operations.advance(budget=self.budget)
        self.settled += settled
        if settled:
            log.info("operations: %d run(s) settled", settled)
        return settled
