"""Runs: insert (definition checks, id conflict, idempotency), snapshot, finish, reopen, list."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

import composer_repo as repo
from composer_core.model import NodeType, RunStatus, TaskState

from .helpers import ensure_definition, new_map_run, new_run, new_worker_task, uuid7

UTC = dt.UTC


async def test_insert_run_stores_input_and_config(conn: repo.Connection) -> None:
    version = await ensure_definition(conn)
    run_id = uuid7()

    started = await repo.insert_run(
        conn,
        run_id,
        workflow_id="wf",
        version=version,
        input={"order": 1, "items": ["a", "b"]},
        config={"debug": True},
    )

    assert started == repo.StartedRun(run_id, RunStatus.RUNNING, created=True, now=started.now)
    run = await repo.get_run(conn, run_id)
    assert run.created_at == started.now  # the inserting transaction's clock
    assert (run.input, run.config, run.status) == (
        {"order": 1, "items": ["a", "b"]},
        {"debug": True},
        RunStatus.RUNNING,
    )


async def test_insert_run_needs_an_existing_definition_not_deleted(conn: repo.Connection) -> None:
    await ensure_definition(conn, "gone")
    await repo.delete_definition(conn, "gone")

    with pytest.raises(repo.NotFound, match="has no version 9"):
        await repo.insert_run(conn, uuid7(), workflow_id="wf", version=9)
    with pytest.raises(repo.Invalid, match="deleted"):
        await repo.insert_run(conn, uuid7(), workflow_id="gone", version=1)


async def test_a_taken_run_id_is_a_conflict(conn: repo.Connection) -> None:
    run_id = await new_run(conn, input={"first": True})
    version = await ensure_definition(conn)

    with pytest.raises(repo.RunAlreadyExists, match=run_id):
        await repo.insert_run(conn, run_id, workflow_id="wf", version=version, input={"x": 2})
    assert (await repo.get_run(conn, run_id)).input == {"first": True}


async def test_a_repeated_idempotency_key_returns_the_existing_run(conn: repo.Connection) -> None:
    version = await ensure_definition(conn)
    first = await repo.insert_run(
        conn, uuid7(), workflow_id="wf", version=version, input={"n": 1}, idempotency_key="order-7"
    )
    await repo.finish_run(conn, first.run_id, RunStatus.SUCCEEDED)

    second = await repo.insert_run(
        conn, uuid7(), workflow_id="wf", version=version, input={"n": 2}, idempotency_key="order-7"
    )

    assert second == repo.StartedRun(
        first.run_id, RunStatus.SUCCEEDED, created=False, now=second.now
    )
    assert (await repo.get_run(conn, first.run_id)).input == {"n": 1}
    other = await ensure_definition(conn, "other-wf")
    elsewhere = await repo.insert_run(
        conn, uuid7(), workflow_id="other-wf", version=other, idempotency_key="order-7"
    )
    assert elsewhere.created  # keys are per workflow


async def test_a_batch_of_starts_is_inserted_as_each_alone_would_be(
    conn: repo.Connection,
) -> None:
    """insert_runs (a timer's fires in one statement): each row stored with what it was
    given, in order; a key used before, or twice in the batch, gives its first run."""
    version = await ensure_definition(conn)
    earlier = await repo.insert_run(
        conn, uuid7(), workflow_id="wf", version=version, idempotency_key="k-old"
    )
    fire = dt.datetime(2026, 12, 1, 2, 0, tzinfo=dt.UTC)
    rows = [
        repo.NewRun(
            uuid7(),
            "wf",
            version,
            input={"n": 1},
            config={"c": True},
            idempotency_key="k-1",
            context={"caller": "x"},
            labels={"tenant": "acme"},
            priority=1,
            schedule=("nightly", fire),
            started_by="schedule nightly",
        ),
        repo.NewRun(uuid7(), "wf", version, input={"n": 2}, idempotency_key="k-old"),
        repo.NewRun(uuid7(), "wf", version, input={"n": 3}, idempotency_key="k-1"),
        repo.NewRun(uuid7(), "wf", version, status=RunStatus.PENDING),
    ]
    started = await repo.insert_runs(conn, rows)
    assert [s.created for s in started] == [True, False, False, True]
    assert started[0].run_id == rows[0].run_id
    assert started[1].run_id == earlier.run_id
    assert started[2].run_id == rows[0].run_id  # the batch's first with that key
    assert started[3].status is RunStatus.PENDING
    first = await repo.get_run(conn, rows[0].run_id)
    assert (first.input, first.config, first.labels) == ({"n": 1}, {"c": True}, {"tenant": "acme"})
    assert (first.schedule_id, first.scheduled_for) == ("nightly", fire)
    assert first.started_by == "schedule nightly"
    for missing in (rows[1], rows[2]):
        with pytest.raises(repo.NotFound):
            await repo.get_run(conn, missing.run_id)
    with pytest.raises(repo.NotFound, match="has no version 99"):
        await repo.insert_runs(conn, [repo.NewRun(uuid7(), "wf", 99)])


async def test_concurrent_starts_with_one_key_create_one_run(pool: repo.Pool) -> None:
    async with pool.acquire() as conn:
        version = await ensure_definition(conn)

    async def start(run_id: str) -> repo.StartedRun:
        async with pool.acquire() as conn, conn.transaction():
            return await repo.insert_run(
                conn, run_id, workflow_id="wf", version=version, idempotency_key="same-key"
            )

    results = await asyncio.gather(*(start(uuid7()) for _ in range(4)))

    assert sum(r.created for r in results) == 1
    assert len({r.run_id for r in results}) == 1


async def test_load_run_locks_and_returns_the_routing_snapshot(conn: repo.Connection) -> None:
    run_id = await new_run(conn, input={"big": "x" * 100})
    done = await new_worker_task(conn, run_id, "a", input={"in": 1})
    await repo.complete_task(conn, repo.TaskRef(run_id, done.task_id, "a", 0), {"out": 1})
    wait_id, resolved_id = uuid7(), uuid7()
    await repo.insert_task(
        conn,
        run_id,
        wait_id,
        "w",
        node_type=NodeType.WAIT_FOR_EVENT,
        state=TaskState.WAITING,
        awaited_signal="paid",
    )
    await repo.insert_task(
        conn,
        run_id,
        resolved_id,
        "w2",
        node_type=NodeType.WAIT_FOR_EVENT,
        state=TaskState.WAITING,
        awaited_signal="x",
    )
    await repo.resolve_wait(conn, run_id, resolved_id, "w2", state=TaskState.COMPLETED, output={})
    await repo.insert_task(
        conn,
        run_id,
        uuid7(),
        "s",
        node_type=NodeType.SWITCH,
        state=TaskState.COMPLETED,
        branches=("a",),
    )

    async with conn.transaction():
        locked = await repo.load_run(conn, run_id)
        # The snapshot comes with the event's clock, read after the lock: the one
        # every write of the transaction uses.
        assert locked.now == await conn.fetchval("SELECT composer_now()")
        assert locked.now >= await conn.fetchval("SELECT now()")
    run = locked.run

    assert (run.run_id, run.workflow_id, run.status, run.input) == (
        run_id,
        "wf",
        RunStatus.RUNNING,
        {"big": "x" * 100},
    )
    assert run.outputs == {}
    assert run.nodes["a"].state is TaskState.COMPLETED and run.nodes["a"].task_id == done.task_id
    assert run.nodes["w"].awaited_signal == "paid"
    assert run.nodes["w2"].awaited_signal is None  # only a waiting node awaits
    assert run.nodes["s"].branches == ("a",)
    assert run.signals is None  # buffered signals load only when the machine asks
    outputs = await repo.load_outputs(conn, run_id, ["a", "w", "missing"])
    assert outputs == {"a": {"out": 1}, "w": None, "missing": None}  # every node asked is answered


async def test_load_run_holds_the_row_lock_until_commit(pool: repo.Pool) -> None:
    async with pool.acquire() as conn:
        run_id = await new_run(conn)
    async with pool.acquire() as first, pool.acquire() as second:
        tx = first.transaction()
        await tx.start()
        await repo.load_run(first, run_id)
        await second.execute("SET lock_timeout = '100ms'")
        with pytest.raises(repo.Transient):
            async with second.transaction():
                await repo.load_run(second, run_id)
        await tx.commit()
        async with second.transaction():
            assert (await repo.load_run(second, run_id)).run.run_id == run_id
        await second.execute("RESET lock_timeout")


async def test_load_run_of_a_missing_run_is_not_found(conn: repo.Connection) -> None:
    with pytest.raises(repo.NotFound, match="does not exist"):
        await repo.load_run(conn, uuid7())


async def test_finish_run_happens_once(conn: repo.Connection) -> None:
    version = await ensure_definition(conn, "hooked")
    run_id = uuid7()
    await repo.insert_run(conn, run_id, workflow_id="hooked", version=version)

    finished = await repo.finish_run(conn, run_id, RunStatus.SUCCEEDED, output={"total": 3})
    again = await repo.finish_run(conn, run_id, RunStatus.FAILED, error="late")

    assert finished is not None and finished.workflow_id == "hooked"
    assert finished.duration >= dt.timedelta(0)
    assert again is None
    run = await repo.get_run(conn, run_id)
    assert (run.status, run.output, run.error) == (RunStatus.SUCCEEDED, {"total": 3}, None)
    assert run.completed_at is not None


async def test_finish_runs_ends_many_in_one_statement_and_leaves_out_the_finished(
    conn: repo.Connection,
) -> None:
    version = await ensure_definition(conn, "hooked")
    ended, going, done = uuid7(), uuid7(), uuid7()
    for run_id in (ended, going, done):
        await repo.insert_run(conn, run_id, workflow_id="hooked", version=version)
    await repo.finish_run(conn, done, RunStatus.SUCCEEDED)

    finished = await repo.finish_runs(
        conn,
        [
            repo.RunEnd(going, RunStatus.FAILED, error="b was wrong"),
            repo.RunEnd(ended, RunStatus.SUCCEEDED, output={"n": 1}),
            repo.RunEnd(done, RunStatus.FAILED, error="late"),
        ],
    )

    assert set(finished) == {ended, going}  # the finished one is left out, unchanged
    assert all(f.workflow_id == "hooked" for f in finished.values())
    runs = {r: await repo.get_run(conn, r) for r in (ended, going, done)}
    assert (runs[ended].status, runs[ended].output) == (RunStatus.SUCCEEDED, {"n": 1})
    assert (runs[going].status, runs[going].error) == (RunStatus.FAILED, "b was wrong")
    assert (runs[done].status, runs[done].error) == (RunStatus.SUCCEEDED, None)


async def test_reopen_run_resets_the_outcome_and_the_reset_tasks(conn: repo.Connection) -> None:
    run_id = await new_run(conn, input={"v": 1})
    keep = await new_worker_task(conn, run_id, "a")
    await repo.complete_task(conn, repo.TaskRef(run_id, keep.task_id, "a", 0), {"ok": 1})
    redo = await new_worker_task(conn, run_id, "b")
    await repo.complete_task(conn, repo.TaskRef(run_id, redo.task_id, "b", 0), {"ok": 2})
    await repo.finish_run(conn, run_id, RunStatus.FAILED, error="b was wrong")
    v2 = (await repo.create_definition(conn, "wf", name="wf", spec={"v": 2})).version

    await repo.reopen_run(
        conn, run_id, version=v2, input={"v": 2}, config={"c": 1}, reset_nodes=("b",)
    )

    run = await repo.get_run(conn, run_id)
    assert (run.status, run.version, run.input, run.config, run.error, run.completed_at) == (
        RunStatus.RUNNING,
        v2,
        {"v": 2},
        {"c": 1},
        None,
        None,
    )
    assert [t.node_id for t in await repo.get_run_tasks(conn, run_id)] == ["a"]
    # The retried node can get its new task.
    assert await repo.insert_task(
        conn, run_id, uuid7(), "b", node_type=NodeType.HTTP, state=TaskState.PENDING
    )


async def test_list_runs_filters_and_pages_newest_first(conn: repo.Connection) -> None:
    v1 = await ensure_definition(conn, "listed")
    v2 = await ensure_definition(conn, "listed-other")
    ids = []
    for i in range(5):
        run_id = uuid7()
        await repo.insert_run(conn, run_id, workflow_id="listed", version=v1)
        if i % 2:
            await repo.finish_run(conn, run_id, RunStatus.FAILED, error="x")
        ids.append(run_id)
    await repo.insert_run(conn, uuid7(), workflow_id="listed-other", version=v2)

    page1 = await repo.list_runs(conn, workflow_id="listed", limit=2)
    page2 = await repo.list_runs(conn, workflow_id="listed", limit=2, cursor=page1.next_cursor)
    page3 = await repo.list_runs(conn, workflow_id="listed", limit=2, cursor=page2.next_cursor)
    failed = await repo.list_runs(conn, workflow_id="listed", status=RunStatus.FAILED)
    any_failed = await repo.list_runs(conn, status=RunStatus.FAILED)

    newest_first = list(reversed(ids))
    assert [r.run_id for r in page1.runs + page2.runs + page3.runs] == newest_first
    assert page3.next_cursor is None
    assert [r.run_id for r in failed.runs] == [ids[3], ids[1]]
    assert {ids[3], ids[1]} <= {r.run_id for r in any_failed.runs}
    assert all(r.status is RunStatus.FAILED for r in any_failed.runs)


async def test_list_runs_by_creation_time(conn: repo.Connection) -> None:
    version = await ensure_definition(conn, "timed")
    now = dt.datetime.now(UTC)
    old = uuid7(now - dt.timedelta(hours=2))
    new = uuid7(now - dt.timedelta(minutes=1))
    for run_id in (old, new):
        await repo.insert_run(conn, run_id, workflow_id="timed", version=version)

    recent = await repo.list_runs(
        conn, workflow_id="timed", created_after=now - dt.timedelta(hours=1)
    )
    earlier = await repo.list_runs(
        conn, workflow_id="timed", created_before=now - dt.timedelta(hours=1)
    )

    assert [r.run_id for r in recent.runs] == [new]
    assert [r.run_id for r in earlier.runs] == [old]
    with pytest.raises(repo.Invalid):
        await repo.list_runs(conn, limit=0)


async def test_an_event_that_waited_for_the_lock_writes_times_after_the_one_it_waited_for(
    pool: repo.Pool,
) -> None:
    """Transaction B began before A committed (its now() is earlier than A's times),
    but every time B writes is read after it got the run lock: later than A's."""
    async with pool.acquire() as setup:
        run_id = await new_run(setup)
        ref = await new_worker_task(setup, run_id, node_id="a")
    async with pool.acquire() as a, pool.acquire() as b:
        b_tx = b.transaction()
        await b_tx.start()
        b_began = await b.fetchval("SELECT now()")
        async with a.transaction():
            await repo.load_run(a, run_id)
            b_lock = asyncio.ensure_future(repo.load_run(b, run_id))
            done = await repo.complete_task(a, ref, {"ok": True})
            assert done is not None
        locked = await asyncio.wait_for(b_lock, 5)
        await repo.insert_task(
            b, run_id, uuid7(), "j", node_type=NodeType.JOIN, state=TaskState.COMPLETED
        )
        await b_tx.commit()
    async with pool.acquire() as check:
        times = {
            r["node_id"]: r
            for r in await check.fetch(
                "SELECT node_id, created_at, finished_at FROM task_instances WHERE run_id = $1",
                run_id,
            )
        }
    assert b_began < times["a"]["finished_at"] <= locked.now
    assert times["j"]["created_at"] == times["j"]["finished_at"] == locked.now


async def test_a_maps_own_output_is_read_never_an_items(conn: repo.Connection) -> None:
    run_id, ids = await new_map_run(conn, items=3, in_flight=3)
    own = (await repo.get_run_tasks(conn, run_id))[0]
    await repo.resolve_wait(
        conn, run_id, own.task_id, "m", state=TaskState.COMPLETED, output=[0, 1, 2]
    )
    # the items' rows written after the MAP's: a scan in table order meets them last
    for i, task_id in enumerate(ids):
        await repo.complete_task(conn, repo.TaskRef(run_id, task_id, "m", 0), {"item": i})

    for scans in ("on", "off"):  # whatever plan reads the rows: an index's order, the table's
        async with conn.transaction():
            await conn.execute(
                f"SET LOCAL enable_indexscan = {scans}; SET LOCAL enable_bitmapscan = {scans}"
            )
            assert await repo.load_outputs(conn, run_id, ["m"]) == {"m": [0, 1, 2]}


async def test_a_batch_loads_the_items_its_reports_name_and_as_many_next(
    conn: repo.Connection,
) -> None:
    run_id, ids = await new_map_run(conn, items=50, in_flight=20)
    other, _ = await new_map_run(conn, items=5, in_flight=2)

    async with conn.transaction():
        # two reports on run_id's items 3 and 7, one on the other run's own MAP task
        locked = await repo.lock_runs(conn, [(run_id, ids[3]), (run_id, ids[7]), (other, "x")])
    state = locked.runs[run_id].nodes["m"].map
    assert state is not None
    assert state.progress.in_flight == tuple(range(20))
    # the named items in flight, and the next two to go: never all 20 in flight
    assert sorted(state.items) == [3, 7, 20, 21]
    assert state.find(ids[7]) == 7 and state.find(ids[5]) is None
    assert {key[1] for key in locked.leases} == {ids[3], ids[7]}
    other_state = locked.runs[other].nodes["m"].map
    assert other_state is not None and sorted(other_state.items) == [2]


async def test_a_staged_batch_reads_its_due_time_on_its_clock_until_it_is_past(
    conn: repo.Connection,
) -> None:
    """A timer group staged ahead of its waits' time decides on a clock that reads that
    time, and the database says how long until it (docs/architecture.md §3.1)."""
    run_id, _ = await new_map_run(conn, items=1, in_flight=1)
    async with conn.transaction():
        now = (await repo.lock_runs(conn, [(run_id, "x")])).now
    assert now is not None
    ahead = now + dt.timedelta(seconds=30)

    async with conn.transaction():
        staged = await repo.lock_runs(conn, [(run_id, "x")], not_before=ahead)
        history_at = await conn.fetchval("SELECT composer_now()")
        left = await repo.seconds_until(conn, ahead)
    async with conn.transaction():
        later = (await repo.lock_runs(conn, [(run_id, "x")], not_before=now)).now

    assert staged.now == history_at == ahead  # every row the batch writes carries it
    assert 28 < left <= 30
    assert later is not None and later > now  # a past floor leaves the clock alone
    assert await repo.seconds_until(conn, now) < 0
