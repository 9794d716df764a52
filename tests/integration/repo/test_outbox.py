"""The outbox: due messages only, claimed by one claimer at a time, deleted once published."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid

import pytest

import composer_repo as repo
from composer_core.model import TaskState

from .helpers import new_run, new_worker_task

UTC = dt.UTC


async def drain(conn: repo.Connection) -> None:
    """Empty the outbox so a test sees only its own messages."""
    async with conn.transaction():
        for kind in ("dispatch", "webhook"):
            while batch := await repo.claim_outbox(conn, kind, limit=1000):
                await repo.delete_outbox(conn, [m.id for m in batch])


async def test_claim_returns_due_messages_oldest_first(conn: repo.Connection) -> None:
    await drain(conn)
    run_id = await new_run(conn)
    a = await new_worker_task(conn, run_id, "a")
    b = await new_worker_task(conn, run_id, "b")
    later = dt.datetime.now(UTC) + dt.timedelta(hours=1)
    first = await repo.enqueue_dispatch(
        conn,
        run_id=run_id,
        task_id=a.task_id,
        queue="http",
        payload={"task_id": a.task_id, "attempt": 0},
    )
    await repo.enqueue_dispatch(
        conn,
        run_id=run_id,
        task_id=b.task_id,
        queue="http",
        payload={"task_id": b.task_id},
        not_before=later,
    )
    hook = await repo.enqueue_webhook(
        conn, run_id=run_id, url="https://example.com/h", payload={"status": "SUCCEEDED"}
    )

    async with conn.transaction():
        dispatches = await repo.claim_outbox(conn, "dispatch")
        webhooks = await repo.claim_outbox(conn, "webhook")
        assert await repo.delete_outbox(conn, [m.id for m in dispatches + webhooks]) == 2

    assert [(m.id, m.destination, m.payload) for m in dispatches] == [
        (first, "http", {"task_id": a.task_id, "attempt": 0})
    ]
    assert [(m.id, m.destination, m.task_id) for m in webhooks] == [
        (hook, "https://example.com/h", None)
    ]
    # a webhook's delivery id is random, made once (V013); a dispatch has none
    assert [m.delivery_id for m in dispatches] == [None]
    assert webhooks[0].delivery_id is not None
    assert uuid.UUID(webhooks[0].delivery_id).version == 4
    assert await repo.next_outbox_due(conn, "dispatch") == later  # the backoff row waits
    async with conn.transaction():
        assert await repo.claim_outbox(conn, "dispatch") == []


async def test_two_concurrent_claimers_never_get_the_same_row(pool: repo.Pool) -> None:
    async with pool.acquire() as conn:
        await drain(conn)
        run_id = await new_run(conn)
        for i in range(60):
            ref = await new_worker_task(conn, run_id, f"n{i}")
            await repo.enqueue_dispatch(
                conn, run_id=run_id, task_id=ref.task_id, queue="http", payload={"i": i}
            )
    both_hold_a_batch = asyncio.Barrier(2)

    async def claimer() -> list[int]:
        got: list[int] = []
        async with pool.acquire() as conn:
            while True:
                async with conn.transaction():
                    batch = await repo.claim_outbox(conn, "dispatch", limit=7)
                    if not got:
                        # Hold the first batch's locks until the other claimer has one too,
                        # so the claims really overlap.
                        await both_hold_a_batch.wait()
                    if not batch:
                        return got
                    await repo.delete_outbox(conn, [m.id for m in batch])
                got.extend(m.id for m in batch)

    first, second = await asyncio.gather(claimer(), claimer())

    assert first and second
    assert not set(first) & set(second)
    assert len(first) + len(second) == 60


async def test_claim_outside_a_transaction_is_refused(conn: repo.Connection) -> None:
    with pytest.raises(repo.Invalid, match="inside a transaction"):
        await repo.claim_outbox(conn, "dispatch")


async def test_postpone_keeps_the_message_for_later(conn: repo.Connection) -> None:
    await drain(conn)
    run_id = await new_run(conn)
    hook = await repo.enqueue_webhook(conn, run_id=run_id, url="https://h", payload={})
    async with conn.transaction():
        before: dt.datetime = await conn.fetchval("SELECT statement_timestamp()")
        (message,) = await repo.claim_outbox(conn, "webhook")
        attempts = await repo.postpone_outbox(conn, message.id, delay=300, error="HTTP 503")
        after: dt.datetime = await conn.fetchval("SELECT statement_timestamp()")

    assert attempts == 1
    async with conn.transaction():
        assert await repo.claim_outbox(conn, "webhook") == []
    due = await repo.next_outbox_due(conn, "webhook")
    # Five minutes by the database's clock, from the statement that postponed it.
    assert due is not None
    assert before + dt.timedelta(seconds=300) <= due <= after + dt.timedelta(seconds=300)
    with pytest.raises(repo.NotFound):
        await repo.postpone_outbox(conn, hook + 1000, delay=1, error="x")


async def test_outbox_size_counts_unpublished_messages_by_kind(conn: repo.Connection) -> None:
    run_id = await new_run(conn)
    task = await new_worker_task(conn, run_id, "a")
    before = await repo.outbox_size(conn)  # earlier tests leave messages due later

    await repo.enqueue_dispatch(conn, run_id=run_id, task_id=task.task_id, queue="http", payload={})
    await repo.enqueue_webhook(conn, run_id=run_id, url="http://example.com/", payload={})
    await repo.enqueue_webhook(conn, run_id=run_id, url="http://example.com/", payload={})

    after = await repo.outbox_size(conn)
    assert after.get("dispatch", 0) - before.get("dispatch", 0) == 1
    assert after.get("webhook", 0) - before.get("webhook", 0) == 2
    await drain(conn)


async def test_mark_published_deletes_queues_and_tells_the_next_due(
    conn: repo.Connection,
) -> None:
    await drain(conn)  # what is left is not due yet (other tests' backoff rows)
    waiting = (await repo.outbox_size(conn)).get("dispatch", 0)
    run_id = await new_run(conn)
    a = await new_worker_task(conn, run_id, "a")
    b = await new_worker_task(conn, run_id, "b")
    c = await new_worker_task(conn, run_id, "c")
    await repo.acquire_lease(conn, run_id, b.task_id, 0, owner="fast-worker", ttl=30, token="tok")
    later = dt.datetime.now(UTC) + dt.timedelta(minutes=1)  # sooner than any left
    for ref in (a, b):
        await repo.enqueue_dispatch(
            conn, run_id=run_id, task_id=ref.task_id, queue="q", payload={"task_id": ref.task_id}
        )
    await repo.enqueue_dispatch(
        conn, run_id=run_id, task_id=c.task_id, queue="q", payload={}, not_before=later
    )

    async with conn.transaction():
        claimed = await repo.claim_outbox(conn, "dispatch")
        due = await repo.mark_published(conn, [m.id for m in claimed], [a, b])
    async with conn.transaction():
        after = await repo.claim_outbox(conn, "dispatch")
        nothing_left = await repo.mark_published(conn, [], [])

    states = {t.node_id: t.state for t in await repo.get_run_tasks(conn, run_id)}
    assert len(claimed) == 2 and after == []
    assert due == later  # the published rows are gone; the backoff row is next
    assert states == {"a": TaskState.QUEUED, "b": TaskState.RUNNING, "c": TaskState.PENDING}
    assert (await repo.outbox_size(conn))["dispatch"] == waiting + 1
    assert nothing_left == later


async def test_the_publisher_s_mark_published_deletes_and_queues_without_reading_the_rest(
    conn: repo.Connection,
) -> None:
    """``next_due=False`` (the engine's publisher): the same deletion and PENDING →
    QUEUED, no answer, and the rows it was not given stay."""
    await drain(conn)
    run_id = await new_run(conn)
    a = await new_worker_task(conn, run_id, "a")
    b = await new_worker_task(conn, run_id, "b")
    c = await new_worker_task(conn, run_id, "c")
    await repo.acquire_lease(conn, run_id, b.task_id, 0, owner="fast-worker", ttl=30, token="tok")
    ids = [
        await repo.enqueue_dispatch(
            conn, run_id=run_id, task_id=ref.task_id, queue="q", payload={"task_id": ref.task_id}
        )
        for ref in (a, b, c)
    ]
    before = (await repo.outbox_size(conn)).get("dispatch", 0)

    answer = await repo.mark_published(conn, ids[:2], [a, b], next_due=False)

    states = {t.node_id: t.state for t in await repo.get_run_tasks(conn, run_id)}
    assert answer is None
    assert states == {"a": TaskState.QUEUED, "b": TaskState.RUNNING, "c": TaskState.PENDING}
    assert (await repo.outbox_size(conn))["dispatch"] == before - 2
    async with conn.transaction():
        assert [m.id for m in await repo.claim_outbox(conn, "dispatch")] == [ids[2]]
    await drain(conn)


async def test_a_leased_webhook_keeps_its_delivery_id_across_leases(conn: repo.Connection) -> None:
    await drain(conn)
    run_id = await new_run(conn)
    await repo.enqueue_webhook(conn, run_id=run_id, url="https://example.com/h", payload={})
    async with conn.transaction():
        [first] = await repo.lease_outbox(conn, "webhook", lease=60)
        await repo.postpone_outbox(conn, first.id, delay=0, error="503")
    async with conn.transaction():
        [again] = await repo.lease_outbox(conn, "webhook", lease=60)
        await repo.delete_outbox(conn, [again.id])
    assert first.delivery_id is not None and again.delivery_id == first.delivery_id


async def test_a_dispatch_carries_its_run_s_priority_into_its_message(
    conn: repo.Connection,
) -> None:
    """What the engine publishes after the commit and what the outbox-enqueuer publishes
    later (a retry's backoff, a lost publish) name the run's band (docs §4.16)."""
    await drain(conn)
    urgent, plain = await new_run(conn), await new_run(conn)
    await repo.set_run_priority(conn, urgent, 1)
    a = await new_worker_task(conn, urgent, "a")
    b = await new_worker_task(conn, plain, "b")
    later = dt.datetime.now(UTC) + dt.timedelta(hours=1)

    enqueued = await repo.enqueue_dispatches(
        conn,
        [
            repo.NewDispatch(urgent, a.task_id, "q", {"task_id": a.task_id}, later),
            repo.NewDispatch(plain, b.task_id, "q", {"task_id": b.task_id}, later),
        ],
    )

    assert (enqueued[a.task_id].priority, enqueued[b.task_id].priority) == (1, 3)
    rows = await conn.fetch(
        "SELECT task_id, payload FROM outbox WHERE id = ANY($1::bigint[])",
        [e.outbox_id for e in enqueued.values()],
    )
    payloads = {r["task_id"]: r["payload"] for r in rows}
    assert payloads[a.task_id] == {"task_id": a.task_id, "priority": "1"}
    assert payloads[b.task_id] == {"task_id": b.task_id}  # the default band: as before
