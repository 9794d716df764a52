"""Buffered signals: oldest first, skipping ones already taken, consumed once."""

from __future__ import annotations

import composer_repo as repo
from composer_core.statemachine import BufferSignal, ConsumeSignal

from .helpers import new_run, uuid7


async def test_pending_signal_is_the_oldest_unconsumed_of_that_name(conn: repo.Connection) -> None:
    run_id = await new_run(conn)
    other_run = await new_run(conn)
    first, second, noise = uuid7(), uuid7(), uuid7()
    async with conn.transaction():  # one transaction: same created_at, ordered by id
        await repo.buffer_signal(conn, run_id, BufferSignal(first, "paid", {"amount": 1}))
        await repo.buffer_signal(conn, run_id, BufferSignal(second, "paid", {"amount": 2}))
    await repo.buffer_signal(conn, run_id, BufferSignal(noise, "shipped", None))
    await repo.buffer_signal(conn, other_run, BufferSignal(uuid7(), "paid", {"amount": 9}))

    oldest = await repo.pending_signal(conn, run_id, "paid")
    next_one = await repo.pending_signal(conn, run_id, "paid", exclude=[first])
    none_left = await repo.pending_signal(conn, run_id, "paid", exclude=[first, second])

    assert oldest is not None and (oldest.signal_id, oldest.payload) == (first, {"amount": 1})
    assert next_one is not None and next_one.signal_id == second
    assert none_left is None
    assert await repo.pending_signal(conn, run_id, "unknown") is None


async def test_a_signal_is_consumed_once(conn: repo.Connection) -> None:
    run_id = await new_run(conn)
    signal_id = uuid7()
    await repo.buffer_signal(conn, run_id, BufferSignal(signal_id, "go", {"x": 1}))

    assert await repo.consume_signal(conn, run_id, ConsumeSignal(signal_id, "wait_go")) is True
    assert await repo.consume_signal(conn, run_id, ConsumeSignal(signal_id, "other")) is False
    assert await repo.pending_signal(conn, run_id, "go") is None


async def test_run_store_serves_the_machine(conn: repo.Connection) -> None:
    run_id = await new_run(conn)
    signal_id = uuid7()
    await repo.buffer_signal(conn, run_id, BufferSignal(signal_id, "go", [1, 2]))
    store = repo.RunStore(conn, run_id)

    signal = await store.pending_signal("go", frozenset())

    assert signal is not None and (signal.signal_id, signal.payload) == (signal_id, [1, 2])
    assert await store.outputs(["nothing"]) == {}


async def test_run_signals_lists_a_runs_buffered_signals_consumed_or_not(
    conn: repo.Connection,
) -> None:
    run_id = await new_run(conn)
    other_run = await new_run(conn)
    taken, waiting = uuid7(), uuid7()
    await repo.buffer_signal(conn, run_id, BufferSignal(taken, "go", {"n": 1}))
    await repo.buffer_signal(conn, run_id, BufferSignal(waiting, "go", {"n": 2}))
    await repo.buffer_signal(conn, other_run, BufferSignal(uuid7(), "go", None))
    await repo.consume_signal(conn, run_id, ConsumeSignal(taken, "wait_go"))

    signals = await repo.run_signals(conn, run_id)

    assert [(s.signal_id, s.payload, s.consumed_by) for s in signals] == [
        (taken, {"n": 1}, "wait_go"),
        (waiting, {"n": 2}, None),
    ]
    assert signals[0].consumed_at is not None and signals[1].consumed_at is None
