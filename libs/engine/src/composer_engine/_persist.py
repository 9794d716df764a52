"""Actions to SQL, in as few statements as the data allows.

The hot actions — complete a task, insert a task, dispatch it, finish a run —
are held back in the transaction's ``Writes`` and go, at the end of the
transaction, in one statement per kind for every event of it (a group commit
holds many): completions, then new tasks, then their outbox rows, then the
finished runs. Any other action first flushes what is held, then is written
by itself, so the order the machine emitted is kept wherever it matters. Any
write that matches no row raises StaleSnapshot, which rolls the whole
transaction back (docs/architecture.md §3). Side effects that must wait for
the commit — hints and logs — are registered on the Tx.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from typing import assert_never

import composer_queue as cq
import composer_repo as repo
from composer_core.model import NodeLine, RunStatus, TaskState, WorkflowDAG
from composer_core.statemachine import (
    Action,
    BufferSignal,
    CancelItems,
    CancelTasks,
    CompleteTask,
    ConsumeSignal,
    CreateTask,
    DispatchTask,
    FailTask,
    FinishRun,
    MapProgressed,
    ReopenRun,
    ResolveWait,
    RetryTask,
    Run,
    StartChild,
    StartItem,
)
from composer_core.templates import Json
from composer_engine._children import ChildHost, cancel_item_children, item_child, start_child
from composer_engine._effects import Effects
from composer_engine._metrics import instruments
from composer_engine._tx import Tx
from composer_engine.errors import StaleSnapshot
from composer_engine.sealing import RunSeal

log = logging.getLogger("composer.engine")


async def persist(
    tx: Tx,
    dag: WorkflowDAG,
    run: Run,
    actions: Sequence[Action],
    seal: RunSeal,
    *,
    context: Json = None,
    children: ChildHost | None = None,
) -> Effects:
    """Write ``actions`` in order, every document sealed by ``seal``; a write that
    matches no row raises StaleSnapshot.

    ``context``, the run's calling context as stored (sealed when the run is; None:
    none), is copied as it is onto the row of every task whose kind carries it (TASK,
    ``NodeKind.carries_context``): its lease hands it to the user's handler without
    reading the run's row. Other tasks (control, waits, the built-in executors' nodes)
    carry none.

    ``children`` starts the child run of a sub-workflow node's attempt (StartChild:
    engine/_children.py); None only where no such node runs (a test's engine)."""
    doc, text = seal.doc, seal.text
    effects = Effects()
    conn, run_id = tx.conn, run.run_id
    writes = tx.writes
    if run.status is RunStatus.PAUSED:  # what it dispatches waits for its resume
        writes.paused.add(run_id)
    for action in actions:
        match action:
            case CreateTask() if action.branches is None:
                worker = action.node_type.is_worker
                writes.tasks.append(
                    repo.NewTask(
                        action.task_id,
                        run_id,
                        action.node_id,
                        action.node_type,
                        action.state,
                        input=doc(action.input),
                        output=doc(action.output),
                        error=text(action.error),
                        wake_at=action.wake_at,
                        awaited_signal=action.awaited_signal,
                        queue=dag.queue(action.node_id) if worker else None,
                        max_attempts=(
                            dag.retry_policy(action.node_id).max_attempts if worker else None
                        ),
                        context=context if action.node_type.kind.carries_context else None,
                        error_code=action.error_code,
                        item=action.item,
                        waits=action.waits,
                        map_progress=(
                            None if action.map_progress is None else action.map_progress.as_json()
                        ),
                    )
                )
                if worker and writes.clear_inputs is not None:
                    writes.clear_inputs[action.task_id] = action.input
                if action.wake_at is not None:
                    effects.wake_timer = True
                effects.created.append((action.node_type.value, action.state.value))
                if (
                    worker
                    and action.state is TaskState.PENDING
                    and (line := dag.node_line(action.node_id)) is not None
                ):
                    # its keys go on its row as it is inserted (a waiting MAP item's too)
                    writes.lines[action.task_id] = line.with_keys(action.keys)
            case DispatchTask():
                at_once = writes.dispatch(
                    tx,
                    repo.TaskRef(run_id, action.task_id, action.node_id, 0),
                    queue=action.queue,
                    not_before=action.not_before,
                    line=dag.node_line(action.node_id),
                )
                effects.wake_enqueuer |= not at_once
            case CompleteTask():
                ref = repo.TaskRef(run_id, action.task_id, action.node_id, action.attempt)
                # the row's concurrency key is freed as it completes (Writes.flush)
                writes.completions.append((ref, doc(action.output), effects))
            case StartItem():
                writes.starts.append((run_id, action.task_id))
                if action.queue is None:  # an inner SUB_WORKFLOW's: StartChild follows
                    continue
                at_once = writes.dispatch(
                    tx,
                    repo.TaskRef(run_id, action.task_id, action.node_id, 0),
                    queue=action.queue,
                    not_before=None,
                    line=dag.node_line(action.node_id),
                )
                effects.wake_enqueuer |= not at_once
            case MapProgressed():
                writes.progress[(run_id, action.task_id)] = action.progress.as_json()
            case CancelItems():
                await writes.flush(tx)
                cancelled = await repo.cancel_items(
                    conn, run_id, action.node_id, reason=text(action.reason) or ""
                )
                line = dag.node_line(action.node_id)
                keys: list[str | None] = [line.key] if line is not None else []
                if line is not None and line.templated:
                    keys = [*await stored_keys(tx, run_id, [t for t, _ in cancelled])]
                writes.free(tx, [queue for _, queue in cancelled] + keys)
                if (
                    cancelled
                    and dag.queue(action.node_id) is None  # a MAP of SUB_WORKFLOWs
                    and not _cancels_run(actions)  # then the run's cancel reaches them
                ):
                    await cancel_item_children(
                        tx, run_id, [task_id for task_id, _ in cancelled], action.reason, seal
                    )
            case FinishRun():
                writes.finishes.append((run, action, effects, seal))
                if dag.flow is not None and dag.flow.max_runs is not None:
                    writes.slot_holders.add(run_id)
                effects.finished = action
            case CreateTask():  # a SWITCH with its branches: written by itself
                await writes.flush(tx)
                worker = action.node_type.is_worker
                if not await repo.insert_task(
                    conn,
                    run_id,
                    action.task_id,
                    action.node_id,
                    node_type=action.node_type,
                    state=action.state,
                    input=doc(action.input),
                    output=doc(action.output),
                    error=text(action.error),
                    branches=action.branches,
                    wake_at=action.wake_at,
                    awaited_signal=action.awaited_signal,
                    queue=dag.queue(action.node_id) if worker else None,
                    max_attempts=dag.retry_policy(action.node_id).max_attempts if worker else None,
                    context=context if action.node_type.kind.carries_context else None,
                ):
                    raise StaleSnapshot(f"node {action.node_id} of run {run_id} already has a task")
                if action.wake_at is not None:
                    effects.wake_timer = True
                effects.created.append((action.node_type.value, action.state.value))
            case FailTask():
                await writes.flush(tx)
                ref = repo.TaskRef(run_id, action.task_id, action.node_id, action.attempt)
                done = await repo.fail_task(
                    conn, ref, text(action.error) or "", error_code=action.error_code
                )
                if done is None:
                    raise StaleSnapshot(
                        f"task {action.task_id} attempt {action.attempt} is not active"
                    )
                effects.failed.append(done.node_type.value)
                writes.free(tx, [done.queue, done.limit_key])
            case RetryTask():
                await writes.flush(tx)
                ref = repo.TaskRef(run_id, action.task_id, action.node_id, action.attempt)
                requeued = await repo.requeue_task(
                    conn,
                    ref,
                    text(action.error) or "",
                    error_code=action.error_code,
                    not_before=action.not_before,
                )
                if requeued is None:
                    raise StaleSnapshot(
                        f"task {action.task_id} attempt {action.attempt} cannot be retried"
                    )
                effects.retried += 1
                if action.queue is None:  # a sub-workflow's: a new child (StartChild follows)
                    continue
                at_once = await write_dispatch(
                    tx,
                    repo.TaskRef(run_id, action.task_id, action.node_id, requeued.attempt),
                    queue=action.queue,
                    not_before=action.not_before,
                    line=dag.node_line(action.node_id),
                )
                if requeued.limit_key is not None:  # the failed attempt's place: next in line
                    writes.free(tx, [requeued.limit_key])
                effects.wake_enqueuer |= not at_once
            case StartChild():
                await writes.flush(tx)
                parent = repo.ParentRef(run_id, action.node_id, action.task_id, action.attempt)
                started, stored = await repo.start_child_task(conn, parent)
                if not started:
                    raise StaleSnapshot(
                        f"task {action.task_id} attempt {action.attempt} is not active"
                    )
                if children is None:  # pragma: no cover - every engine's shell is one
                    raise AssertionError("a sub-workflow node ran where no child can start")
                child = action.child
                if action.item is not None:  # a MAP item's: its stored, rendered spec
                    child = item_child(dag, action.node_id, children.sealer.open(run_id, stored))
                await start_child(
                    tx,
                    children,
                    parent,
                    action.child_run_id,
                    child,
                    parent_seal=seal,
                    # a paused parent's child starts at its resume (§4.14)
                    not_before=repo.CHILD_START_HELD
                    if run.status is RunStatus.PAUSED
                    else action.not_before,
                )
                effects.wake_enqueuer |= action.not_before is not None
            case ResolveWait():  # held: a group commit of timers resolves its waits at once
                writes.resolved.append(
                    repo.ResolvedWait(
                        run_id,
                        action.task_id,
                        action.node_id,
                        action.state,
                        doc(action.output),
                        text(action.error),
                    )
                )
            case BufferSignal():
                await writes.flush(tx)
                await repo.buffer_signal(
                    conn, run_id, action.signal_id, action.name, doc(action.payload)
                )
            case ConsumeSignal():
                await writes.flush(tx)
                if not await repo.consume_signal(
                    conn, run_id, action.signal_id, node_id=action.node_id
                ):
                    raise StaleSnapshot(f"signal {action.signal_id} is not pending")
            case ReopenRun():
                await writes.flush(tx)
                await repo.reopen_run(
                    conn,
                    run_id,
                    version=action.version,
                    input=doc(action.input),
                    config=doc(action.config),
                    reset_nodes=action.reset_nodes,
                )
            case CancelTasks():
                await writes.flush(tx)
                # the reason is each cancelled task's error: sealed as any error is
                cancelled_ids = await repo.cancel_tasks(
                    conn, run_id, action.task_ids, reason=text(action.reason) or ""
                )
                if tx.gate is not None:  # their queues are not known here: look at all
                    writes.free(tx, [*tx.gate.queues(), *(line.key for line in dag.node_lines)])
                    if dag.templated_keys:
                        writes.free(tx, await stored_keys(tx, run_id, cancelled_ids))
            case _:
                assert_never(action)
    return effects


async def stored_keys(tx: Tx, run_id: str, task_ids: list[str]) -> list[str]:
    """The concurrency keys on these tasks' rows (rendered from their nodes' templates),
    for a release after a cancel or a pause (nothing asked when there is no release)."""
    if tx.gate is None or not task_ids:
        return []
    stored = await repo.task_limit_keys(
        tx.conn, [repo.TaskRef(run_id, task_id, "", 0) for task_id in task_ids]
    )
    return sorted({key for key, _ in stored.values() if key is not None})


async def write_dispatch(
    tx: Tx,
    ref: repo.TaskRef,
    *,
    queue: str,
    not_before: dt.datetime | None,
    admit: bool = True,
    line: NodeLine | None = None,
) -> bool:
    """The outbox row that sends attempt ``ref`` to ``queue`` from ``not_before`` on
    (None: at once), written after the task row (inserted, requeued, or made due
    again). Every dispatch goes through here: the first, a retry's, and the
    sweeper's redispatch of a lost one (Engine.redispatch).

    True when it is due at once: the engine publishes it right after the commit
    (``Tx.dispatched``). False when it is delayed: the outbox-enqueuer publishes
    it when it comes due. ``admit`` False: an attempt admitted before and only sent
    again, which the admission step does not hold. ``line``: the node concurrency key
    it goes through (None: its queue's limit, if any)."""
    at_once = tx.writes.dispatch(
        tx, ref, queue=queue, not_before=not_before, admit=admit, line=line
    )
    await tx.writes.flush(tx)  # at once: its task row was just written, by itself
    return at_once


def announce(
    tx: Tx,
    effects: Effects,
    *,
    redis: cq.Queue | None,
    prefix: str,
    run: Run,
    log_error: bool = True,
) -> None:
    """After commit: wake the loops that have new work, and log a finished run (with
    its error only when ``log_error``: a sealed run's error is never logged)."""
    if redis is not None:
        # read after the commit: a finished run's webhook row is written at the flush
        tx.after_commit(lambda: _wake_enqueuer(tx, redis, prefix, effects))
        if effects.wake_timer:
            tx.hint(redis, prefix, cq.TIMER)
        if effects.finished is not None:
            tx.hint(redis, prefix, cq.RUN_FINISHED, run.run_id)
    tx.after_commit(lambda: _record(tx, effects))
    finished = effects.finished
    if finished is not None:
        detail = f": {finished.error}" if finished.error and log_error else ""
        tx.after_hints(
            lambda: log.info(
                "run %s of %s v%d %s%s",
                run.run_id,
                run.workflow_id,
                run.version,
                finished.status,
                detail,
            )
        )


def _wake_enqueuer(tx: Tx, redis: cq.Queue, prefix: str, effects: Effects) -> None:
    if effects.wrote_webhook:
        tx.hint(redis, prefix, cq.ENQUEUER, cq.WEBHOOK)
    elif effects.wake_enqueuer:
        tx.hint(redis, prefix, cq.ENQUEUER)


def _record(tx: Tx, effects: Effects) -> None:
    m = instruments()
    # counted by the transaction: one add per kind for the whole group commit
    for node_type, state in effects.created:
        tx.count(m.tasks_created, 1, {"node_type": node_type, "state": state})
    for node_type, seconds in effects.completed:
        tx.count(m.tasks_completed, 1, {"node_type": node_type})
        if seconds is not None:
            m.task_duration.record(seconds, {"node_type": node_type})
    for node_type in effects.failed:
        tx.count(m.tasks_failed, 1, {"node_type": node_type})
    if effects.retried:
        tx.count(m.tasks_retried, effects.retried)
    if effects.finished is not None and effects.finished_run is not None:
        status = effects.finished.status.value
        tx.count(
            m.runs_finished, 1, {"status": status, "workflow_id": effects.finished_run.workflow_id}
        )
        m.run_duration.record(effects.finished_run.duration.total_seconds(), {"status": status})


def _cancels_run(actions: Sequence[Action]) -> bool:
    return any(isinstance(a, FinishRun) and a.status is RunStatus.CANCELLED for a in actions)
