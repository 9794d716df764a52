"""The transactional outbox: messages written with the state change they announce.

The engine enqueues in the event's transaction and, right after the commit,
publishes what was due at once; it deletes those rows a few milliseconds later,
many commits' at once (``mark_published``).
What that missed (a crash between commit and publish, Redis away) and what is
due later (a retry's backoff, a webhook) the outbox-enqueuer claims, publishes
and deletes in one transaction of its own, so a crash before a delete means a
duplicate publish (harmless: the lease and the attempt fence stop double
execution), never a lost one (docs/architecture.md §4.3).

Webhooks are not published inside a transaction: a receiver may take its
whole timeout to answer, and row locks held that long would hold up every
other claimer. ``lease_outbox`` moves their rows out of reach for a while and
commits; the POSTs go out; a second short transaction deletes or postpones them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from composer_core.templates import Json
from composer_repo._db import Connection, translated
from composer_repo._errors import Invalid, NotFound
from composer_repo._records import NewDispatch, OutboxKind, OutboxMessage, TaskRef
from composer_repo._sql import q

#: The priority of a run whose workflow names none (V026 stores it as NULL).
DEFAULT_PRIORITY = 3


@dataclass(frozen=True, slots=True)
class Enqueued:
    """A dispatch's outbox row: its id, and its run's priority (its band)."""

    outbox_id: int
    priority: int


@translated
async def enqueue_dispatch(
    conn: Connection,
    *,
    run_id: str,
    task_id: str,
    queue: str,
    payload: Json,
    not_before: dt.datetime | None = None,
) -> int:
    """Add a task dispatch for ``queue``, not to be published before ``not_before``
    (a retry's backoff; default: now). Returns the outbox id."""
    ids = await enqueue_dispatches(  # the engine's one statement
        conn, [NewDispatch(run_id, task_id, queue, payload, not_before)]
    )
    return ids[task_id].outbox_id


@translated
async def enqueue_dispatches(
    conn: Connection, dispatches: Sequence[NewDispatch]
) -> dict[str, Enqueued]:
    """``enqueue_dispatch`` for many dispatches (of distinct tasks) in one statement:
    by task id, its outbox id and the priority band its run's priority puts it in (a
    band other than 3 is written into its row's message too)."""
    if not dispatches:
        return {}
    rows = await conn.fetch(q("enqueue_dispatches"), *enqueue_dispatches_args(dispatches))
    return enqueued(rows)


def enqueue_dispatches_args(dispatches: Sequence[NewDispatch]) -> tuple[Any, ...]:
    """The parameters of ``enqueue_dispatches`` (and of ``together`` statements holding it)."""
    return (
        [d.run_id for d in dispatches],
        [d.task_id for d in dispatches],
        [d.queue for d in dispatches],
        [d.payload for d in dispatches],
        [d.not_before for d in dispatches],
    )


def enqueued(rows: Iterable[Any]) -> dict[str, Enqueued]:
    """``enqueue_dispatches``' answer from its rows (id, task id, priority, by position:
    a ``together`` statement's side returns its rows as tuples)."""
    return {
        task_id: Enqueued(outbox_id, DEFAULT_PRIORITY if priority is None else int(priority))
        for outbox_id, task_id, priority in rows
    }


@translated
async def enqueue_webhook(
    conn: Connection, *, run_id: str, url: str, payload: Json, not_before: dt.datetime | None = None
) -> int:
    """Add a run-finished webhook POST to ``url``, with a random delivery id of its own
    (``OutboxMessage.delivery_id``, the same on every retry). Returns the outbox id."""
    outbox_id: int = await conn.fetchval(
        q("enqueue"), "webhook", run_id, None, url, payload, not_before
    )
    return outbox_id


@translated
async def claim_outbox(
    conn: Connection, kind: OutboxKind, *, limit: int = 100, grace: float = 0.0
) -> list[OutboxMessage]:
    """Lock up to ``limit`` due messages of ``kind``, oldest first.

    A message due at once is its committer's to publish: it is claimed only
    once it is ``grace`` seconds old (its committer's publish did not happen).

    Must run inside a transaction: the row locks are what keep a concurrent
    claimer (SKIP LOCKED) off these rows, and they last until that transaction
    ends. Publish, then ``delete_outbox`` (or ``postpone_outbox``), then commit.
    """
    if not conn.is_in_transaction():
        raise Invalid(
            "claim_outbox must run inside a transaction: outside one its row locks end "
            "with the statement and two claimers could publish the same message"
        )
    rows = await conn.fetch(q("claim_outbox"), kind, limit, float(grace))
    return [_message(r) for r in rows]


@translated
async def lease_outbox(
    conn: Connection, kind: OutboxKind, *, limit: int = 100, lease: float
) -> list[OutboxMessage]:
    """Take up to ``limit`` due messages of ``kind``, oldest first, for ``lease`` seconds.

    For a delivery that must not hold row locks (a webhook POST): the rows are
    made due again only ``lease`` seconds from now (the database's clock), so
    once the caller commits, no other claimer takes them while they are out.
    Then ``delete_outbox`` the delivered and ``postpone_outbox`` the failed, in
    a transaction of their own. A lease that runs out (the deliverer died, or
    took longer than ``lease``) makes the message due again: delivered at least
    once, so receivers dedupe on the message's delivery id.
    """
    if lease <= 0:
        raise Invalid(f"lease must be positive, got {lease}")
    rows = await conn.fetch(q("lease_outbox"), kind, limit, float(lease))
    return sorted((_message(r) for r in rows), key=lambda m: (m.next_attempt_at, m.id))


def _message(r: asyncpg.Record) -> OutboxMessage:
    return OutboxMessage(
        id=r["id"],
        kind=r["kind"],
        run_id=r["run_id"],
        task_id=r["task_id"],
        destination=r["destination"],
        payload=r["payload"],
        attempts=r["attempts"],
        next_attempt_at=r["next_attempt_at"],
        created_at=r["created_at"],
        delivery_id=None if r["delivery_id"] is None else str(r["delivery_id"]),
    )


@translated
async def delete_outbox(conn: Connection, ids: Sequence[int]) -> int:
    """Delete published messages; returns how many were deleted."""
    if not ids:
        return 0
    status = await conn.execute(q("delete_outbox"), list(ids))
    return int(status.rsplit(" ", 1)[-1])


@translated
async def postpone_outbox(
    conn: Connection,
    outbox_id: int,
    *,
    delay: float | None = None,
    not_before: dt.datetime | None = None,
    error: str,
) -> int:
    """Publishing failed: keep the message, try again ``delay`` seconds from now by
    the database's clock.

    ``not_before`` is the old form (a Python clock's time, turned into a delay
    here); pass ``delay``. Returns the number of failed attempts so far, for the
    caller's give-up rule.
    """
    if (delay is None) == (not_before is None):
        raise Invalid("postpone_outbox takes delay (seconds), or the older not_before, not both")
    if not_before is not None:
        delay = (not_before - dt.datetime.now(dt.UTC)).total_seconds()
    attempts: int | None = await conn.fetchval(
        q("postpone_outbox"), outbox_id, max(0.0, float(delay or 0.0)), error
    )
    if attempts is None:
        raise NotFound(f"outbox message {outbox_id} does not exist")
    return attempts


@translated
async def mark_published(
    conn: Connection,
    outbox_ids: Sequence[int],
    refs: Sequence[TaskRef],
    *,
    grace: float = 0.0,
    next_due: bool = True,
) -> dt.datetime | None:
    """Dispatches were published: delete their outbox rows, mark their attempts
    QUEUED (those still PENDING), and return when the next dispatch is due for
    the enqueuer (None: none waiting; ``grace`` as for ``claim_outbox``). The
    enqueuer runs it in its claiming transaction; the engine's publisher on its
    own, for the publishes of many commits at once, with ``next_due=False``
    (always None then): it never sleeps on the answer, and finding it
    (``next_outbox_due``) reads every dispatch row of the outbox, dead ones too
    until a vacuum: asked on every flush, it made this the costliest statement of
    a W1 step's share."""
    await conn.execute(
        q("mark_published"),
        list(outbox_ids),
        [r.run_id for r in refs],
        [r.task_id for r in refs],
        [r.attempt for r in refs],
    )
    if not next_due:
        return None
    return await next_outbox_due(conn, "dispatch", grace=grace)


@translated
async def next_outbox_due(
    conn: Connection, kind: OutboxKind, *, grace: float = 0.0
) -> dt.datetime | None:
    """When the earliest message of ``kind`` is due for the enqueuer (None: none
    waiting; ``grace`` as for ``claim_outbox``)."""
    due: dt.datetime | None = await conn.fetchval(q("next_outbox_due"), kind, float(grace))
    return due


@translated
async def outbox_size(conn: Connection) -> dict[OutboxKind, int]:
    """Messages not yet published, by kind (a kind with none is absent)."""
    rows = await conn.fetch(q("outbox_size"))
    return {r["kind"]: r["n"] for r in rows}
