"""write_step: a report's held writes (its completion, the next task, history and log)
in one statement, each answered as its own statement answers it."""

from __future__ import annotations

import dataclasses

import pytest

import composer_repo as repo
from composer_core.model import NodeType, TaskState
from composer_repo._tx import _tracking

from .helpers import new_run, new_worker_task, uuid7


def next_task(run_id: str, node_id: str) -> repo.NewTask:
    return repo.NewTask(
        uuid7(), run_id, node_id, NodeType.HTTP, TaskState.PENDING, input={"n": 1}, queue="http"
    )


async def tasks_of(conn: repo.Connection, run_id: str) -> dict[str, repo.TaskRecord]:
    return {t.node_id: t for t in await repo.get_run_tasks(conn, run_id)}


async def test_one_statement_completes_inserts_and_records(conn: repo.Connection) -> None:
    run_id = await new_run(conn)
    done = await new_worker_task(conn, run_id, "a")
    b = next_task(run_id, "b")
    history = [
        repo.NewHistory(run_id, "task.completed", "a", done.task_id, 0),
        repo.NewHistory(run_id, "task.scheduled", "b", b.task_id, 0),
        repo.NewHistory(run_id, "task.dispatched", "b", b.task_id, 0),
    ]
    log = repo.NewTaskLog(run_id, done.task_id, "a", 0, "one\ntwo", truncated=3)

    written = await repo.write_step(
        conn, completions=[(done, {"ok": True})], tasks=[b], history=history, logs=[log]
    )

    assert set(written.completed) == {done.task_id}
    assert written.completed[done.task_id].node_type is NodeType.HTTP
    assert written.inserted == {b.task_id}
    tasks = await tasks_of(conn, run_id)
    assert (tasks["a"].state, tasks["a"].output) == (TaskState.COMPLETED, {"ok": True})
    assert (tasks["b"].state, tasks["b"].input) == (TaskState.PENDING, {"n": 1})
    rows = await repo.run_history(conn, run_id)
    assert [(r.kind, r.node_id) for r in rows] == [
        ("task.completed", "a"),
        ("task.scheduled", "b"),
        ("task.dispatched", "b"),
    ]
    assert [r.seq for r in rows] == sorted(r.seq for r in rows)
    (stored,) = await repo.get_task_logs(conn, run_id)
    assert (stored.lines, stored.truncated) == ("one\ntwo", 3)


async def test_a_stale_completion_is_left_out_and_the_inserts_still_answered(
    conn: repo.Connection,
) -> None:
    # the completion matches no row (an old attempt): its part returns nothing, and
    # the tasks' answer must not be lost with it
    run_id = await new_run(conn)
    ref = await new_worker_task(conn, run_id, "a")
    stale = dataclasses.replace(ref, attempt=1)
    b = next_task(run_id, "b")
    again = next_task(run_id, "a")  # node a has its task: not inserted

    written = await repo.write_step(
        conn, completions=[(stale, None)], tasks=[b, again], history=[], logs=[]
    )

    assert written.completed == {}
    assert written.inserted == {b.task_id}
    assert (await tasks_of(conn, run_id))["a"].state is TaskState.PENDING


async def test_tasks_alone_go_with_their_history(conn: repo.Connection) -> None:
    run_id = await new_run(conn)
    a, b = next_task(run_id, "a"), next_task(run_id, "b")

    written = await repo.write_step(
        conn,
        completions=[],
        tasks=[a, b],
        history=[repo.NewHistory(run_id, "run.started")],
        logs=[],
    )

    assert written == repo.StepWritten({}, {a.task_id, b.task_id})
    assert set(await tasks_of(conn, run_id)) == {"a", "b"}
    assert [r.kind for r in await repo.run_history(conn, run_id)] == ["run.started"]


async def test_a_step_with_nothing_to_return_is_refused(conn: repo.Connection) -> None:
    run_id = await new_run(conn)
    with pytest.raises(ValueError, match="completions or tasks"):
        await repo.write_step(
            conn,
            completions=[],
            tasks=[],
            history=[repo.NewHistory(run_id, "run.started")],
            logs=[],
        )


async def test_dispatches_go_with_their_tasks_and_answer_their_outbox_rows(
    pool: repo.Pool,
) -> None:
    async with repo.transaction(pool) as conn:
        run_id = await new_run(conn)
    a, b = next_task(run_id, "a"), next_task(run_id, "b")
    dispatches = [
        repo.NewDispatch(run_id, t.task_id, "http", {"task_id": t.task_id}) for t in (a, b)
    ]

    async with repo.tracked_transaction(pool) as conn:
        written = await repo.write_step(
            conn, completions=[], tasks=[a, b], history=[], logs=[], dispatches=dispatches
        )
        # the statement read the transaction's id: tracked_transaction asks no more
        tracking = _tracking.get()
        assert tracking is not None
        assert tracking.xid == await conn.fetchval("SELECT pg_current_xact_id()::text")

    assert set(written.enqueued) == {a.task_id, b.task_id}
    assert {e.priority for e in written.enqueued.values()} == {3}  # the default band
    async with repo.transaction(pool) as conn:
        rows = await conn.fetch(
            "SELECT id, task_id FROM outbox WHERE run_id = $1 AND kind = 'dispatch'", run_id
        )
    assert {r["task_id"]: r["id"] for r in rows} == {
        task_id: e.outbox_id for task_id, e in written.enqueued.items()
    }
