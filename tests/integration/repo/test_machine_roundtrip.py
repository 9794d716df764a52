"""The state machine decides, the repository persists: one workflow end to end.

A minimal shell (lock and load, decide, persist each action, commit) drives
a run through a retry, a signal that arrives before its waiter, a SWITCH, a
skip, the run output, a stale report, a retry of the finished run and a
cancel. It proves every action has its write and that the snapshot and the
Store the repository serves are what the machine needs — the contract the
engine builds on.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import composer_repo as repo
from composer_core.model import RunStatus, TaskState, WorkflowDAG, build_dag, parse_definition
from composer_core.statemachine import (
    BufferSignal,
    CancelTasks,
    CompleteTask,
    ConsumeSignal,
    CreateTask,
    Deps,
    DispatchTask,
    Event,
    FailTask,
    FinishRun,
    Machine,
    NodeCompleted,
    NodeFailed,
    ReopenRun,
    ResolveWait,
    RetryTask,
    RunCancelled,
    RunRetried,
    RunStarted,
    SignalReceived,
    Transition,
)

from .helpers import uuid7

DEFINITION: dict[str, Any] = {
    "id": "shop",
    "nodes": [
        {
            "id": "reserve",
            "type": "TASK",
            "queue": "work",
            "spec": {"order": "{{input.order}}"},
            "retry": {"max_attempts": 3, "initial_seconds": 2},
        },
        {"id": "route", "type": "SWITCH"},
        {"id": "paid", "type": "WAIT_FOR_EVENT", "spec": {"event": "payment"}},
        {"id": "refund", "type": "TASK", "queue": "work"},
        {
            "id": "ship",
            "type": "TASK",
            "queue": "work",
            "spec": {"amount": "{{tasks.paid.output.amount}}"},
        },
    ],
    "edges": [
        {"from": "reserve", "to": "route"},
        {"from": "route", "to": "paid", "condition": "{{tasks.reserve.output.ok}}"},
        {"from": "route", "to": "refund", "condition": "{{!tasks.reserve.output.ok}}"},
        {"from": "paid", "to": "ship"},
    ],
    "output": {"shipped": "{{tasks.ship.output.tracking}}"},
}


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


async def persist(conn: repo.Connection, dag: WorkflowDAG, run: str, actions: list[Any]) -> None:
    """The engine's action → SQL table, as plainly as possible."""
    requeued: dict[str, repo.Requeued] = {}
    for i, action in enumerate(actions):
        match action:
            case CreateTask():
                queue = dag.queue(action.node_id) if action.state is TaskState.PENDING else None
                assert await repo.insert_task(conn, run, action, queue=queue)
            case DispatchTask():
                node_input = action.input
                if action.task_id in requeued:
                    node_input = requeued[action.task_id].input
                await repo.enqueue_dispatch(
                    conn,
                    run_id=run,
                    task_id=action.task_id,
                    queue=action.queue,
                    payload={
                        "task_id": action.task_id,
                        "attempt": action.attempt,
                        "input": node_input,
                    },
                    not_before=action.not_before,
                )
            case CompleteTask():
                assert await repo.complete_task(conn, run, action) is not None
            case FailTask():
                assert await repo.fail_task(conn, run, action) is not None
            case RetryTask():
                dispatch = actions[i + 1]
                assert isinstance(dispatch, DispatchTask)
                result = await repo.requeue_task(conn, run, action, not_before=dispatch.not_before)
                assert result is not None and result.attempt == dispatch.attempt
                requeued[action.task_id] = result
            case ResolveWait():
                assert await repo.resolve_wait(conn, run, action)
            case BufferSignal():
                await repo.buffer_signal(conn, run, action)
            case ConsumeSignal():
                assert await repo.consume_signal(conn, run, action)
            case ReopenRun():
                await repo.reopen_run(conn, run, action)
            case CancelTasks():
                await repo.cancel_tasks(conn, run, action)
            case FinishRun():
                assert await repo.finish_run(conn, run, action) is not None
            case _:
                raise AssertionError(f"no write for {action!r}")


