"""Buffered signals: the pending ones oldest first, consumed once, in the snapshot."""

from __future__ import annotations

import composer_repo as repo
from composer_core.statemachine import Signal

from .helpers import new_run, uuid7


async def test_pending_signals_are_the_unconsumed_ones_oldest_first(
    conn: repo.Connection,
) -> None:
    run_id = await new_run(conn)
    other_run = await new_run(conn)
    first, second, noise, taken = uuid7(), uuid7(), uuid7(), uuid7()
    async with conn.transaction():  # one transaction: same created_at, ordered by id
        await repo.buffer_signal(conn, run_id, first, "paid", {"amount": 1})
        await repo.buffer_signal(conn, run_id, second, "paid", {"amount": 2})
    await repo.buffer_signal(conn, run_id, noise, "shipped", None)
    await repo.buffer_signal(conn, run_id, taken, "paid", None)
    await repo.consume_signal(conn, run_id, taken, node_id="w")
    await repo.buffer_signal(conn, other_run, uuid7(), "paid", {"amount": 9})

    assert await repo.pending_signals(conn, run_id) == (
        Signal(first, "paid", {"amount": 1}),
        Signal(second, "paid", {"amount": 2}),
        Signal(noise, "shipped", None),
    )
    assert await repo.pending_signals(conn, uuid7()) == ()


async def test_a_signal_is_consumed_once(conn: repo.Connection) -> None:
    run_id = await new_run(conn)
    signal_id = uuid7()
    await repo.buffer_signal(conn, run_id, signal_id, "go", {"x": 1})

    assert await repo.consume_signal(conn, run_id, signal_id, node_id="wait_go") is True
    assert await repo.consume_signal(conn, run_id, signal_id, node_id="other") is False
    assert await repo.pending_signals(conn, run_id) == ()


async def test_load_run_leaves_the_signals_to_the_machine_s_ask(
    conn: repo.Connection,
) -> None:
    """The lock query does not read workflow_events: a snapshot says its signals are
    unknown (None), and the machine asks for them when a WAIT_FOR_EVENT parks."""
    run_id = await new_run(conn)
    signal_id = uuid7()
    await repo.buffer_signal(conn, run_id, signal_id, "go", [1, 2])
    async with conn.transaction():
        locked = await repo.load_run(conn, run_id)
        assert locked.run.signals is None
        assert await repo.pending_signals(conn, run_id) == (Signal(signal_id, "go", [1, 2]),)


async def test_run_signals_lists_a_runs_buffered_signals_consumed_or_not(
    conn: repo.Connection,
) -> None:
    run_id = await new_run(conn)
    other_run = await new_run(conn)
    taken, waiting = uuid7(), uuid7()
    await repo.buffer_signal(conn, run_id, taken, "go", {"n": 1})
    await repo.buffer_signal(conn, run_id, waiting, "go", {"n": 2})
    await repo.buffer_signal(conn, other_run, uuid7(), "go", None)
    await repo.consume_signal(conn, run_id, taken, node_id="wait_go")

    signals = await repo.run_signals(conn, run_id)

    assert [(s.signal_id, s.payload, s.consumed_by) for s in signals] == [
        (taken, {"n": 1}, "wait_go"),
        (waiting, {"n": 2}, None),
    ]
    assert signals[0].consumed_at is not None and signals[1].consumed_at is None
