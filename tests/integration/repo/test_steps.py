"""A step's writes in one statement (``write_step``): what the four statements it
joins would each have written and answered."""

from __future__ import annotations

import composer_repo as repo
from composer_core.model import NodeType, TaskState

from .helpers import new_run, new_worker_task, uuid7


async def test_a_step_completes_inserts_dispatches_and_appends_history_at_once(
    conn: repo.Connection,
) -> None:
    run_id = await new_run(conn)
    done = await new_worker_task(conn, run_id, "a")
    already = await new_worker_task(conn, run_id, "c")
    b = uuid7()
    async with conn.transaction():
        written = await repo.write_step(
            conn,
            [(done, {"status": 200}), (repo.TaskRef(run_id, uuid7(), "x", 0), None)],
            [
                repo.NewTask(b, run_id, "b", NodeType.TASK, TaskState.PENDING, queue="q"),
                # node c has its task: left out, as insert_tasks leaves it
                repo.NewTask(uuid7(), run_id, "c", NodeType.TASK, TaskState.PENDING, queue="q"),
            ],
            [repo.NewDispatch(run_id, b, "q", {"task_id": b}, None)],
            [
                repo.NewHistory(run_id, "task.completed", "a", done.task_id, 0),
                repo.NewHistory(run_id, "task.scheduled", "b", b),
            ],
        )

    # the unknown attempt is not completed; the task of node c is not inserted again
    assert set(written.completed) == {done.task_id}
    assert written.completed[done.task_id].node_type is NodeType.HTTP
    assert written.completed[done.task_id].finished_at is not None
    assert written.inserted == {b}
    assert set(written.enqueued) == {b}
    assert written.enqueued[b].priority == 3  # the run names none

    tasks = {t.node_id: t for t in await repo.get_run_tasks(conn, run_id)}
    assert (tasks["a"].state, tasks["a"].output) == (TaskState.COMPLETED, {"status": 200})
    assert tasks["b"].state is TaskState.PENDING and tasks["c"].task_id == already.task_id
    async with conn.transaction():
        messages = [m for m in await repo.claim_outbox(conn, "dispatch") if m.run_id == run_id]
    assert [(m.id, m.task_id, m.destination) for m in messages] == [
        (written.enqueued[b].outbox_id, b, "q")
    ]
    history = await repo.run_history(conn, run_id)
    assert [(h.kind, h.node_id) for h in history] == [
        ("task.completed", "a"),
        ("task.scheduled", "b"),
    ]


async def test_a_step_of_only_some_kinds_writes_those(conn: repo.Connection) -> None:
    run_id = await new_run(conn)
    done = await new_worker_task(conn, run_id, "a")
    written = await repo.write_step(conn, [(done, [1, 2])], [], [], [])
    assert set(written.completed) == {done.task_id}
    assert (written.inserted, written.enqueued) == (set(), {})
    assert (await repo.get_run_tasks(conn, run_id))[0].output == [1, 2]
    assert await repo.run_history(conn, run_id) == []
