"""Task writes: one task per node, fenced updates, waits, cancel, leases, the loops' queries."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import pytest

import composer_repo as repo
from composer_core.model import NodeType, TaskState

from .helpers import new_run, new_worker_task, rows_read, uuid7

UTC = dt.UTC


#: A retry's due time: any time will do, the tests read it back.
SOON = dt.datetime(2030, 1, 1, tzinfo=UTC)
#: A retry's due time that has passed: the attempt may be leased.
DUE = dt.datetime(2020, 1, 1, tzinfo=UTC)


async def task_row(conn: repo.Connection, ref: repo.TaskRef) -> repo.TaskRecord:
    (task,) = [t for t in await repo.get_run_tasks(conn, ref.run_id) if t.task_id == ref.task_id]
    return task


async def test_a_second_task_for_a_node_is_reported_not_raised(conn: repo.Connection) -> None:
    run_id = await new_run(conn)
    first = await new_worker_task(conn, run_id, "a", input={"n": 1})
    second = await repo.insert_task(
        conn,
        run_id,
        uuid7(),
        "a",
        node_type=NodeType.HTTP,
        state=TaskState.PENDING,
        input={"n": 2},
        queue="http",
    )

    assert second is False

    (task,) = await repo.get_run_tasks(conn, run_id)
    assert (task.task_id, task.input) == (first.task_id, {"n": 1})


async def test_insert_task_stores_every_field(conn: repo.Connection) -> None:
    run_id = await new_run(conn)
    wake = dt.datetime(2030, 1, 1, tzinfo=UTC)
    assert await repo.insert_task(
        conn,
        run_id,
        uuid7(),
        "route",
        node_type=NodeType.SWITCH,
        state=TaskState.COMPLETED,
        output={"x": [1]},
        branches=("b", "c"),
    )
    assert await repo.insert_task(
        conn,
        run_id,
        uuid7(),
        "pay",
        node_type=NodeType.WAIT_FOR_EVENT,
        state=TaskState.WAITING,
        input={"event": "paid"},
        wake_at=wake,
        awaited_signal="paid",
    )
    assert await repo.insert_task(
        conn,
        run_id,
        uuid7(),
        "bad",
        node_type=NodeType.PYTHON,
        state=TaskState.FAILED,
        error="no input",
    )

    tasks = {t.node_id: t for t in await repo.get_run_tasks(conn, run_id)}
    assert tasks["route"].branches == ("b", "c")
    assert tasks["route"].output == {"x": [1]}
    assert tasks["route"].finished_at is not None
    assert (tasks["pay"].state, tasks["pay"].wake_at, tasks["pay"].awaited_signal) == (
        TaskState.WAITING,
        wake,
        "paid",
    )
    assert tasks["pay"].finished_at is None
    assert (tasks["bad"].state, tasks["bad"].error) == (TaskState.FAILED, "no input")


async def test_the_schema_lists_no_node_kinds(conn: repo.Connection) -> None:
    """A node kind is registered in composer_core.kinds alone: a new one needs no
    migration, so no check on the task rows names the types (V014)."""
    checks = await conn.fetch(
        "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
        " WHERE conrelid = 'task_instances'::regclass AND contype = 'c'"
    )
    assert checks, "the state and attempt checks stay"
    assert [c[0] for c in checks if "node_type" in c[0]] == []


async def test_no_task_row_checks_its_run_by_foreign_key(conn: repo.Connection) -> None:
    """A task row is written only by a transaction that holds its run (the start that
    inserted it, or an event that locked it): the foreign key proved that again, row by
    row, at three times the cost of the insert (V028)."""
    keys = await conn.fetch(
        "SELECT conname FROM pg_constraint WHERE contype = 'f'"
        " AND conrelid IN (SELECT 'task_instances'::regclass UNION ALL"
        " SELECT inhrelid FROM pg_inherits WHERE inhparent = 'task_instances'::regclass)"
    )
    assert keys == []


@pytest.mark.parametrize("write", ["complete", "fail", "requeue"])
async def test_fenced_updates_refuse_a_stale_attempt(conn: repo.Connection, write: str) -> None:
    run_id = await new_run(conn)
    ref = await new_worker_task(conn, run_id, input={"n": 1})
    assert await repo.requeue_task(conn, ref, "flaky", not_before=SOON) is not None  # now attempt 1
    stale = ref  # attempt 0

    if write == "complete":
        assert await repo.complete_task(conn, stale, {"late": True}) is None
    elif write == "fail":
        assert await repo.fail_task(conn, stale, "boom") is None
    else:
        assert await repo.requeue_task(conn, stale, "flaky", not_before=SOON) is None

    task = await task_row(conn, ref)
    assert (task.state, task.attempt, task.output) == (TaskState.PENDING, 1, None)


@pytest.mark.parametrize("write", ["complete", "fail", "requeue"])
async def test_fenced_updates_refuse_a_finished_task(conn: repo.Connection, write: str) -> None:
    run_id = await new_run(conn)
    ref = await new_worker_task(conn, run_id)
    assert await repo.complete_task(conn, ref, {"ok": 1}) is not None

    if write == "complete":
        assert await repo.complete_task(conn, ref, {"again": 1}) is None
    elif write == "fail":
        assert await repo.fail_task(conn, ref, "boom") is None
    else:
        assert await repo.requeue_task(conn, ref, "flaky", not_before=SOON) is None

    task = await task_row(conn, ref)
    assert (task.state, task.attempt, task.output, task.error) == (
        TaskState.COMPLETED,
        0,
        {"ok": 1},
        None,
    )


async def test_fenced_updates_refuse_the_wrong_node(conn: repo.Connection) -> None:
    run_id = await new_run(conn)
    ref = await new_worker_task(conn, run_id, "a")
    wrong = dataclasses.replace(ref, node_id="b")
    assert await repo.complete_task(conn, wrong, None) is None
    assert (await task_row(conn, ref)).state is TaskState.PENDING


async def test_complete_and_fail_record_the_outcome(conn: repo.Connection) -> None:
    run_id = await new_run(conn)
    ok = await new_worker_task(conn, run_id, "a")
    bad = await new_worker_task(conn, run_id, "b")

    done = await repo.complete_task(conn, ok, {"status": 200})
    failed = await repo.fail_task(conn, bad, "HTTP 500", error_code="upstream")

    assert done is not None and done.node_type is NodeType.HTTP
    assert failed is not None
    tasks = {t.node_id: t for t in await repo.get_run_tasks(conn, run_id)}
    assert (tasks["a"].state, tasks["a"].output) == (TaskState.COMPLETED, {"status": 200})
    assert (tasks["b"].state, tasks["b"].error, tasks["b"].error_code) == (
        TaskState.FAILED,
        "HTTP 500",
        "upstream",
    )
    assert tasks["a"].finished_at is not None and tasks["b"].finished_at is not None


async def test_requeue_bumps_the_attempt_and_returns_the_stored_input(
    conn: repo.Connection,
) -> None:
    run_id = await new_run(conn)
    ref = await new_worker_task(conn, run_id, input={"url": "https://example.com"}, queue="http")
    lease = await repo.acquire_lease(conn, run_id, ref.task_id, 0, owner="w1", ttl=30, token="tok")
    assert lease is not None
    due = dt.datetime.now(UTC) + dt.timedelta(seconds=5)

    requeued = await repo.requeue_task(conn, ref, "timeout", not_before=due)

    assert requeued == repo.Requeued(1, NodeType.HTTP, "http", {"url": "https://example.com"})
    task = await task_row(conn, ref)
    assert (task.state, task.attempt, task.error) == (TaskState.PENDING, 1, "timeout")
    assert task.lease_owner is None and task.started_at is None
    # The old worker's lease is gone with its attempt.
    assert (
        await repo.renew_lease(conn, run_id, ref.task_id, 0, owner="w1", ttl=30, token="tok")
        is None
    )


async def test_resolve_wait_only_resolves_a_waiting_task(conn: repo.Connection) -> None:
    run_id = await new_run(conn)
    task_id = uuid7()
    wake = dt.datetime.now(UTC) - dt.timedelta(seconds=1)
    await repo.insert_task(
        conn,
        run_id,
        task_id,
        "pause",
        node_type=NodeType.WAIT,
        state=TaskState.WAITING,
        wake_at=wake,
    )
    for expected in (True, False):  # the second finds it no longer waiting
        resolved = await repo.resolve_wait(
            conn, run_id, task_id, "pause", state=TaskState.COMPLETED, output={"woke_at": "now"}
        )
        assert resolved is expected

    (task,) = await repo.get_run_tasks(conn, run_id)
    assert (task.state, task.output, task.wake_at) == (
        TaskState.COMPLETED,
        {"woke_at": "now"},
        None,
    )
    assert all(w.task_id != task_id for w in await repo.due_waits(conn, limit=1000))


async def test_resolve_waits_resolves_many_and_leaves_out_those_not_waiting(
    conn: repo.Connection,
) -> None:
    run_id = await new_run(conn)
    woken, timed_out, resolved = uuid7(), uuid7(), uuid7()
    for task_id, node_id in ((woken, "nap"), (timed_out, "hear"), (resolved, "done")):
        await repo.insert_task(
            conn, run_id, task_id, node_id, node_type=NodeType.WAIT, state=TaskState.WAITING
        )
    assert await repo.resolve_wait(conn, run_id, resolved, "done", state=TaskState.COMPLETED)

    waiting = await repo.resolve_waits(
        conn,
        [
            repo.ResolvedWait(run_id, woken, "nap", TaskState.COMPLETED, {"woke_at": "now"}),
            repo.ResolvedWait(run_id, timed_out, "hear", TaskState.FAILED, error="timed out"),
            repo.ResolvedWait(run_id, resolved, "done", TaskState.FAILED, error="late"),
            repo.ResolvedWait(run_id, uuid7(), "nap", TaskState.COMPLETED),  # a wrong id
        ],
    )

    assert waiting == {woken, timed_out}
    tasks = {t.task_id: t for t in await repo.get_run_tasks(conn, run_id)}
    assert (tasks[woken].state, tasks[woken].output) == (TaskState.COMPLETED, {"woke_at": "now"})
    assert (tasks[timed_out].state, tasks[timed_out].error) == (TaskState.FAILED, "timed out")
    assert (tasks[resolved].state, tasks[resolved].error) == (TaskState.COMPLETED, None)


async def test_cancel_stops_only_active_tasks_and_drops_their_dispatches(
    conn: repo.Connection,
) -> None:
    run_id = await new_run(conn)
    pending = await new_worker_task(conn, run_id, "a")
    await repo.enqueue_dispatch(
        conn,
        run_id=run_id,
        task_id=pending.task_id,
        queue="http",
        payload={"task_id": pending.task_id},
    )
    done = await new_worker_task(conn, run_id, "b")
    await repo.complete_task(conn, done, None)
    waiting_id = uuid7()
    await repo.insert_task(
        conn,
        run_id,
        waiting_id,
        "w",
        node_type=NodeType.WAIT,
        state=TaskState.WAITING,
        wake_at=dt.datetime.now(UTC) + dt.timedelta(days=1),
    )

    cancelled = await repo.cancel_tasks(
        conn, run_id, (pending.task_id, done.task_id, waiting_id), reason="stopped by user"
    )

    assert sorted(cancelled) == sorted([pending.task_id, waiting_id])
    tasks = {t.node_id: t for t in await repo.get_run_tasks(conn, run_id)}
    assert (tasks["a"].state, tasks["a"].error) == (TaskState.CANCELLED, "stopped by user")
    assert (tasks["w"].state, tasks["w"].wake_at) == (TaskState.CANCELLED, None)
    assert tasks["b"].state is TaskState.COMPLETED
    async with conn.transaction():
        claimed = await repo.claim_outbox(conn, "dispatch", limit=1000)
    assert all(m.task_id != pending.task_id for m in claimed)
    # A dispatch already published meets a cancelled task: no lease.
    assert (
        await repo.acquire_lease(conn, run_id, pending.task_id, 0, owner="w", ttl=30, token="tok")
        is None
    )


# -- leases --------------------------------------------------------------------


async def test_lease_is_granted_once_and_returns_the_input(conn: repo.Connection) -> None:
    run_id = await new_run(conn)
    ref = await new_worker_task(conn, run_id, input={"n": 7})
    await repo.mark_published(conn, [], [ref])

    def ask(owner: str, token: str, claim: str) -> Any:
        return repo.acquire_lease(
            conn, run_id, ref.task_id, 0, owner=owner, ttl=30, token=token, claim=claim
        )

    lease = await ask("w1", "tok-1", "claim-1")
    other = await ask("w2", "tok-2", "claim-2")
    same_name = await ask("w1", "tok-3", "claim-3")  # the owner's name is no secret
    again = await ask("w1", "tok-4", "claim-1")  # the same request, its answer lost

    assert lease is not None and lease.input == {"n": 7} and lease.node_id == "a"
    assert lease.token == "tok-1" and lease.workflow_version == 1
    assert lease.expires_at > dt.datetime.now(UTC)
    assert other is None and same_name is None
    assert again is not None and again.token == "tok-1"  # keeps the token it was given
    task = await task_row(conn, ref)
    assert (task.state, task.lease_owner) == (TaskState.RUNNING, "w1")


async def test_a_lease_within_an_input_limit_takes_a_task_without_input(
    conn: repo.Connection,
) -> None:
    """A report's answer leases the next task only within an input size (engine/_reports.py);
    a task with no input (a MAP item of null) is within any."""
    run_id = await new_run(conn)
    bare = await new_worker_task(conn, run_id, "a", input=None)
    large = await new_worker_task(conn, run_id, "b", input={"blob": "x" * 4096})
    await repo.mark_published(conn, [], [bare, large])
    requests = [
        repo.LeaseRequest(run_id, ref.task_id, 0, "w", 30.0, f"tok-{ref.node_id}")
        for ref in (bare, large)
    ]

    leases = await repo.acquire_leases(conn, requests, max_input_bytes=1024)

    assert leases[0] is not None and leases[0].input is None
    assert leases[1] is None  # over the limit: left for the worker's own lease


async def test_lease_is_fenced_by_attempt(conn: repo.Connection) -> None:
    run_id = await new_run(conn)
    ref = await new_worker_task(conn, run_id)
    await repo.requeue_task(conn, ref, "flaky", not_before=DUE)

    assert (
        await repo.acquire_lease(conn, run_id, ref.task_id, 0, owner="w", ttl=30, token="tok")
        is None
    )
    assert (
        await repo.acquire_lease(conn, run_id, ref.task_id, 1, owner="w", ttl=30, token="tok")
        is not None
    )


async def test_a_retry_is_not_leased_before_it_is_due(conn: repo.Connection) -> None:
    run_id = await new_run(conn)
    ref = await new_worker_task(conn, run_id)
    await repo.requeue_task(conn, ref, "flaky", not_before=SOON)

    lease = await repo.acquire_lease(conn, run_id, ref.task_id, 1, owner="w", ttl=30, token="t")

    assert lease is None
    task = await task_row(conn, ref)
    assert (task.state, task.attempt, task.lease_owner) == (TaskState.PENDING, 1, None)
    routing = await repo.task_routing(conn, [(run_id, ref.task_id)])
    assert routing[(run_id, ref.task_id)] == repo.TaskRouting(
        node_id="a",
        node_type=NodeType.HTTP,
        queue="http",
        attempt=1,
        state=TaskState.PENDING,
        due_at=SOON,
    )


async def test_a_lease_is_granted_only_on_the_tasks_queue_and_node_type(
    conn: repo.Connection,
) -> None:
    run_id = await new_run(conn)
    ref = await new_worker_task(conn, run_id, queue="http")  # an HTTP node

    async def lease(**scope: Any) -> repo.Lease | None:
        return await repo.acquire_lease(
            conn, run_id, ref.task_id, 0, owner="w", ttl=30, token="t", **scope
        )

    assert await lease(queue="python") is None
    assert await lease(queue="http", node_types=frozenset({NodeType.PYTHON})) is None
    assert await lease(node_types=frozenset({NodeType.TASK, NodeType.PYTHON})) is None
    assert (await task_row(conn, ref)).state is TaskState.PENDING  # untouched
    routing = await repo.task_routing(conn, [(run_id, ref.task_id), (run_id, uuid7())])
    assert list(routing) == [(run_id, ref.task_id)]  # a task that does not exist: no row
    assert routing[(run_id, ref.task_id)].due_at is None  # due: created PENDING
    granted = await lease(queue="http", node_types=frozenset({NodeType.HTTP}))
    assert granted is not None and granted.node_type is NodeType.HTTP


async def test_renew_is_fenced_by_owner_and_attempt(conn: repo.Connection) -> None:
    run_id = await new_run(conn)
    ref = await new_worker_task(conn, run_id)
    lease = await repo.acquire_lease(conn, run_id, ref.task_id, 0, owner="w1", ttl=1, token="tok")
    assert lease is not None

    renewed = await repo.renew_lease(conn, run_id, ref.task_id, 0, owner="w1", ttl=60, token="tok")
    assert renewed is not None and renewed > lease.expires_at
    assert (
        await repo.renew_lease(conn, run_id, ref.task_id, 0, owner="w2", ttl=60, token="tok")
        is None
    )
    assert (
        await repo.renew_lease(conn, run_id, ref.task_id, 1, owner="w1", ttl=60, token="tok")
        is None
    )
    await repo.complete_task(conn, ref, None)
    assert (
        await repo.renew_lease(conn, run_id, ref.task_id, 0, owner="w1", ttl=60, token="tok")
        is None
    )


async def test_an_expired_lease_is_reported_and_can_be_taken_over(conn: repo.Connection) -> None:
    run_id = await new_run(conn)
    ref = await new_worker_task(conn, run_id)
    lease = await repo.acquire_lease(conn, run_id, ref.task_id, 0, owner="dead", ttl=5, token="tok")
    assert lease is not None
    later = lease.expires_at + dt.timedelta(seconds=1)

    expired = await repo.expired_leases(conn, now=later)
    live = await repo.expired_leases(conn, now=lease.expires_at - dt.timedelta(seconds=1))

    assert [(e.task_id, e.attempt, e.owner) for e in expired if e.run_id == run_id] == [
        (ref.task_id, 0, "dead")
    ]
    assert all(e.task_id != ref.task_id for e in live)
    # Takeover is judged by the database clock: expire the lease there.
    await conn.execute(
        "UPDATE task_instances SET lease_expires_at = now() - interval '1 second' "
        "WHERE run_id = $1 AND id = $2",
        run_id,
        ref.task_id,
    )
    taken = await repo.acquire_lease(
        conn, run_id, ref.task_id, 0, owner="alive", ttl=30, token="tok"
    )
    assert taken is not None
    assert (await task_row(conn, ref)).lease_owner == "alive"


# -- the loops' queries ----------------------------------------------------------


async def test_due_waits_returns_due_timers_oldest_first(conn: repo.Connection) -> None:
    run_id = await new_run(conn)
    base = dt.datetime(2031, 5, 1, tzinfo=UTC)
    ids = {}
    for node, offset in (("late", 30), ("early", 10), ("future", 3600)):
        ids[node] = uuid7()
        await repo.insert_task(
            conn,
            run_id,
            ids[node],
            node,
            node_type=NodeType.WAIT,
            state=TaskState.WAITING,
            wake_at=base + dt.timedelta(seconds=offset),
        )

    due = [
        w
        for w in await repo.due_waits(conn, now=base + dt.timedelta(minutes=1))
        if w.run_id == run_id
    ]

    assert [w.node_id for w in due] == ["early", "late"]
    assert due[0].task_id == ids["early"]
    assert await repo.next_wake_at(conn) is not None


async def test_next_wake_at_is_the_first_timer_of_a_run_not_paused_read_from_the_index(
    conn: repo.Connection,
) -> None:
    # earlier than any other test's timers: this test's are the first in the index
    base = dt.datetime(2001, 1, 1, tzinfo=UTC)
    paused = await new_run(conn)
    await conn.execute("UPDATE workflow_runs SET status = 'PAUSED' WHERE id = $1", paused)
    running = await new_run(conn)
    for run_id, node, offset in [(paused, "kept", 0)] + [
        (running, f"n{i}", 1 + i) for i in range(300)
    ]:
        await repo.insert_task(
            conn,
            run_id,
            uuid7(),
            node,
            node_type=NodeType.WAIT,
            state=TaskState.WAITING,
            wake_at=base + dt.timedelta(seconds=offset),
        )

    assert await repo.next_wake_at(conn) == base + dt.timedelta(seconds=1)
    # the paused run's timer and the first after it, not all 301 (a min() read them all)
    assert await rows_read(conn, "next_wake_at") <= 2


async def test_lost_dispatches_skips_tasks_that_still_have_an_outbox_row(
    conn: repo.Connection,
) -> None:
    run_id = await new_run(conn)
    lost = await new_worker_task(conn, run_id, "lost", input={"n": 1})
    kept = await new_worker_task(conn, run_id, "kept")
    await repo.enqueue_dispatch(conn, run_id=run_id, task_id=kept.task_id, queue="http", payload={})
    leased = await new_worker_task(conn, run_id, "leased")
    await repo.acquire_lease(conn, run_id, leased.task_id, 0, owner="w", ttl=30, token="tok")
    future = dt.datetime.now(UTC) + dt.timedelta(hours=1)

    found = [d for d in await repo.lost_dispatches(conn, older_than=future) if d.run_id == run_id]

    assert [(d.task_id, d.state) for d in found] == [(lost.task_id, TaskState.PENDING)]
    again = await repo.redispatch_task(conn, run_id, lost.task_id, 0)
    assert again is not None and again.input == {"n": 1} and again.queue == "http"
    assert await repo.redispatch_task(conn, run_id, lost.task_id, 3) is None
