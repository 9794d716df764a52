"""What the background loops read and keep, beside the events they apply
(``_loop_events``): the timer's due waits, the lease-sweeper's expired leases
and lost dispatches, the partition-manager's monthly partitions, the
coordinator's record of worker heartbeats.

Each call is one short transaction, tried once: the loop that calls it owns the
backoff, and an outage reaches it as Unavailable (a statement the database
refuses as invalid, as BadRequest).
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import AsyncIterator, Sequence

import composer_repo as repo
from composer_engine._shell import Shell
from composer_engine._tx import Tx
from composer_engine.errors import Unavailable


class Upkeep:
    """The loops' reads and housekeeping writes."""

    def __init__(self, shell: Shell) -> None:
        self._shell = shell

    # -- the timer -------------------------------------------------------------------

    async def due_waits(self, *, limit: int, now: dt.datetime) -> list[repo.DueWait]:
        """WAIT / WAIT_FOR_EVENT tasks whose wake_at has come (at most ``limit``)."""

        async def read(tx: Tx) -> list[repo.DueWait]:
            return await repo.due_waits(tx.conn, limit=limit, now=now)

        return await self._shell.in_tx(read, attempts=1)

    async def next_wake_at(self) -> dt.datetime | None:
        """When the next wait is due (None: nothing waits on a timer)."""

        async def read(tx: Tx) -> dt.datetime | None:
            return await repo.next_wake_at(tx.conn)

        return await self._shell.in_tx(read, attempts=1)

    async def park_wait(self, run_id: str, task_id: str, *, until: dt.datetime) -> bool:
        """Move a wait that cannot be fired out of the way until ``until``; False when
        it is no longer waiting."""

        async def write(tx: Tx) -> bool:
            return await repo.park_wait(tx.conn, run_id, task_id, until=until)

        return await self._shell.in_tx(write, attempts=1)

    # -- the lease-sweeper ---------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def sole(self, name: str) -> AsyncIterator[bool]:
        """Whether this process is the one holder of ``name`` for the block (a session
        advisory lock); never waits: a replica that does not get it skips its turn."""
        try:
            async with repo.singleton(self._shell.pool, name) as mine:
                yield mine
        except repo.Transient as exc:
            raise Unavailable(f"the database is unavailable: {exc}") from exc

    async def expired_leases(self, *, limit: int) -> list[repo.ExpiredLease]:
        """RUNNING attempts whose lease expired, by the database's clock."""

        async def read(tx: Tx) -> list[repo.ExpiredLease]:
            return await repo.expired_leases(tx.conn, limit=limit)

        return await self._shell.in_tx(read, attempts=1)

    async def lost_dispatches(
        self, *, older_than: dt.datetime, limit: int
    ) -> list[repo.LostDispatch]:
        """PENDING/QUEUED attempts dispatched before ``older_than`` with no outbox row."""

        async def read(tx: Tx) -> list[repo.LostDispatch]:
            return await repo.lost_dispatches(tx.conn, older_than=older_than, limit=limit)

        return await self._shell.in_tx(read, attempts=1)

    async def task_attempts(self, tasks: Sequence[tuple[str, str]]) -> dict[str, repo.TaskAttempt]:
        """Where each (run id, task id) stands; BadRequest when an id is one the
        database cannot hold (a stream entry naming garbage)."""

        async def read(tx: Tx) -> dict[str, repo.TaskAttempt]:
            return await repo.task_attempts(tx.conn, tasks)

        return await self._shell.in_tx(read, attempts=1)

    # -- the partition-manager ----------------------------------------------------------

    async def ensure_partitions(self, *, months_ahead: int) -> int:
        """Create this month's partitions and ``months_ahead`` more; how many were new."""

        async def write(tx: Tx) -> int:
            return await repo.ensure_partitions(tx.conn, months_ahead=months_ahead)

        return await self._shell.in_tx(write, attempts=1)

    async def partitions(self) -> list[str]:
        """The months (YYYYMM) partitioned, oldest first."""

        async def read(tx: Tx) -> list[str]:
            return await repo.list_partitions(tx.conn)

        return await self._shell.in_tx(read, attempts=1)

    async def drop_partitions(self, *, older_than: dt.datetime) -> repo.Dropped:
        """Drop the months that ended before ``older_than`` with no active run."""

        async def write(tx: Tx) -> repo.Dropped:
            return await repo.drop_partitions(tx.conn, older_than=older_than)

        return await self._shell.in_tx(write, attempts=1)

    async def active_runs(self, months: Sequence[tuple[dt.datetime, dt.datetime]]) -> list[int]:
        """For each (start, end) of a month, how many runs it holds are PENDING or RUNNING."""

        async def read(tx: Tx) -> list[int]:
            return [
                await repo.count_active_runs(tx.conn, start=start, end=end) for start, end in months
            ]

        return await self._shell.in_tx(read, attempts=1)

    # -- the coordinator's record of workers -----------------------------------------------

    async def record_heartbeat(self, beat: repo.WorkerBeat) -> bool:
        """Keep a worker's last beat (composer_coordinator.presence)."""

        async def write(tx: Tx) -> bool:
            return await repo.record_worker_heartbeat(tx.conn, beat)

        return await self._shell.in_tx(write, attempts=1)

    async def prune_workers(self, *, unseen_seconds: float) -> int:
        """Forget workers unseen for ``unseen_seconds``; how many."""

        async def write(tx: Tx) -> int:
            return await repo.prune_workers(tx.conn, unseen_seconds=unseen_seconds)

        return await self._shell.in_tx(write, attempts=1)
