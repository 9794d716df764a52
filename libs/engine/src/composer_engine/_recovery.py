"""The recovery policy: what the lease-sweeper does with what it finds, as pure decisions.

The sweeper gathers facts (expired leases and lost dispatches from the
database, claimed entries and live attempts from the queue streams), asks
these functions, and applies the answer through the Engine. Nothing here does
I/O or reads a clock (``now`` is passed in), so every rule is unit-tested
with plain values (tests/unit/engine/test_recovery.py).

Expired leases need no decision here: the database's clock judges expiry
(``repo.expired_leases``) and ``Engine.expire_lease`` fails the attempt only
if, under the run lock, the same owner still holds the expired lease.

A stream entry claimed back after sitting unacknowledged for longer than the
lease TTL (``settle_entry``), with whether the consumer that held it is gone
(its heartbeat ran out: the worker died or froze) or alive:

- its attempt finished, moved on to a later attempt, or is RUNNING (the
  lease covers it now): acknowledged away;
- it is still waiting for a worker and its consumer is alive (the worker
  could not get the lease: the coordinator was unreachable, or refused):
  given back to its stream as it was, its delivery NOT counted — a healthy
  worker never brings a task nearer the limit;
- it is still waiting, its consumer is gone, and it was delivered
  ``max_deliveries`` times already (every worker that took it died before
  leasing it): the attempt fails for good, so a poison task is not
  delivered forever;
- otherwise it is delivered again, its delivery count one higher.

A PENDING/QUEUED attempt whose dispatch is older than ``lost_after`` and has
no outbox row (``repo.lost_dispatches``) is dispatched again, under the same
attempt, unless it still has an entry in its stream (a backlog, or a dead
consumer's entry that ``settle_entry`` handles); a stream too long to search
in one sweep counts as holding every candidate (``lost_dispatch``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection
from dataclasses import dataclass

import composer_repo as repo
from composer_common.codes import ErrorCode
from composer_core.model import TaskState

_WAITING_FOR_WORKER = frozenset({TaskState.PENDING, TaskState.QUEUED})


@dataclass(frozen=True, slots=True)
class RecoveryLimits:
    """The sweeper's thresholds (its settings, passed down as plain values)."""

    #: Seconds an entry may sit unacknowledged on a consumer before the sweeper looks at
    #: it (the workers' lease TTL: a live worker leases or acknowledges well within it,
    #: and a dead one's heartbeat, good for one TTL, has run out by then).
    lease_ttl: float = 30.0
    #: Seconds a dispatched attempt may go without a worker before its dispatch counts
    #: as lost (when its stream entry is gone), and a queue without consumers is paged for.
    lost_after: float = 60.0
    #: Deliveries of one attempt with no result before it fails for good.
    max_deliveries: int = 10
    #: A stream longer than this is not searched for lost dispatches in one sweep.
    max_scan: int = 100_000

    def __post_init__(self) -> None:
        if self.lease_ttl <= 0 or self.lost_after <= 0:
            raise ValueError(
                f"lease_ttl and lost_after must be positive seconds, not "
                f"{self.lease_ttl} and {self.lost_after}"
            )
        if self.max_deliveries < 1 or self.max_scan < 1:
            raise ValueError(
                f"max_deliveries and max_scan must be at least 1, not "
                f"{self.max_deliveries} and {self.max_scan}"
            )


# -- entries claimed back from dead consumers -----------------------------------


@dataclass(frozen=True, slots=True)
class ClaimedEntry:
    """A stream entry claimed back from a consumer: the attempt it carries, how many
    times it was delivered (1 for an entry never redelivered), and whether the
    consumer that held it is gone (no heartbeat) rather than alive and busy."""

    task_id: str
    attempt: int
    deliveries: int
    holder_gone: bool = True


@dataclass(frozen=True, slots=True)
class Acknowledge:
    """Acknowledge the entry away: it no longer means work for a worker."""

    why: str


@dataclass(frozen=True, slots=True)
class Redeliver:
    """Add the entry anew with this delivery count, and acknowledge the old one."""

    deliveries: int


@dataclass(frozen=True, slots=True)
class GiveBack:
    """Add the entry anew as it was (its delivery count unchanged), and acknowledge the
    old one: a live worker left it, which is no delivery lost to a crash."""


@dataclass(frozen=True, slots=True)
class GiveUp:
    """Fail the attempt for good (permanent, with ``code``), then acknowledge the entry."""

    reason: str
    code: str = ErrorCode.DELIVERY_LIMIT


EntryDecision = Acknowledge | Redeliver | GiveBack | GiveUp


def settle_entry(
    entry: ClaimedEntry, task: repo.TaskAttempt | None, limits: RecoveryLimits
) -> EntryDecision:
    """What a claimed entry still means, given where its task stands now (None: gone)."""
    if task is None:
        return Acknowledge("its task no longer exists")
    if task.attempt != entry.attempt:
        return Acknowledge(f"the task moved on to attempt {task.attempt}")
    if task.state not in _WAITING_FOR_WORKER:
        return Acknowledge(f"the attempt is {task.state.value}")
    if not entry.holder_gone:
        return GiveBack()
    if entry.deliveries >= limits.max_deliveries:
        return GiveUp(
            f"delivered {entry.deliveries} times without a result (the limit is "
            f"{limits.max_deliveries}, COMPOSER_SWEEPER_MAX_DELIVERIES): each worker that "
            "took it went away before finishing; check the workers' logs for a crash on "
            "this task"
        )
    return Redeliver(entry.deliveries + 1)


# -- lost dispatches ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Redispatch:
    """Dispatch the attempt again, under the same attempt number (the lease fences a
    duplicate)."""


@dataclass(frozen=True, slots=True)
class Leave:
    """Do nothing this sweep."""

    why: str


DispatchDecision = Redispatch | Leave


def lost_before(now: dt.datetime, limits: RecoveryLimits) -> dt.datetime:
    """Attempts dispatched before this moment, still without a worker, may be lost."""
    return now - dt.timedelta(seconds=limits.lost_after)


def lost_dispatch(
    candidate: repo.LostDispatch, live: Collection[tuple[str, int]] | None
) -> DispatchDecision:
    """Whether a candidate (no worker, no outbox row, dispatched long ago) was lost.

    ``live`` holds the (task id, attempt) pairs that still have an entry in the
    candidate's stream; None when the stream was too long to search, which
    counts as live: a huge backlog is not a lost one.
    """
    if live is None:
        return Leave("its stream is too long to search this sweep")
    if (candidate.task_id, candidate.attempt) in live:
        return Leave("its entry is still in the stream")
    return Redispatch()


# -- queues nobody serves -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Unserved:
    """A queue stream seen with entries waiting and no consumer, since ``since``."""

    since: dt.datetime
    alerted: bool = False


def watch_queue(
    waiting: int,
    consumers: int,
    seen: Unserved | None,
    now: dt.datetime,
    limits: RecoveryLimits,
) -> tuple[Unserved | None, bool]:
    """Track a stream with work waiting and nobody reading it; True once, when it has
    been so for longer than ``lost_after`` (a queue with no worker deployed: nothing
    in the engine can fix it, so it is paged for)."""
    if not waiting or consumers:
        return None, False
    if seen is None:
        seen = Unserved(now)
    if seen.alerted or (now - seen.since).total_seconds() <= limits.lost_after:
        return seen, False
    return Unserved(seen.since, alerted=True), True
