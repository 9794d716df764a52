"""The outbox's fallback: what the outbox-enqueuer does with rows their committer
did not handle (docs/architecture.md §4.3).

Dispatches: claim the due rows (FOR UPDATE SKIP LOCKED, a row due at once only
once it is ``grace`` seconds old), publish them through the same publisher the
committers use (``_publish.Publisher.publish_now``), then, in the same
transaction, delete the rows and mark the tasks QUEUED. A Redis failure rolls
it all back (Unavailable): nothing is lost, the loop backs off. A row that
cannot be turned into a message is set aside for ``park_seconds`` with the
error, and the others go out.

Webhooks: leased (no row lock held while a receiver answers), then settled in a
short transaction of their own.

Each call is tried once: the loop that calls it owns the backoff.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from dataclasses import dataclass

import composer_queue as cq
import composer_repo as repo
from composer_engine._publish import Dispatched
from composer_engine._shell import Shell
from composer_engine._tx import Tx
from composer_engine.errors import Unavailable


@dataclass(frozen=True, slots=True)
class SetAside:
    """A dispatch row that cannot be published, set aside with ``error``."""

    message: repo.OutboxMessage
    error: str


@dataclass(frozen=True, slots=True)
class FallbackPass:
    """What one pass of the fallback did."""

    claimed: int
    published: list[repo.OutboxMessage]
    set_aside: list[SetAside]
    #: When the next dispatch is due (None: none waiting, or a full batch: look again).
    next_due: dt.datetime | None


class Outbox:
    """The fallback publisher of dispatches, and the webhooks' rows."""

    def __init__(self, shell: Shell) -> None:
        self._shell = shell

    async def publish_due(self, *, limit: int, grace: float, park_seconds: float) -> FallbackPass:
        """Publish one batch of due dispatches (at most ``limit``)."""
        publisher = self._shell.publish
        if publisher is None:
            raise RuntimeError("the outbox fallback needs an engine with Redis")

        async def attempt(tx: Tx) -> FallbackPass:
            messages = await repo.claim_outbox(tx.conn, "dispatch", limit=limit, grace=grace)
            if not messages:
                next_due = await repo.next_outbox_due(tx.conn, "dispatch", grace=grace)
                return FallbackPass(0, [], [], next_due)
            good: list[repo.OutboxMessage] = []
            dispatched: list[Dispatched] = []
            set_aside: list[SetAside] = []
            for m in messages:
                try:
                    fields = {str(k): str(v) for k, v in m.payload.items()}
                    message = cq.TaskMessage.from_fields(fields)  # what a worker will read
                    # (a message names the attempt only: mark_published needs no node)
                    ref = repo.TaskRef(m.run_id, message.task_id, "", message.attempt)
                except Exception as exc:
                    error = f"cannot be published: {type(exc).__name__}: {exc}"
                    await repo.postpone_outbox(tx.conn, m.id, delay=park_seconds, error=error)
                    set_aside.append(SetAside(m, error))
                    continue
                good.append(m)
                dispatched.append(Dispatched(m.id, m.destination, ref, fields))
            if dispatched:
                try:
                    await publisher.publish_now(dispatched)
                except cq.QueueError as exc:  # all rolls back: nothing is lost
                    raise Unavailable(f"publishing the outbox failed: {exc}") from exc
            next_due = await repo.mark_published(
                tx.conn, [m.id for m in good], [d.ref for d in dispatched], grace=grace
            )
            if len(messages) >= limit:
                next_due = None  # a full batch: look again at once
            return FallbackPass(len(messages), good, set_aside, next_due)

        return await self._shell.in_tx(attempt, attempts=1)

    async def lease_webhooks(
        self, *, limit: int, lease: float
    ) -> tuple[list[repo.OutboxMessage], dt.datetime | None]:
        """Lease up to ``limit`` due webhooks for ``lease`` seconds (the lease commits
        before any POST); with none due, when the next one is."""

        async def attempt(tx: Tx) -> tuple[list[repo.OutboxMessage], dt.datetime | None]:
            messages = await repo.lease_outbox(tx.conn, "webhook", limit=limit, lease=lease)
            if messages:
                return messages, None
            return [], await repo.next_outbox_due(tx.conn, "webhook")

        return await self._shell.in_tx(attempt, attempts=1)

    async def settle_webhooks(
        self, done: list[int], retry: list[tuple[int, float, str]]
    ) -> dt.datetime | None:
        """Delete the rows of ``done`` webhooks (delivered or given up), postpone each
        of ``retry`` (id, delay in seconds, error); when the next webhook is due."""

        async def attempt(tx: Tx) -> dt.datetime | None:
            await repo.delete_outbox(tx.conn, done)
            for outbox_id, delay, error in retry:
                # NotFound: its lease ran out and another replica delivered it meanwhile
                with contextlib.suppress(repo.NotFound):
                    await repo.postpone_outbox(tx.conn, outbox_id, delay=delay, error=error)
            return await repo.next_outbox_due(tx.conn, "webhook")

        return await self._shell.in_tx(attempt, attempts=1)
