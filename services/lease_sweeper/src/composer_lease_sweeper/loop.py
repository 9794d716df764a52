"""Recovery: nothing is ever stuck.

Each sweep gathers facts, asks the engine's recovery policy
(``composer_engine._recovery``: pure decisions) what they mean, and applies
the answer through the Engine, in this order:

(a) Expired leases (by the database's clock) are failed, "lease expired";
    the engine fences it under the run lock, and the retry policy decides.
(c, d) Entries that sat unacknowledged on a consumer for longer than the
    lease TTL are claimed back and, by ``settle_entry``, delivered again,
    acknowledged away, or their attempt is given up (delivered too often). A
    delivery counts only when the consumer that held the entry is gone: its
    heartbeat (``Queue.heartbeat``, which SDK workers keep while they run)
    has run out. A live worker's entry is given back to its stream uncounted.
(b) Attempts dispatched long ago with no worker, no outbox row and, by
    ``lost_dispatch``, no entry left in their stream are dispatched again.
And queues with work and no worker are paged for (``watch_queue``).

The streams are reached through a ``composer_queue.Queue`` (tested on its
``FakeQueue``); a Redis or database outage skips one sweep. One bad item never
stops the others: a lease, an entry or a dispatch whose handling raises
unexpectedly gets an ALERT naming its run and is left for the next sweep (an
entry whose task cannot even be looked up, such as one naming an impossible id,
is acknowledged away), and a sweep that fails unexpectedly as a whole is an
ALERT, and the loop goes on. One replica
sweeps at a time (a PostgreSQL advisory lock per Redis prefix, held for the
sweep; a replica that does not get it skips its turn), so two sweepers never
redeliver or redispatch the same attempt twice over; each step is also
fenced on its own, so a sweep that dies halfway is harmless.
"""

from __future__ import annotations

import asyncio
import collections
import datetime as dt
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import composer_queue as cq
from composer_common.logs import ALERT, alert
from composer_engine import (
    Acknowledge,
    BadRequest,
    ClaimedEntry,
    Engine,
    EngineError,
    GiveBack,
    GiveUp,
    Leave,
    Parked,
    RecoveryLimits,
    Redeliver,
    Redispatch,
    Unavailable,
    Unserved,
    lost_before,
    lost_dispatch,
    settle_entry,
    utcnow,
    watch_queue,
)
from composer_engine.records import LostDispatch, TaskAttempt
from composer_lease_sweeper.report import PENDING, SweepReport, record
from composer_service import sleep_or_stop

log = logging.getLogger("composer.sweeper")

#: The consumer that reclaimed entries belong to while the sweeper decides on them.
CONSUMER = "composer-lease-sweeper"

__all__ = ["CONSUMER", "SweepReport", "Sweeper"]