async def apply(pool: repo.Pool, dag: WorkflowDAG, run_id: str, event: Event) -> Transition:
    async with pool.acquire() as conn, conn.transaction():
        run = await repo.load_run(conn, run_id)
        machine = Machine(dag, run, Deps(repo.RunStore(conn, run_id), now, uuid7))
        transition = await machine.apply(event)
        if transition.ignored is None:
            await persist(conn, dag, run_id, transition.actions)
        return transition


async def tasks(pool: repo.Pool, run_id: str) -> dict[str, repo.TaskRecord]:
    async with pool.acquire() as conn:
        return {t.node_id: t for t in await repo.get_run_tasks(conn, run_id)}


async def dispatches(pool: repo.Pool, run_id: str) -> list[repo.OutboxMessage]:
    """Claim and delete the run's due dispatches, as the outbox-enqueuer would."""
    async with pool.acquire() as conn, conn.transaction():
        claimed = [
            m for m in await repo.claim_outbox(conn, "dispatch", limit=1000) if m.run_id == run_id
        ]
        await repo.delete_outbox(conn, [m.id for m in claimed])
        return claimed


async def test_a_run_end_to_end_through_the_repository(pool: repo.Pool) -> None:
    dag = build_dag(parse_definition(DEFINITION), version=1)
    run_id = uuid7()
    async with pool.acquire() as conn, conn.transaction():
        await repo.create_definition(conn, "shop", name="Shop", spec=DEFINITION, deploy=True)
        await repo.insert_run(conn, run_id, workflow_id="shop", version=1, input={"order": "o-1"})
    await apply(pool, dag, run_id, RunStarted())
    reserve = (await tasks(pool, run_id))["reserve"]
    assert reserve.input == {"order": "o-1"}
    assert [m.payload["attempt"] for m in await dispatches(pool, run_id)] == [0]

    # The payment arrives before anyone waits for it: buffered.
    early = await apply(pool, dag, run_id, SignalReceived("payment", {"amount": 42}))
    assert early.signal_delivered is False

    # Attempt 0 fails: retried, and the retry's dispatch carries the stored input.
    await apply(pool, dag, run_id, NodeFailed(reserve.task_id, "reserve", 0, "timeout"))
    assert (await tasks(pool, run_id))["reserve"].attempt == 1
    async with pool.acquire() as conn:
        due = await repo.next_outbox_due(conn, "dispatch")
    assert due is not None and due > now()  # the backoff holds it back

    # Attempt 1 succeeds: SWITCH takes "paid", which takes the buffered signal at once.
    await apply(pool, dag, run_id, NodeCompleted(reserve.task_id, "reserve", 1, {"ok": True}))
    state = await tasks(pool, run_id)
    assert state["route"].branches == ("paid",)
    assert state["refund"].state is TaskState.SKIPPED
    assert (state["paid"].state, state["paid"].output) == (TaskState.COMPLETED, {"amount": 42})
    assert state["ship"].input == {"amount": 42}

    # A stale report of the failed attempt changes nothing.
    stale = await apply(pool, dag, run_id, NodeCompleted(reserve.task_id, "reserve", 0, {}))
    assert stale.ignored is not None

    ship = state["ship"]
    await apply(pool, dag, run_id, NodeCompleted(ship.task_id, "ship", 0, {"tracking": "T-1"}))
    async with pool.acquire() as conn:
        run = await repo.get_run(conn, run_id)
    assert (run.status, run.output) == (RunStatus.SUCCEEDED, {"shipped": "T-1"})

    # Retry from "ship": its task is replaced, the rest is kept.
    await apply(pool, dag, run_id, RunRetried(from_node="ship"))
    state = await tasks(pool, run_id)
    assert state["ship"].task_id != ship.task_id and state["ship"].state is TaskState.PENDING
    assert state["reserve"].output == {"ok": True}

    # Cancel: the active task fails with the reason and its dispatch is gone.
    await apply(pool, dag, run_id, RunCancelled("customer changed their mind"))
    state = await tasks(pool, run_id)
    assert (state["ship"].state, state["ship"].error) == (
        TaskState.FAILED,
        "customer changed their mind",
    )
    async with pool.acquire() as conn:
        run = await repo.get_run(conn, run_id)
    assert (run.status, run.error) == (RunStatus.CANCELLED, "customer changed their mind")
    assert all(m.task_id != state["ship"].task_id for m in await dispatches(pool, run_id))
