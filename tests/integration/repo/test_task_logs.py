"""Task logs: one row per reported attempt, read by run and node."""

from __future__ import annotations

import composer_repo as repo

from .helpers import new_run, uuid7


async def test_logs_are_read_by_run_and_node_in_the_order_written(conn: repo.Connection) -> None:
    run_id = await new_run(conn)
    other_run = await new_run(conn)
    a, b = uuid7(), uuid7()
    async with conn.transaction():
        await repo.insert_task_logs(
            conn,
            [
                repo.NewTaskLog(run_id, a, "a", 0, "first\nsecond"),
                repo.NewTaskLog(other_run, uuid7(), "a", 0, "another run's"),
            ],
        )
    await repo.insert_task_logs(
        conn,
        [repo.NewTaskLog(run_id, a, "a", 1, "retried"), repo.NewTaskLog(run_id, b, "b", 0, "b", 3)],
    )

    logs = await repo.get_task_logs(conn, run_id)
    only_b = await repo.get_task_logs(conn, run_id, node_id="b")

    assert [(entry.node_id, entry.attempt, entry.lines) for entry in logs] == [
        ("a", 0, "first\nsecond"),
        ("a", 1, "retried"),
        ("b", 0, "b"),
    ]
    assert [(entry.task_id, entry.truncated) for entry in only_b] == [(b, 3)]


async def test_an_attempt_written_again_keeps_its_first_row(conn: repo.Connection) -> None:
    run_id = await new_run(conn)
    task = uuid7()
    await repo.insert_task_logs(conn, [repo.NewTaskLog(run_id, task, "a", 0, "first")])
    await repo.insert_task_logs(conn, [repo.NewTaskLog(run_id, task, "a", 0, "again")])

    assert [entry.lines for entry in await repo.get_task_logs(conn, run_id)] == ["first"]
