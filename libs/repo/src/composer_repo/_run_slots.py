"""Run concurrency (V016): the slots a key's runs hold and the runs waiting for one
(docs/architecture.md §4.13). Every decision on a key is taken under its advisory
lock, in the transaction that starts, finishes or hands on a run.
"""

from __future__ import annotations

from dataclasses import dataclass

from composer_repo._db import Connection, translated
from composer_repo._sql import q


@translated
async def lock_run_key(conn: Connection, workflow_id: str, key: str) -> None:
    """Take the key's slot lock until the transaction ends."""
    await conn.execute(q("lock_run_key"), workflow_id, key)


@translated
async def run_slots_taken(conn: Connection, workflow_id: str, key: str) -> int:
    """How many runs of the key hold a slot (under its lock: the true count)."""
    return int(await conn.fetchval(q("run_slots_taken"), workflow_id, key))


@translated
async def take_run_slot(conn: Connection, workflow_id: str, key: str, run_id: str) -> None:
    """The run holds a slot of the key from now until it finishes."""
    await conn.execute(q("take_run_slot"), workflow_id, key, run_id)


@translated
async def queue_run(
    conn: Connection,
    workflow_id: str,
    key: str,
    run_id: str,
    *,
    priority: int,
    max_runs: int,
    start_node: str | None = None,
) -> None:
    """The run waits in the key's line for a slot (``start_node``: where its start
    asked it to begin, kept for when it goes)."""
    await conn.execute(q("queue_run"), workflow_id, key, run_id, priority, max_runs, start_node)


@translated
async def take_oldest_run_slot(conn: Connection, workflow_id: str, key: str) -> str | None:
    """Free the slot held longest on the key, returning its run (None: no slot held)."""
    value = await conn.fetchval(q("oldest_run_slot"), workflow_id, key)
    return None if value is None else str(value)


@translated
async def leave_run_slot(conn: Connection, run_id: str) -> tuple[str, str] | None:
    """A finished run leaves its slot or its line: the (workflow, key) whose slot it
    freed, None when it held none."""
    row = await conn.fetchrow(q("leave_run_slot"), run_id)
    return None if row is None else (row["workflow_id"], row["key"])


@dataclass(frozen=True, slots=True)
class WaitingRun:
    """A run in its key's line."""

    run_id: str
    #: The limit it was started under (a templated max_runs is the run's own).
    max_runs: int
    start_node: str | None


@translated
async def next_waiting_runs(
    conn: Connection, workflow_id: str, key: str, limit: int
) -> list[WaitingRun]:
    """The key's waiting runs in the order they go, at most ``limit``."""
    rows = await conn.fetch(q("next_waiting_runs"), workflow_id, key, limit)
    return [WaitingRun(r["run_id"], int(r["max_runs"]), r["start_node"]) for r in rows]


@translated
async def hand_run_slot(conn: Connection, workflow_id: str, key: str, run_id: str) -> bool:
    """A waiting run takes a slot of its key; False when it no longer waits."""
    return await conn.fetchval(q("hand_run_slot"), workflow_id, key, run_id) is not None


@translated
async def set_run_priority(conn: Connection, run_id: str, priority: int) -> None:
    """Keep a child run's priority, rendered as its start is applied, on its row (V026):
    its attempts wait by it wherever they wait (§4.16)."""
    await conn.execute(q("set_run_priority"), run_id, priority)


@translated
async def holds_run_slot(conn: Connection, run_id: str) -> bool:
    """Whether the run holds a slot of its key."""
    return await conn.fetchval(q("holds_run_slot"), run_id) is not None


@translated
async def start_waiting_run(conn: Connection, run_id: str) -> bool:
    """A run handed a slot leaves PENDING for RUNNING; False when it is not PENDING
    (cancelled while its start was on its way)."""
    return await conn.fetchval(q("start_waiting_run"), run_id) is not None


@dataclass(frozen=True, slots=True)
class RunWaiting:
    """Why a PENDING run waits, for a person."""

    key: str
    max_runs: int
    #: Its priority now (aged: a level gained per minute waited).
    priority: int
    running: int
    #: Waiting runs of the key that go before it.
    ahead: int


@translated
async def run_waiting(conn: Connection, run_id: str) -> RunWaiting | None:
    """Why the run waits for a slot; None when it does not."""
    row = await conn.fetchrow(q("run_waiting"), run_id)
    if row is None:
        return None
    return RunWaiting(
        row["key"],
        int(row["max_runs"]),
        int(row["priority"]),
        int(row["running"]),
        int(row["ahead"]),
    )


@dataclass(frozen=True, slots=True)
class RunLimitKey:
    """A key of a run limit with runs going or waiting."""

    workflow_id: str
    key: str
    in_use: int
    waiting: int
    #: The limit its waiting runs were started under (None: none waits).
    waiting_max_runs: int | None


@translated
async def run_limit_keys(conn: Connection, *, limit: int = 1000) -> list[RunLimitKey]:
    """The keys with runs going or waiting, by workflow then key (at most ``limit``)."""
    rows = await conn.fetch(q("run_limit_keys"), limit)
    return [
        RunLimitKey(
            r["workflow_id"],
            r["key"],
            int(r["in_use"]),
            int(r["waiting"]),
            None if r["max_runs"] is None else int(r["max_runs"]),
        )
        for r in rows
    ]
