"""The state machine decides, the repository persists: one workflow end to end.

A minimal shell (lock and load, decide, the engine's persist, commit) drives
a run through a retry, a signal that arrives before its waiter, a SWITCH, a
skip, the run output, a stale report, a retry of the finished run and a
cancel. It proves every action has its write and that the snapshot, and the
outputs and signals the repository loads when the machine asks, are what the
machine needs — the contract the engine builds on.
"""

from __future__ import annotations

from typing import Any

import composer_repo as repo
from composer_core.model import RunStatus, TaskState, WorkflowDAG, build_dag, parse_definition
from composer_core.statemachine import (
    Deps,
    Event,
    Machine,
    Missing,
    NodeCompleted,
    NodeFailed,
    RunCancelled,
    RunRetried,
    RunStarted,
    SignalReceived,
    Transition,
)
from composer_engine._persist import persist
from composer_engine._tx import Tx
from composer_engine.sealing import PLAIN

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


async def apply(pool: repo.Pool, dag: WorkflowDAG, run_id: str, event: Event) -> Transition:
    async with pool.acquire() as conn, conn.transaction():
        locked = await repo.load_run(conn, run_id)
        machine = Machine(dag, Deps(locked.now, uuid7))
        snapshot = locked.run
        while isinstance(result := machine.apply(snapshot, event), Missing):
            outputs = await repo.load_outputs(conn, run_id, result.outputs)
            signals = await repo.pending_signals(conn, run_id) if result.signals else None
            snapshot = snapshot.with_data(outputs, signals)
        if result.ignored is None:
            tx = Tx(conn)
            tx.now = locked.now
            await persist(tx, dag, snapshot, result.actions, PLAIN)  # the engine's own table
            await tx.writes.flush(tx)  # what it held back, as the engine does before commit
        return result


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
    assert [m.payload["attempt"] for m in await dispatches(pool, run_id)] == ["0"]

    # The payment arrives before anyone waits for it: buffered.
    early = await apply(pool, dag, run_id, SignalReceived("payment", {"amount": 42}))
    assert early.signal_delivered is False

    # Attempt 0 fails: retried, and the retry's dispatch carries the stored input.
    await apply(pool, dag, run_id, NodeFailed(reserve.task_id, "reserve", 0, "timeout"))
    assert (await tasks(pool, run_id))["reserve"].attempt == 1
    async with pool.acquire() as conn:
        due = await repo.next_outbox_due(conn, "dispatch")
        database_now = await conn.fetchval("SELECT now()")
    assert due is not None and due > database_now  # the backoff holds it back

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

    # Cancel: the active task is cancelled with the reason and its dispatch is gone.
    await apply(pool, dag, run_id, RunCancelled("customer changed their mind"))
    state = await tasks(pool, run_id)
    assert (state["ship"].state, state["ship"].error) == (
        TaskState.CANCELLED,
        "customer changed their mind",
    )
    async with pool.acquire() as conn:
        run = await repo.get_run(conn, run_id)
    assert (run.status, run.error) == (RunStatus.CANCELLED, "customer changed their mind")
    assert all(m.task_id != state["ship"].task_id for m in await dispatches(pool, run_id))
