"""Lease ahead: the next task a report's worker takes with its answer, leased as its
row is inserted (docs/architecture.md §3.2).

A report that offers to take its worker's next task (``Report.take_next``) was
answered by a lease statement run after its transaction's writes
(``Reports._take_next``): the task's row went in PENDING, then the statement found
it, updated it RUNNING under the lease and wrote its ``task.leased`` history row —
a second write of the row and a statement of its own in every group commit of a
chain, a sixth of the database's time a W1 step. Where nothing may hold the
dispatch back (no paused run, no admission step: ``Writes.admitting``), what that
statement checks of a task created in the same transaction is known before its
insert: it is due at once, on the offer's queue, of a node type the handler runs, on
a queue the worker's credentials cover, and its input is small enough for an
answer. Such a task is inserted RUNNING with its lease (``repo.NewLease``), its
history row goes with the transaction's others, and it never has an outbox row.
Every other offer goes the way it went (``_take_next``): the same answer either way.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import deque
from collections.abc import Callable, Mapping, Sequence

import composer_repo as repo
from composer_common import limits
from composer_core.model import TaskState, WorkflowDAG
from composer_core.statemachine import Run
from composer_core.templates import Json
from composer_engine._leases import LeaseGrant, worker_input
from composer_engine._leasing import NEXT_TASK_MAX_INPUT
from composer_engine._reported import NextTask, Report
from composer_engine._tx import Tx
from composer_engine._writes import with_band
from composer_engine.sealing import Sealer, SealingError


@dataclasses.dataclass(frozen=True, slots=True)
class Decided:
    """A run the group commit decided: its definition, its snapshot as locked (its
    workflow and version) and its priority (None: the default)."""

    dag: WorkflowDAG
    run: Run
    priority: int | None


def lease_ahead(
    tx: Tx,
    offers: Sequence[tuple[int, Report]],
    runs: Mapping[str, Decided],
    *,
    new_token: Callable[[], str],
    sealer: Sealer,
    max_input_bytes: int | None,
) -> dict[int, NextTask]:
    """Lease to the worker of each of ``offers`` (a report's position in its batch and
    the report, accepted and offering, in order) the first task its run dispatched in
    the transaction on the offer's queue, when that task is created in it and may be
    leased before its insert; returns the answers, by position. The tasks leased
    leave ``tx.writes.dispatches`` and their offers ``tx.writes.offers``."""
    writes = tx.writes
    now = tx.now
    max_bytes = (
        NEXT_TASK_MAX_INPUT
        if max_input_bytes is None
        else min(max_input_bytes, NEXT_TASK_MAX_INPUT)
    )
    if not offers or now is None or writes.clear_inputs is None or writes.admitting(tx):
        return {}
    new = {
        t.task_id: k
        for k, t in enumerate(writes.tasks)
        if t.state is TaskState.PENDING and not t.waits and t.lease is None
    }
    if not new:
        return {}
    # the dispatches due at once, by run and queue, in order: _take_next's candidates
    candidates: dict[tuple[str, str], deque[int]] = {}
    for j, (row, _, _, at_once, _) in enumerate(writes.dispatches):
        if at_once:
            candidates.setdefault((row.run_id, row.queue), deque()).append(j)
    answers: dict[int, NextTask] = {}
    taken: set[int] = set()
    for i, report in offers:
        offer, reporter = report.take_next, report.reporter
        assert offer is not None and reporter is not None
        # the dispatch _take_next would have matched: the run's first on the queue
        left = candidates.get((report.run_id, offer.queue))
        if not left:
            continue
        found = left.popleft()
        row, ref, fields, _, _ = writes.dispatches[found]
        k = new.get(ref.task_id)
        decided = runs.get(report.run_id)
        if k is None or decided is None or offer.ttl <= 0:
            continue
        task = writes.tasks[k]
        if reporter.queues is not None and task.queue not in reporter.queues:
            continue  # Forbidden: the lease statement says so
        if offer.node_types is not None and task.node_type not in offer.node_types:
            continue  # published, as the lease statement would have it
        node = decided.dag.worker_node(task.node_id)
        # within the node input limit and the 16 KiB of an answer; a task over either
        # goes as it always went (the lease statement refuses it, or fails it)
        lease_input, encoded = worker_input(writes.clear_inputs.get(task.task_id), node, max_bytes)
        if isinstance(encoded, limits.Refusal):
            continue
        context = _opened(sealer, report.run_id, task.context)
        if isinstance(context, SealingError):
            continue  # parked by the lease statement's grant, which says why
        token = new_token()
        expires_at = now + dt.timedelta(seconds=offer.ttl)
        writes.tasks[k] = dataclasses.replace(
            task,
            state=TaskState.RUNNING,
            lease=repo.NewLease(reporter.owner, token, expires_at),
        )
        writes.history.append(
            repo.NewHistory(
                report.run_id,
                "task.leased",
                node_id=task.node_id,
                task_id=task.task_id,
                attempt=ref.attempt,
                actor=reporter.owner,
            )
        )
        writes.offers[(row.run_id, row.queue)] -= 1
        taken.add(found)
        with_band(fields, decided.priority)
        answers[i] = NextTask(
            fields,
            LeaseGrant(
                True,
                input=lease_input,
                expires_at=expires_at,
                max_attempts=task.max_attempts or 0,
                token=token,
                node_id=task.node_id,
                node_type=task.node_type,
                workflow_id=decided.run.workflow_id,
                workflow_version=decided.run.version,
                timeout_seconds=node.timeout_seconds if node is not None else None,
                input_json=encoded,
                context=context,
                priority=decided.priority,
            ),
        )
    if taken:
        writes.dispatches = [d for j, d in enumerate(writes.dispatches) if j not in taken]
    return answers


def _opened(sealer: Sealer, run_id: str, context: Json) -> Json | SealingError:
    """The task's copy of its run's calling context, opened (None: none)."""
    if context is None:
        return None
    try:
        return sealer.open(run_id, context)
    except SealingError as exc:
        return exc
