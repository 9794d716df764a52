"""Monthly partitions: created ahead, dropped when expired (docs/architecture.md §5).

Runs land in the partition of their UUIDv7's month, and there is no default
partition, so a month must exist before its first run: each pass creates
this month's and ``months_ahead`` more (once at start, then every
``interval_seconds``, daily by default), far ahead of need.

Retention drops whole months, which is instant and leaves no bloat, unlike
DELETE: a month that ended more than ``retention_days`` ago is dropped, with
its tasks, buffered signals and idempotency keys, unless it still has a
PENDING or RUNNING run (a two-month WAIT, say), in which case it is kept and
looked at again next pass. Every pass logs what it dropped, and what it kept
past retention and why.

Several replicas are safe: the SQL functions take a transaction-level
advisory lock, creating is idempotent, and a month is dropped by one of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from composer_common.logs import alert
from composer_engine import Engine, Unavailable

log = logging.getLogger("composer.partitions")


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass(frozen=True, slots=True)
class Outcome:
    """One pass: partition tables created, months (YYYYMM) dropped, and months kept
    past retention with the number of runs still active in each."""

    created: int
    dropped: list[str]
    kept_active: dict[str, int] = field(default_factory=dict)
    #: Months within retention (or every month, with retention off).
    kept_recent: list[str] = field(default_factory=list)
    #: Months past retention the database would not drop, with its reason.
    failed: dict[str, str] = field(default_factory=dict)


@dataclass
class PartitionManager:
    engine: Engine
    months_ahead: int = 3
    retention_days: int = 0
    interval_seconds: float = 86_400.0
    #: After a failed pass, the next one comes this soon (or at the interval, if sooner).
    retry_seconds: float = 60.0
    clock: Callable[[], dt.datetime] = utcnow

    async def run(self, stop: asyncio.Event) -> None:
        """A pass now, then one per interval, until ``stop`` is set."""
        while not stop.is_set():
            wait = self.interval_seconds
            try:
                outcome = await self.maintain()
                if outcome.failed:
                    wait = min(self.interval_seconds, self.retry_seconds)
            except Unavailable as exc:
                wait = min(self.interval_seconds, self.retry_seconds)
                log.warning("partition maintenance failed: %s; retrying in %.0fs", exc, wait)
            except Exception as exc:  # a bug, or the database refusing: stay up, loudly
                wait = min(self.interval_seconds, self.retry_seconds)
                alert(log, "partition maintenance failed (%r); retrying in %.0fs", exc, wait)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait)

    async def maintain(self) -> Outcome:
        """Create the months ahead, then drop the expired ones (retention on)."""
        upkeep = self.engine.upkeep
        created = await upkeep.ensure_partitions(months_ahead=self.months_ahead)
        if created:
            log.info(
                "created %d partition table(s) (this month and %d ahead)",
                created,
                self.months_ahead,
            )
        if self.retention_days <= 0:
            months = await upkeep.partitions()
            log.info(
                "retention is off (COMPOSER_RETENTION_DAYS=0): keeping all %d month(s), %s to %s",
                len(months),
                months[0] if months else "-",
                months[-1] if months else "-",
            )
            return Outcome(created, [], kept_recent=months)

        cutoff = self.clock() - dt.timedelta(days=self.retention_days)
        result = await upkeep.drop_partitions(older_than=cutoff)
        dropped = result.months
        for month, problem in result.failed.items():
            alert(
                log,
                "cannot drop month %s (its runs are past retention): %s; the other months "
                "were handled; fix what the database names, the next pass tries again",
                month,
                problem,
            )
        for month in dropped:
            log.info(
                "dropped month %s: it ended %s, more than %d days ago, with no active runs",
                month,
                month_end(month).date(),
                self.retention_days,
            )
        kept_recent: list[str] = []
        past: list[str] = []
        for month in await upkeep.partitions():
            if month in result.failed:
                continue  # reported above
            if month_end(month) > cutoff:
                kept_recent.append(month)
            else:
                past.append(month)
        counts = await upkeep.active_runs([(month_start(m), month_end(m)) for m in past])
        kept_active = dict(zip(past, counts, strict=True))
        for month, active in kept_active.items():
            log.warning(
                "kept month %s past retention (%d days): %s",
                month,
                self.retention_days,
                f"{active} run(s) still PENDING or RUNNING"
                if active
                else "it had active runs when checked",
            )
        log.info(
            "retention %d days (cut-off %s): dropped %s; kept %d month(s) within retention%s",
            self.retention_days,
            cutoff.date(),
            ", ".join(dropped) or "nothing",
            len(kept_recent),
            f" ({kept_recent[0]} to {kept_recent[-1]})" if kept_recent else "",
        )
        return Outcome(created, dropped, kept_active, kept_recent, result.failed)


def month_start(month: str) -> dt.datetime:
    """The UTC start of a partition's month (``YYYYMM``)."""
    return dt.datetime(int(month[:4]), int(month[4:6]), 1, tzinfo=dt.UTC)


def month_end(month: str) -> dt.datetime:
    """The UTC start of the month after a partition's month."""
    start = month_start(month)
    return start.replace(year=start.year + start.month // 12, month=start.month % 12 + 1)
