"""Node concurrency on the admission step: at most a key's max attempts of the worker
nodes that name it with a worker or on their way to one (docs/architecture.md §4.12).

A node's ``concurrency: {key, max, scope}`` is a line of its own, apart from its
queue's: its attempts are counted by the key stored on their rows (V019), under the
key's advisory lock, held oldest first, and released as the key's attempts finish.
A node with a key goes through its key only; the queue's limit, if any, does not
hold it again.
"""

from __future__ import annotations

from collections.abc import Sequence

import composer_repo as repo
from composer_core.model import NodeLine


def reason(line: NodeLine) -> str:
    name = line.key.partition(":")[2]
    if line.key.startswith("workflow:"):
        workflow_id, _, key = name.partition(":")
        what = f"concurrency key {key!r} of workflow {workflow_id!r}"
    else:
        what = f"global concurrency key {name!r}"
    return f"{what} is at its limit of {line.max} attempt(s) at once; it goes when one finishes"


async def hold_on_lines(
    conn: repo.Connection, asking: Sequence[tuple[repo.TaskRef, NodeLine]]
) -> dict[str, str]:
    """The attempts of ``asking`` their keys hold: task id → reason. Keys are taken
    in one order in every transaction (no deadlock between two)."""
    by_key: dict[str, list[tuple[repo.TaskRef, NodeLine]]] = {}
    for ref, line in asking:
        by_key.setdefault(line.key, []).append((ref, line))
    held: dict[str, str] = {}
    for key in sorted(by_key):
        items = by_key[key]
        await repo.lock_limit_key(conn, key)
        load = await repo.limit_load(conn, key, leaving_out=[ref.task_id for ref, _ in items])
        busy = load.in_flight
        for ref, line in items:
            if load.held or busy >= line.max:  # oldest first: behind those held
                held[ref.task_id] = reason(line)
            else:
                busy += 1
    return held


async def release_line(conn: repo.Connection, key: str) -> list[repo.HeldLimited]:
    """Take the held attempts of ``key`` that may go now, oldest first (the caller
    dispatches them in this transaction)."""
    await repo.lock_limit_key(conn, key)
    load = await repo.limit_load(conn, key)
    held = await repo.held_limit_tasks(conn, key, 100)
    going = []
    busy = load.in_flight
    for item in held:
        if busy >= item.max:
            break
        if await repo.release_task(conn, item.ref):
            going.append(item)
            busy += 1
    return going
