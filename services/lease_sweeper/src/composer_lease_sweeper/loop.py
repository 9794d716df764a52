"""Recovery: nothing is ever stuck (seed 004, DESIGN.md §1).

Each sweep does four things, in this order:

(a) Expired leases. A RUNNING attempt whose worker stopped renewing its lease
    (the worker died, or lost the database) becomes a failed attempt, "lease
    expired", and its retry policy decides what follows. Fenced: the engine
    applies the failure only if, under the run lock and a lock on the task row,
    the same owner still holds the lease and it is still expired, so a lease
    renewed (or taken over) since the sweeper looked is left alone.

(c) Stream entries stuck on dead consumers. An entry delivered to a worker
    that neither acknowledged it nor has touched it for longer than the lease
    TTL is claimed back with XAUTOCLAIM. What it still means is read from the
    task row: if the attempt is still waiting for a worker (PENDING/QUEUED) it
    is delivered again (added anew, since workers read only new entries, and
    the old entry deleted); otherwise (RUNNING: the lease covers it now;
    finished; a later attempt) it is acknowledged away.

(d) Poison tasks. Every redelivery counts up the entry's ``deliveries`` field;
    an attempt delivered ``max_deliveries`` times with no result (each worker
    that took it died before leasing it) fails for good with that reason
    instead of being delivered forever.

(b) Lost dispatches. A PENDING/QUEUED attempt due for dispatch longer ago
    than a threshold, with no outbox row (so it was published) and no entry
    in its stream (so the publish was lost: Redis restarted empty, or was
    flushed), is dispatched again under the same attempt. A duplicate is
    harmless: only one worker gets the lease.

One replica sweeps at a time (a PostgreSQL advisory lock per Redis prefix,
held for the sweep; a replica that does not get it skips its turn), so two
sweepers never redeliver or redispatch the same attempt twice over; each
step is also fenced on its own, so a sweep that dies halfway is harmless.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime as dt
import functools
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from typing import Any

from opentelemetry.metrics import CallbackOptions, Counter, ObservableGauge, Observation
from redis.exceptions import RedisError, ResponseError

import composer_repo as repo
from composer_common import streams
from composer_common.logs import alert
from composer_common.telemetry import meter
from composer_core.model import TaskState
from composer_engine import Engine, EngineError, Unavailable, utcnow
from composer_service import sleep_or_stop

log = logging.getLogger("composer.sweeper")

#: The consumer that reclaimed entries belong to while the sweeper decides on them.
CONSUMER = "composer-lease-sweeper"
#: Stream field: how many times this attempt was delivered (absent: once).
DELIVERIES = "deliveries"
#: A stream longer than this is not searched for a lost dispatch's entry in one sweep;
#: its candidates are taken as live (a huge backlog is not a lost one).
MAX_SCAN = 100_000
_WAITING_FOR_WORKER = (TaskState.PENDING, TaskState.QUEUED)


@dataclass
class SweepReport:
    """What one sweep (or all of them, in ``Sweeper.totals``) did."""

    #: (a) attempts failed because their lease expired.
    expired: int = 0
    #: (b) attempts dispatched again because their dispatch was lost.
    redispatched: int = 0
    #: (c) stream entries delivered again, and entries acknowledged away.
    redelivered: int = 0
    acked: int = 0
    #: (d) attempts failed for good for being delivered too often.
    given_up: int = 0

    def add(self, other: SweepReport) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))


@dataclass
class Sweeper:
    engine: Engine
    redis: Any
    prefix: str = "composer"
    shards: int = streams.DEFAULT_SHARDS
    interval_seconds: float = 5.0
    lease_ttl: float = 30.0
    lost_after: float = 60.0
    max_deliveries: int = 10
    batch_size: int = 200
    clock: Callable[[], dt.datetime] = utcnow

    def __post_init__(self) -> None:
        self.totals = SweepReport()
        #: Sweeps this replica ran (it skips its turn while another replica sweeps).
        self.sweeps = 0
        #: Streams seen with waiting entries and no consumer: since when, and already alerted.
        self._unserved: dict[str, dt.datetime] = {}
        self._alerted: set[str] = set()

    async def run(self, stop: asyncio.Event) -> None:
        """Sweep every ``interval_seconds`` until ``stop`` is set."""
        while not stop.is_set():
            try:
                await self.sweep()
            except (repo.Transient, Unavailable, RedisError, OSError) as exc:
                log.warning("sweep failed: %s; next one in %.1fs", exc, self.interval_seconds)
            await sleep_or_stop(stop, self.interval_seconds)

    async def sweep(self) -> SweepReport | None:
        """One sweep, if no other replica is sweeping; None if one is."""
        async with repo.singleton(
            self.engine.pool, f"composer-lease-sweeper:{self.prefix}"
        ) as mine:
            if not mine:
                return None
            report = SweepReport()
            await self._expire_leases(report)
            await self._reclaim_entries(report)
            await self._redispatch_lost(report)
            await self._watch_queues()
        self.sweeps += 1
        self.totals.add(report)
        _record(report)
        if report:
            log.info("sweep: %s", report)
        return report

    async def _watch_queues(self) -> None:
        """Pending counts per stream (a gauge), and an ALERT for a queue nobody serves.

        Entries waiting on a stream whose group has no consumer for longer than
        ``lost_after`` will wait forever: a TASK node's queue with no worker
        deployed, say. Nothing in the engine can fix that, so it is paged for.
        """
        now = self.clock()
        for stream in await self._streams():
            try:
                groups = await self.redis.xinfo_groups(stream)
            except ResponseError:
                continue
            for group in groups:
                if group.get("name") != streams.GROUP:
                    continue
                waiting = int(group.get("lag") or 0) + int(group.get("pending") or 0)
                _PENDING[stream] = waiting
                if waiting and int(group.get("consumers") or 0) == 0:
                    since = self._unserved.setdefault(stream, now)
                    if (
                        now - since
                    ).total_seconds() > self.lost_after and stream not in self._alerted:
                        self._alerted.add(stream)
                        alert(
                            log,
                            "queue stream %s has %d task(s) waiting and no worker has ever read it for "
                            "%.0fs: start a worker for this queue (runs there cannot go on)",
                            stream,
                            waiting,
                            (now - since).total_seconds(),
                        )
                else:
                    self._unserved.pop(stream, None)
                    self._alerted.discard(stream)

    # -- (a) expired leases ----------------------------------------------------

    async def _expire_leases(self, report: SweepReport) -> None:
        async with repo.transaction(self.engine.pool) as conn:
            expired = await repo.expired_leases(conn, limit=self.batch_size)
        for lease in expired:
            try:
                failed = await self.engine.expire_lease(
                    lease.run_id, lease.task_id, lease.node_id, lease.attempt, owner=lease.owner
                )
            except Unavailable:
                raise
            except EngineError as exc:
                log.error("cannot expire the lease of %s: %s", _describe(lease), exc)
                continue
            if failed:
                report.expired += 1
                log.warning(
                    "%s: the lease of %s expired at %s; the attempt failed and its retry "
                    "policy decides",
                    _describe(lease),
                    lease.owner,
                    lease.expired_at.isoformat(timespec="milliseconds"),
                )

    # -- (c) and (d): entries pending on dead consumers --------------------------

    async def _reclaim_entries(self, report: SweepReport) -> None:
        for stream in await self._streams():
            start = "0-0"
            while True:
                try:
                    next_id, claimed, _ = await self.redis.xautoclaim(
                        stream,
                        streams.GROUP,
                        CONSUMER,
                        int(self.lease_ttl * 1000),
                        start_id=start,
                        count=self.batch_size,
                    )
                except ResponseError as exc:
                    if "NOGROUP" in str(exc):
                        break  # no worker ever read this stream: nothing is pending
                    raise
                if claimed:
                    await self._settle(stream, claimed, report)
                if next_id == "0-0":
                    break
                start = next_id

    async def _streams(self) -> list[str]:
        pattern = f"{self.prefix}:q:*"
        return sorted(
            [s async for s in self.redis.scan_iter(match=pattern, count=1000, _type="stream")]
        )

    async def _settle(
        self, stream: str, claimed: list[tuple[str, dict[str, str]]], report: SweepReport
    ) -> None:
        """Deliver each claimed entry again, acknowledge it away, or give its task up."""
        entries: list[tuple[str, dict[str, str], streams.TaskMessage]] = []
        for entry_id, data in claimed:
            try:
                entries.append((entry_id, data, streams.TaskMessage.from_fields(data)))
            except ValueError as exc:
                log.error("dropping malformed entry %s on %s: %s", entry_id, stream, exc)
                await self._ack(stream, entry_id)
                report.acked += 1
        async with repo.transaction(self.engine.pool) as conn:
            now = await repo.task_attempts(conn, [(m.run_id, m.task_id) for _, _, m in entries])
        for entry_id, data, msg in entries:
            task = now.get(msg.task_id)
            if task is None or task.attempt != msg.attempt or task.state not in _WAITING_FOR_WORKER:
                # Finished, a later attempt, or RUNNING (its lease covers it now: step a).
                await self._ack(stream, entry_id)
                report.acked += 1
                continue
            deliveries = _deliveries(data)
            if deliveries >= self.max_deliveries:
                await self._give_up(msg, deliveries)
                await self._ack(stream, entry_id)
                report.given_up += 1
                continue
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.xadd(stream, data | {DELIVERIES: str(deliveries + 1)})
                pipe.xack(stream, streams.GROUP, entry_id)
                pipe.xdel(stream, entry_id)
                await pipe.execute()
            report.redelivered += 1
            log.warning(
                "task %s (%s) attempt %d of run %s: its entry sat unacknowledged on a worker "
                "for over %.0fs and nobody leased it; delivered again (delivery %d of at most %d)",
                msg.task_id,
                msg.node_id,
                msg.attempt,
                msg.run_id,
                self.lease_ttl,
                deliveries + 1,
                self.max_deliveries,
            )

    async def _give_up(self, msg: streams.TaskMessage, deliveries: int) -> None:
        reason = (
            f"delivered {deliveries} times without a result (the limit is {self.max_deliveries}, "
            "COMPOSER_SWEEPER_MAX_DELIVERIES): each worker that took it went away before "
            "finishing; check the workers' logs for a crash on this task"
        )
        try:
            failed = await self.engine.report_failed(
                msg.run_id,
                msg.task_id,
                msg.node_id,
                msg.attempt,
                reason,
                code="DELIVERY_LIMIT",
                permanent=True,
            )
        except Unavailable:
            raise
        except EngineError as exc:
            log.error("cannot fail task %s of run %s: %s", msg.task_id, msg.run_id, exc)
            return
        if failed:
            alert(
                log,
                "task %s (%s) attempt %d of run %s failed for good: %s",
                msg.task_id,
                msg.node_id,
                msg.attempt,
                msg.run_id,
                reason,
            )

    async def _ack(self, stream: str, entry_id: str) -> None:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.xack(stream, streams.GROUP, entry_id)
            pipe.xdel(stream, entry_id)
            await pipe.execute()

    # -- (b) lost dispatches -----------------------------------------------------

    async def _redispatch_lost(self, report: SweepReport) -> None:
        older_than = self.clock() - dt.timedelta(seconds=self.lost_after)
        async with repo.transaction(self.engine.pool) as conn:
            candidates = await repo.lost_dispatches(
                conn, older_than=older_than, limit=self.batch_size
            )
        by_stream: dict[str, list[repo.LostDispatch]] = collections.defaultdict(list)
        for d in candidates:
            if d.queue is None:  # pragma: no cover - every dispatched task has a queue
                log.error("task %s of run %s has no queue; cannot dispatch it", d.task_id, d.run_id)
                continue
            shard = streams.shard_of(d.task_id, self.shards)
            by_stream[streams.stream_name(self.prefix, d.queue, shard)].append(d)
        for stream, lost in by_stream.items():
            live = await self._live_attempts(stream, {d.task_id for d in lost})
            if live is None:
                continue
            for d in lost:
                if (d.task_id, d.attempt) in live:
                    continue  # still in its stream: a backlog, or a dead consumer's (step c)
                try:
                    again = await self.engine.redispatch(d.run_id, d.task_id, d.attempt)
                except Unavailable:
                    raise
                except EngineError as exc:
                    log.error("cannot dispatch task %s again: %s", d.task_id, exc)
                    continue
                if again:
                    report.redispatched += 1
                    log.warning(
                        "task %s (%s) attempt %d of run %s: %s since %s with no outbox row and "
                        "no entry in %s; dispatched again",
                        d.task_id,
                        d.node_id,
                        d.attempt,
                        d.run_id,
                        d.state,
                        d.dispatched_at.isoformat(timespec="milliseconds"),
                        stream,
                    )

    async def _live_attempts(
        self, stream: str, task_ids: Iterable[str]
    ) -> set[tuple[str, int]] | None:
        """The (task id, attempt) pairs of ``task_ids`` that have an entry in ``stream``;
        None when the stream is too long to search this sweep."""
        wanted = set(task_ids)
        if await self.redis.xlen(stream) > MAX_SCAN:
            log.warning(
                "%s holds over %d entries: not searched for lost dispatches", stream, MAX_SCAN
            )
            return None
        live: set[tuple[str, int]] = set()
        start = "-"
        while True:
            page = await self.redis.xrange(stream, min=start, max="+", count=1000)
            for _, data in page:
                task_id = data.get("task_id")
                if task_id in wanted:
                    with contextlib.suppress(ValueError):
                        live.add((task_id, int(data.get("attempt", ""))))
            if len(page) < 1000:
                return live
            start = "(" + page[-1][0]


def _deliveries(data: dict[str, str]) -> int:
    try:
        return max(1, int(data.get(DELIVERIES, "1")))
    except ValueError:
        return 1


def _describe(lease: repo.ExpiredLease) -> str:
    return f"task {lease.task_id} ({lease.node_id}) attempt {lease.attempt} of run {lease.run_id}"


#: Entries waiting per stream at the last sweep (read by the gauge's callback).
_PENDING: dict[str, int] = {}


@functools.cache
def _instruments() -> tuple[Counter, ObservableGauge]:
    m = meter()
    actions = m.create_counter(
        "composer_recovery_actions",
        description="Lease-sweeper recoveries, by kind (expired = lease expiries)",
    )

    def pending(options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(count, {"stream": stream}) for stream, count in _PENDING.items()]

    gauge = m.create_observable_gauge(
        "composer_stream_pending",
        callbacks=[pending],
        description="Entries waiting or unacknowledged per queue stream",
    )
    return actions, gauge


def _record(report: SweepReport) -> None:
    actions, _ = _instruments()
    for kind in ("expired", "redispatched", "redelivered", "acked", "given_up"):
        count = getattr(report, kind)
        if count:
            actions.add(count, {"kind": kind})
