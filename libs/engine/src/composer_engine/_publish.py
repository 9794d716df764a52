"""Publish after commit: the dispatches a transaction committed go to their streams
right after the commit, in one pipeline, and their outbox rows are deleted.

The outbox row, written in the transaction, stays the guarantee: if this
process dies between the commit and the publish, or Redis is away, the row is
still there and the outbox-enqueuer publishes it once it is older than its
grace period. So a lost publish costs delay, never a task; a publish whose row
deletion is lost costs a duplicate message, which the lease makes harmless
(docs/architecture.md §4.3).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import composer_queue as cq
import composer_repo as repo

log = logging.getLogger("composer.engine")


@dataclass(frozen=True, slots=True)
class Dispatched:
    """A committed dispatch due at once: its outbox row and its stream message."""

    outbox_id: int
    queue: str
    ref: repo.TaskRef
    fields: dict[str, str]


@dataclass(frozen=True, slots=True)
class Publisher:
    pool: repo.Pool
    queue: cq.Queue
    prefix: str
    shards: int

    async def __call__(self, dispatched: Sequence[Dispatched]) -> None:
        """Publish ``dispatched`` and delete their outbox rows; a failure is logged and
        left to the outbox-enqueuer, never raised (the transaction has committed)."""
        if not dispatched:
            return
        entries = [
            (cq.task_stream(self.prefix, d.queue, d.ref.task_id, self.shards), d.fields)
            for d in dispatched
        ]
        try:
            await self.queue.publish(entries)
        except cq.QueueError as exc:
            log.warning(
                "publishing %d committed dispatch(es) failed (%s): the outbox-enqueuer "
                "publishes them after its grace period",
                len(entries),
                exc,
            )
            return
        try:
            async with repo.connection(self.pool) as conn:
                await repo.mark_published(
                    conn, [d.outbox_id for d in dispatched], [d.ref for d in dispatched]
                )
        except repo.RepoError as exc:
            log.warning(
                "deleting the outbox rows of %d published dispatch(es) failed (%s): the "
                "outbox-enqueuer publishes them again after its grace period (a duplicate "
                "message, refused a second lease)",
                len(dispatched),
                exc,
            )
