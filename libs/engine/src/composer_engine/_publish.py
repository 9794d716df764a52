"""Publish after commit: the dispatches a transaction committed go to their streams
right after the commit, in one pipeline; their outbox rows are deleted a little
later, off the caller's path, together with those of the commits around them.

The outbox row, written in the transaction, stays the guarantee: if this
process dies between the commit and the publish, or Redis is away, the row is
still there and the outbox-enqueuer publishes it once it is older than its
grace period. So a lost publish costs delay, never a task; a publish whose row
deletion is late costs nothing (the enqueuer leaves a row alone for its grace
period, seconds, and the deletion waits milliseconds), and one whose deletion
is lost (a crash, a failed flush) costs a duplicate message, which the lease
makes harmless (docs/architecture.md §4.3).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import composer_queue as cq
import composer_repo as repo

log = logging.getLogger("composer.engine")

#: How long a published row waits for others before the deletion goes (seconds) …
FLUSH_DELAY = 0.005
#: … unless this many are waiting.
FLUSH_ROWS = 512


@dataclass(frozen=True, slots=True)
class Dispatched:
    """A committed dispatch due at once: its outbox row and its stream message."""

    outbox_id: int
    queue: str
    ref: repo.TaskRef
    fields: dict[str, str]


def band(fields: dict[str, str]) -> int:
    """The priority band a message goes to: its run's priority, written into it when it
    is not the default (docs/architecture.md §4.16); one unreadable goes to band 3."""
    try:
        return int(fields.get(cq.PRIORITY, cq.DEFAULT_BAND))
    except ValueError:
        return cq.DEFAULT_BAND


class Publisher:
    """Publishes committed dispatches and deletes their outbox rows in batches.

    Why the deletion is not on the caller's path: it is a statement and a commit
    of its own per transaction, paid before the worker's report is answered, for
    a row that only matters if this process dies. Gathered across commits it is
    one statement every ``flush_delay`` seconds (or ``flush_rows`` rows) at most.
    """

    def __init__(
        self,
        pool: repo.Pool,
        queue: cq.Queue,
        prefix: str,
        shards: int,
        *,
        flush_delay: float = FLUSH_DELAY,
        flush_rows: int = FLUSH_ROWS,
    ) -> None:
        self.pool = pool
        self.queue = queue
        self.prefix = prefix
        self.shards = shards
        self._flush_delay = flush_delay
        self._flush_rows = flush_rows
        #: Published, their rows not yet deleted.
        self._published: list[Dispatched] = []
        self._due = asyncio.Event()
        #: Runs while deletions are pending, ends when none are (started by a publish).
        self._flusher: asyncio.Task[None] | None = None

    async def __call__(self, dispatched: Sequence[Dispatched]) -> None:
        """Publish ``dispatched`` and have their outbox rows deleted soon; a failure is
        logged and left to the outbox-enqueuer, never raised (the transaction has committed)."""
        if not dispatched:
            return
        try:
            await self.publish_now(dispatched)
        except cq.QueueError as exc:
            log.warning(
                "publishing %d committed dispatch(es) failed (%s): the outbox-enqueuer "
                "publishes them after its grace period",
                len(dispatched),
                exc,
            )
            return
        self.forget(dispatched)

    def forget(self, dispatched: Sequence[Dispatched]) -> None:
        """Have the outbox rows of ``dispatched`` deleted soon without publishing them:
        published already, or leased with the report that dispatched them
        (engine/_reports.py), so no stream entry is needed."""
        if not dispatched:
            return
        self._published.extend(dispatched)
        if len(self._published) >= self._flush_rows:
            self._due.set()
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush_while_pending(), name="outbox-flusher")

    async def publish_now(self, dispatched: Sequence[Dispatched]) -> None:
        """XADD ``dispatched`` to their sharded streams in one pipeline, and nothing
        else: the outbox-enqueuer's fallback (engine/_outbox.py) deletes their rows in
        the transaction that claimed them. Raises cq.QueueError when Redis fails."""
        entries = [
            (
                cq.task_stream(self.prefix, d.queue, d.ref.task_id, self.shards, band(d.fields)),
                d.fields,
            )
            for d in dispatched
        ]
        await self.queue.publish(entries)

    async def aclose(self) -> None:
        """Delete the rows of everything published so far, now (a service stopping)."""
        self._due.set()
        if self._flusher is not None:
            await asyncio.shield(self._flusher)

    async def _flush_while_pending(self) -> None:
        try:
            while self._published:
                if len(self._published) < self._flush_rows:
                    wake = asyncio.get_running_loop().call_later(self._flush_delay, self._due.set)
                    await self._due.wait()
                    wake.cancel()
                self._due.clear()
                await self._flush()
        finally:
            self._flusher = None

    async def _flush(self) -> None:
        published, self._published = self._published, []
        try:
            async with repo.connection(self.pool) as conn:
                await repo.mark_published(
                    conn,
                    [d.outbox_id for d in published],
                    [d.ref for d in published],
                    next_due=False,
                )
        except repo.RepoError as exc:
            log.warning(
                "deleting the outbox rows of %d published dispatch(es) failed (%s): the "
                "outbox-enqueuer publishes them again after its grace period (a duplicate "
                "message, refused a second lease)",
                len(published),
                exc,
            )
        except Exception:  # a bug; the rows stay for the enqueuer, and the flusher goes on
            log.exception(
                "deleting the outbox rows of %d published dispatch(es) failed", len(published)
            )
