"""Run concurrency: whether a starting run may go now, and who goes when a run of a
limited key finishes (docs/architecture.md §4.13).

A key's slots are rows (``run_slots``), counted under the key's advisory lock in
the transaction that starts, finishes or hands on a run: never more than the
limit at any instant, whatever the interleaving, replicas or crashes. A run over
the limit waits PENDING in its key's line (``runs_waiting``); a finishing run's
transaction hands its slot to the next in line (by priority, aged a level a
minute, then first come) and starts it under its own lock, once: in that same
transaction when it is a group commit and the run's lock is free
(engine/_run_event_delivery.py, ``start_handed``), otherwise by sending it a start,
an event between runs (§4.11).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

import composer_repo as repo
from composer_core.model import RunFlow, RunLimit, Strategy
from composer_engine import _run_events
from composer_engine.sealing import RunSeal

#: How many waiting runs one look at a key's line reads.
_BATCH = 100


class Outcome(Enum):
    #: It holds a slot: start it now.
    GO = "go"
    #: It waits in its key's line, PENDING.
    WAIT = "wait"
    #: It ends CANCELLED at once (cancel_newest).
    CANCEL = "cancel"


@dataclass(frozen=True, slots=True)
class Admission:
    outcome: Outcome
    #: For a person: why it waits or was cancelled, or which run it displaced.
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Handed:
    """A waiting run handed a slot by a finished one: it is to be started."""

    waiting: repo.WaitingRun
    #: The finished run that freed the slot (the start's "by").
    from_run: str

    def event(self) -> repo.NewRunEvent:
        """The start sent to it when its handing transaction does not start it."""
        return _run_events.slot_handed(self.waiting, self.from_run)


def describe(workflow_id: str, limit: RunLimit) -> str:
    key = (
        f"key {limit.key!r} of workflow {workflow_id!r}"
        if limit.key
        else f"workflow {workflow_id!r}"
    )
    return f"{key} (at most {limit.max_runs} run(s) at once)"


async def admit_run(
    conn: repo.Connection,
    events: list[repo.NewRunEvent],
    workflow_id: str,
    run_id: str,
    flow: RunFlow,
    seal: RunSeal,
    *,
    start_node: str | None,
) -> Admission:
    """Take a slot of the run's key, or put it in line, or cancel it, as its strategy
    says; a ``cancel_in_progress`` start that takes the oldest run's slot sends that
    run a cancel, added to ``events`` (written with the transaction's writes)."""
    limit = flow.limit
    assert limit is not None
    await repo.lock_run_key(conn, workflow_id, limit.key)
    taken = await repo.run_slots_taken(conn, workflow_id, limit.key)
    if taken < limit.max_runs:
        await repo.take_run_slot(conn, workflow_id, limit.key, run_id)
        return Admission(Outcome.GO)
    what = describe(workflow_id, limit)
    match limit.strategy:
        case Strategy.QUEUE:
            await repo.queue_run(
                conn,
                workflow_id,
                limit.key,
                run_id,
                priority=flow.priority,
                max_runs=limit.max_runs,
                start_node=start_node,
            )
            return Admission(
                Outcome.WAIT, f"waiting for a slot of {what}: it starts when one finishes"
            )
        case Strategy.CANCEL_NEWEST:
            return Admission(
                Outcome.CANCEL,
                f"{what} was at its limit (strategy cancel_newest): this run was not started",
            )
        case Strategy.CANCEL_IN_PROGRESS:
            victim = await repo.take_oldest_run_slot(conn, workflow_id, limit.key)
            await repo.take_run_slot(conn, workflow_id, limit.key, run_id)
            if victim is not None:
                events.append(
                    _run_events.displaced(
                        victim,
                        run_id,
                        f"run {run_id} took its slot of {what} (strategy cancel_in_progress)",
                        seal,
                    )
                )
            return Admission(Outcome.GO, victim)


async def hand_on(
    conn: repo.Connection,
    handed: list[Handed],
    freed: Iterable[tuple[str, str, str]],
) -> None:
    """Hand the slots finished runs freed — (workflow, key, the run that held it) — to
    the runs next in their keys' lines, in one order of keys for every transaction
    (a group commit finishes runs of several keys: no deadlock between two). The
    runs handed a slot are added to ``handed``: each is to be started."""
    by_key: dict[tuple[str, str], str] = {}
    for workflow_id, key, run_id in freed:
        by_key.setdefault((workflow_id, key), run_id)
    for (workflow_id, key), from_run in sorted(by_key.items()):
        await repo.lock_run_key(conn, workflow_id, key)
        taken = await repo.run_slots_taken(conn, workflow_id, key)
        while True:
            line = await repo.next_waiting_runs(conn, workflow_id, key, _BATCH)
            going = 0
            for waiting in line:
                if taken >= waiting.max_runs:
                    break  # in order: nobody passes the head of the line
                if await repo.hand_run_slot(conn, workflow_id, key, waiting.run_id):
                    handed.append(Handed(waiting, from_run))
                    taken += 1
                    going += 1
            else:
                if len(line) == _BATCH and going:
                    continue  # the whole batch went: look further down the line
            break