@dataclass
class Sweeper:
    engine: Engine
    queue: cq.Queue
    prefix: str = "composer"
    shards: int = cq.DEFAULT_SHARDS
    interval_seconds: float = 5.0
    lease_ttl: float = 30.0
    lost_after: float = 60.0
    max_deliveries: int = 10
    batch_size: int = 200
    clock: Callable[[], dt.datetime] = utcnow

    def __post_init__(self) -> None:
        self.limits = RecoveryLimits(
            lease_ttl=self.lease_ttl,
            lost_after=self.lost_after,
            max_deliveries=self.max_deliveries,
        )
        self.totals = SweepReport()
        #: Sweeps this replica ran (it skips its turn while another replica sweeps).
        self.sweeps = 0
        #: Streams seen with work waiting and no consumer.
        self._unserved: dict[str, Unserved] = {}

    async def run(self, stop: asyncio.Event) -> None:
        """Sweep every ``interval_seconds`` until ``stop`` is set."""
        while not stop.is_set():
            try:
                await self.sweep()
            except (Unavailable, cq.QueueError) as exc:
                log.warning("sweep failed: %s; next one in %.1fs", exc, self.interval_seconds)
            except Exception as exc:  # a bug: say so, and sweep again (no crash loop)
                log.log(
                    ALERT,
                    "sweep failed unexpectedly (%s: %s); next one in %.1fs",
                    type(exc).__name__,
                    exc,
                    self.interval_seconds,
                    exc_info=True,
                )
            await sleep_or_stop(stop, self.interval_seconds)

    async def sweep(self) -> SweepReport | None:
        """One sweep, if no other replica is sweeping; None if one is."""
        async with self.engine.upkeep.sole(f"composer-lease-sweeper:{self.prefix}") as mine:
            if not mine:
                return None
            report = SweepReport()
            await self._expire_leases(report)
            backlogs = await self._backlogs()
            await self._reclaim_entries(report, backlogs)
            await self._redispatch_lost(report)
            report.released = await self.engine.release_held()
            self._watch_queues(backlogs)
        self.sweeps += 1
        self.totals.add(report)
        record(report)
        if report:
            log.info("sweep: %s", report)
        return report

    # -- (a) expired leases ----------------------------------------------------

    async def _expire_leases(self, report: SweepReport) -> None:
        expired = await self.engine.upkeep.expired_leases(limit=self.batch_size)
        for lease in expired:
            what = (
                f"task {lease.task_id} ({lease.node_id}) attempt {lease.attempt} "
                f"of run {lease.run_id}"
            )
            failed = await _apply(
                f"expire the lease of {what}",
                self.engine.expire_lease(
                    lease.run_id, lease.task_id, lease.node_id, lease.attempt, owner=lease.owner
                ),
            )
            if failed:
                report.expired += 1
                log.warning(
                    "%s: the lease of %s expired at %s; the attempt failed and its retry "
                    "policy decides",
                    what,
                    lease.owner,
                    lease.expired_at.isoformat(timespec="milliseconds"),
                )

    # -- (c) and (d): entries left pending -------------------------------------------

    async def _backlogs(self) -> dict[str, cq.Backlog | None]:
        """What waits on each stream (XINFO GROUPS), read once per sweep: it tells which
        streams hold pending entries to look at, and feeds the queue watch. A stream
        with none pending (most: every priority band but those in use, §4.16) then
        costs one command per sweep, not two."""
        return {
            stream: await self.queue.backlog(stream, ignore_consumer=CONSUMER)
            for stream in await self.queue.streams(self.prefix)
        }

    async def _reclaim_entries(
        self, report: SweepReport, backlogs: dict[str, cq.Backlog | None]
    ) -> None:
        idle_ms = int(self.lease_ttl * 1000)
        # Whether each consumer holding an idle entry is alive, asked once per sweep. The
        # sweeper's own consumer holds only entries a sweep claimed and did not settle
        # (it ended on an outage): no worker took them, so they are not counted.
        alive: dict[str, bool] = {CONSUMER: True}
        for stream, backlog in backlogs.items():
            if backlog is None or backlog.pending == 0:
                # none pending as the sweep began: an entry read since is younger than
                # the lease TTL, and idle ones are all the sweep looks for
                continue
            start = "-"
            while True:
                idle = await self.queue.pending(
                    stream, min_idle_ms=idle_ms, start=start, count=self.batch_size
                )
                if not idle:
                    break
                if unknown := {p.consumer for p in idle} - alive.keys():
                    live = await self.queue.alive(self.prefix, unknown)
                    alive |= {c: c in live for c in unknown}
                gone = {p.entry_id: not alive[p.consumer] for p in idle}
                claimed = await self.queue.claim(
                    stream, CONSUMER, [p.entry_id for p in idle], min_idle_ms=idle_ms
                )
                if claimed:
                    await self._settle(claimed, gone, report)
                if len(idle) < self.batch_size:
                    break
                start = f"({idle[-1].entry_id}"

    async def _settle(
        self, claimed: list[cq.Entry], gone: dict[str, bool], report: SweepReport
    ) -> None:
        """Ask the policy what each claimed entry still means, and do it."""
        done: list[tuple[str, str]] = []  # acknowledged away, in one step at the end
        entries: list[tuple[cq.Entry, cq.TaskMessage]] = []
        for entry in claimed:
            try:
                entries.append((entry, entry.message()))
            except cq.MalformedMessage as exc:
                log.error("dropping entry %s on %s: %s", entry.entry_id, entry.stream, exc)
                done.append(entry.ref)
                report.acked += 1
        try:
            tasks = await self._tasks_of(entries, done, report)
            for entry, msg in entries:
                if entry.ref in done:
                    continue
                try:
                    if await self._settle_one(entry, msg, tasks, gone, report):
                        done.append(entry.ref)
                except (Unavailable, cq.QueueUnavailable):
                    raise  # an outage ends the sweep; the next one sees the entry again
                except Exception as exc:  # a bug: this entry waits for the next look
                    log.log(
                        ALERT,
                        "task %s attempt %d of run %s: settling its entry %s on %s failed "
                        "(%s: %s); it stays pending and is looked at again in %.0fs",
                        msg.task_id,
                        msg.attempt,
                        msg.run_id,
                        entry.entry_id,
                        entry.stream,
                        type(exc).__name__,
                        exc,
                        self.lease_ttl,
                        exc_info=True,
                    )
        finally:
            await self.queue.ack(done)

    async def _tasks_of(
        self,
        entries: list[tuple[cq.Entry, cq.TaskMessage]],
        done: list[tuple[str, str]],
        report: SweepReport,
    ) -> dict[str, TaskAttempt]:
        """Where the entries' tasks stand, in one query; if the database refuses the batch
        (an entry naming an id it cannot hold), one query per entry, and an entry whose
        task cannot be looked up at all is acknowledged away (added to ``done``)."""
        try:
            return await self.engine.upkeep.task_attempts(
                [(m.run_id, m.task_id) for _, m in entries]
            )
        except BadRequest:
            pass  # find which entry, below
        tasks: dict[str, TaskAttempt] = {}
        for entry, msg in entries:
            try:
                tasks |= await self.engine.upkeep.task_attempts([(msg.run_id, msg.task_id)])
            except BadRequest as exc:
                alert(
                    log,
                    "task %r attempt %d of run %r: its entry %s on %s names a task that "
                    "cannot exist (%s); acknowledged away",
                    msg.task_id,
                    msg.attempt,
                    msg.run_id,
                    entry.entry_id,
                    entry.stream,
                    exc,
                )
                done.append(entry.ref)
                report.acked += 1
        return tasks

    async def _settle_one(
        self,
        entry: cq.Entry,
        msg: cq.TaskMessage,
        tasks: dict[str, TaskAttempt],
        gone: dict[str, bool],
        report: SweepReport,
    ) -> bool:
        """Apply the policy's decision on one entry; True if it is to be acknowledged."""
        holder_gone = gone.get(entry.entry_id, True)
        facts = ClaimedEntry(msg.task_id, msg.attempt, entry.deliveries, holder_gone)
        task = tasks.get(msg.task_id)
        node_id = task.node_id if task is not None else "?"
        match settle_entry(facts, task, self.limits):
            case Acknowledge():
                report.acked += 1
                return True
            case GiveUp() as give_up:
                await self._give_up(msg, node_id, give_up)
                report.given_up += 1
                return True
            case GiveBack():
                await self.queue.give_back([entry])
                report.returned += 1
                log.warning(
                    "task %s (%s) attempt %d of run %s: its entry sat unacknowledged on a "
                    "live worker for over %gs and nobody leased it; put back in its stream "
                    "(not counted as a delivery)",
                    msg.task_id,
                    node_id,
                    msg.attempt,
                    msg.run_id,
                    self.lease_ttl,
                )
                return False
            case Redeliver(deliveries=again):
                # The policy counts from entry.deliveries, as redeliver does when
                # it writes the DELIVERIES field: the new entry carries ``again``.
                await self.queue.redeliver(entry)
                report.redelivered += 1
                log.warning(
                    "task %s (%s) attempt %d of run %s: its entry sat unacknowledged on a "
                    "worker that is gone (no heartbeat) for over %gs and nobody leased it; "
                    "delivered again (delivery %d of at most %d)",
                    msg.task_id,
                    node_id,
                    msg.attempt,
                    msg.run_id,
                    self.lease_ttl,
                    again,
                    self.max_deliveries,
                )
                return False

    async def _give_up(self, msg: cq.TaskMessage, node_id: str, decision: GiveUp) -> None:
        failed = await _apply(
            f"fail task {msg.task_id} of run {msg.run_id}",
            self.engine.report_failed(
                msg.run_id,
                msg.task_id,
                node_id,
                msg.attempt,
                decision.reason,
                code=decision.code,
                permanent=True,
            ),
        )
        if failed:
            alert(
                log,
                "task %s (%s) attempt %d of run %s failed for good: %s",
                msg.task_id,
                node_id,
                msg.attempt,
                msg.run_id,
                decision.reason,
            )

    # -- (b) lost dispatches -----------------------------------------------------

    async def _redispatch_lost(self, report: SweepReport) -> None:
        candidates = await self.engine.upkeep.lost_dispatches(
            older_than=lost_before(self.clock(), self.limits), limit=self.batch_size
        )
        by_stream: dict[str, list[LostDispatch]] = collections.defaultdict(list)
        for d in candidates:
            if d.queue is None:  # pragma: no cover - every dispatched task has a queue
                log.error("task %s of run %s has no queue; cannot dispatch it", d.task_id, d.run_id)
                continue
            by_stream[cq.task_stream(self.prefix, d.queue, d.task_id, self.shards)].append(d)
        for stream, lost in by_stream.items():
            try:
                live = await cq.find_attempts(
                    self.queue, stream, {d.task_id for d in lost}, max_scan=self.limits.max_scan
                )
            except cq.QueueUnavailable as exc:
                # a Redis Cluster's master out of reach: its streams wait for it, and the
                # other masters' lost dispatches are still sent again
                log.warning("cannot look for lost dispatches in %s: %s", stream, exc)
                continue
            if live is None:
                log.warning(
                    "%s holds over %d entries: not searched for lost dispatches",
                    stream,
                    self.limits.max_scan,
                )
            for d in lost:
                match lost_dispatch(d, live):
                    case Leave():
                        continue
                    case Redispatch():
                        await self._redispatch(d, stream, report)

    async def _redispatch(self, d: LostDispatch, stream: str, report: SweepReport) -> None:
        again = await _apply(
            f"dispatch task {d.task_id} of run {d.run_id} again",
            self.engine.redispatch(d.run_id, d.task_id, d.attempt),
        )
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

    # -- queues nobody serves ----------------------------------------------------

    def _watch_queues(self, backlogs: dict[str, cq.Backlog | None]) -> None:
        """Pending counts per stream (a gauge), and an ALERT for a queue nobody serves,
        from what waited on each stream as the sweep began.

        The sweeper's own consumer, which XCLAIM registered on each stream it
        claimed entries from, is no worker: it is left out, or it would hide such a queue.
        """
        now = self.clock()
        for stream, backlog in backlogs.items():
            if backlog is None:
                continue
            PENDING[stream] = backlog.waiting
            seen, page = watch_queue(
                backlog.waiting, backlog.consumers, self._unserved.get(stream), now, self.limits
            )
            if seen is None:
                self._unserved.pop(stream, None)
                continue
            self._unserved[stream] = seen
            if page:
                alert(
                    log,
                    "queue stream %s has %d task(s) waiting and no worker in its consumer group "
                    "for %.0fs: start a worker for this queue (runs there cannot go on)",
                    stream,
                    backlog.waiting,
                    (now - seen.since).total_seconds(),
                )


async def _apply(what: str, call: Awaitable[bool]) -> bool:
    """Apply a decision through the engine. A run that cannot take it (deleted, a broken
    definition) is logged and skipped, and anything unexpected is an ALERT, so one run
    cannot stop the rest of the sweep (the next sweep tries it again); a database
    outage (Unavailable) ends the sweep; a run parked for its key (Parked, already an
    ALERT of the engine) is skipped like the first, so it cannot hold up the others."""
    try:
        return await call
    except Parked as exc:
        log.warning("cannot %s now: %s", what, exc)
        return False
    except Unavailable:
        raise
    except EngineError as exc:
        log.error("cannot %s: %s", what, exc)
        return False
    except Exception as exc:
        log.log(
            ALERT,
            "cannot %s (%s: %s); the next sweep tries again",
            what,
            type(exc).__name__,
            exc,
            exc_info=True,
        )
        return False
