"""What an applied event did, as the run's history rows (docs/architecture.md §6.4).

task_instances keeps each node's current attempt only; the history keeps every
step: the event that came in (a start, a signal, a cancel, a retry from a node,
a timer) and each effect the machine decided (a task scheduled, dispatched,
completed, failed, retried, cancelled; the run finished). The rows go with the
transaction's other held writes (``Writes.history``, one statement per
transaction); leases are recorded by the lease statement itself
(``task.leased``, libs/repo queries.sql acquire_leases), or, for a task leased as
it is inserted, with the transaction's other rows (engine/_lease_ahead.py).

A row's ``detail`` holds the values a user may consider data — an error, a
reason, an input — sealed as one document when the run is sealed; the rest
(node types, states, queues, times) is plain, as it is in the task rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import assert_never

import composer_repo as repo
from composer_core.model import RunStatus, TaskState
from composer_core.statemachine import (
    Action,
    BufferSignal,
    CancelItems,
    CancelTasks,
    CompleteTask,
    ConsumeSignal,
    CreateTask,
    DispatchTask,
    Event,
    FailTask,
    FinishRun,
    MapProgressed,
    NodeCompleted,
    NodeFailed,
    ReopenRun,
    ResolveWait,
    RetryTask,
    Run,
    RunCancelled,
    RunResumed,
    RunRetried,
    RunStarted,
    SignalReceived,
    StartChild,
    StartItem,
    TimerFired,
)
from composer_core.templates import Json
from composer_engine import _run_events
from composer_engine.sealing import RunSeal

#: The kinds of history row, in the words the API, the CLI and the UI show.
KINDS = (
    "run.queued",
    "run.started",
    "task.scheduled",
    "task.dispatched",
    "task.held",
    "task.released",
    "task.leased",
    "task.completed",
    "task.failed",
    "task.retry_scheduled",
    "task.cancelled",
    "timer.fired",
    "signal.received",
    "signal.consumed",
    "run.cancelled",
    "run.paused",
    "run.resumed",
    "run.retried",
    "run.finished",
    "child.started",
    "child.finished",
)


def rows(
    before: Run,
    event: Event,
    actions: Sequence[Action],
    seal: RunSeal,
    *,
    by: str | None,
) -> list[repo.NewHistory]:
    """The history rows of ``event`` applied to ``before`` (the run as locked), which
    decided ``actions``. ``by``: the API token's name behind the event (start, signal,
    cancel, retry), or ``run <id>`` for an event another run sent (a child's end,
    on the rows of the task it completes or fails)."""
    run_id = before.run_id
    out: list[repo.NewHistory] = []
    add = out.append
    match event:
        case RunStarted():
            detail: dict[str, Json] = {"version": before.version, "input": before.input}
            if event.start_node:
                detail["start_node"] = event.start_node
            add(repo.NewHistory(run_id, "run.started", actor=by, detail=seal.doc(detail)))
        case SignalReceived():
            buffered = any(isinstance(a, BufferSignal) for a in actions)
            received: dict[str, Json] = {"name": event.name, "buffered": buffered}
            if before.status is RunStatus.PAUSED:  # kept for the resume, whoever waits
                received["paused"] = True
            # the wait it resolved as it arrived (none when it was buffered)
            taker = next((a.node_id for a in actions if isinstance(a, ResolveWait)), None)
            add(
                repo.NewHistory(
                    run_id,
                    "signal.received",
                    actor=by,
                    detail=received,
                )
            )
            if taker is not None:
                add(
                    repo.NewHistory(
                        run_id,
                        "signal.consumed",
                        node_id=taker,
                        task_id=_task_id(before, taker),
                        detail={"name": event.name},
                    )
                )
        case TimerFired():
            add(
                repo.NewHistory(run_id, "timer.fired", node_id=event.node_id, task_id=event.task_id)
            )
        case RunCancelled():
            add(
                repo.NewHistory(
                    run_id, "run.cancelled", actor=by, detail=seal.doc({"reason": event.reason})
                )
            )
        case RunRetried():
            reopen = next((a for a in actions if isinstance(a, ReopenRun)), None)
            detail = {"from_node": event.from_node}
            if reopen is not None:  # the version it moved to, which the event does not say
                detail["version"] = reopen.version
                detail["reset_nodes"] = list(reopen.reset_nodes)
            if event.input is not None:
                detail["input"] = event.input
            if event.config is not None:
                detail["config"] = event.config
            add(repo.NewHistory(run_id, "run.retried", actor=by, detail=seal.doc(detail)))
        case RunResumed():
            add(repo.NewHistory(run_id, "run.resumed", actor=by))
        case NodeCompleted() | NodeFailed():
            pass  # the actions say what the report did (completed, failed, retried)
        case _:
            assert_never(event)
    # A task created and sent to its queue by one event gets one row, task.scheduled
    # with the queue: the two said one thing at one time (a quarter of a chain
    # step's rows). task.dispatched stays for a dispatch of its own (a MAP item that
    # waited for a place, a dispatch sent again).
    sent = {a.task_id: a for a in actions if isinstance(a, DispatchTask)}
    created = {a.task_id for a in actions if isinstance(a, CreateTask)}
    for action in actions:
        match action:
            case CreateTask():
                scheduled: dict[str, Json] = {
                    "type": action.node_type.value,
                    "state": action.state.value,
                }
                if (dispatch := sent.get(action.task_id)) is not None:
                    scheduled["queue"] = dispatch.queue
                    scheduled["not_before"] = dispatch.not_before.isoformat()
                if action.branches is not None:
                    scheduled["branches"] = list(action.branches)
                if action.wake_at is not None:
                    scheduled["wake_at"] = action.wake_at.isoformat()
                if action.awaited_signal is not None:
                    scheduled["signal"] = action.awaited_signal
                if action.error is not None:  # a node created failed: its error is data
                    scheduled["error"] = action.error
                if action.error_code is not None:
                    scheduled["code"] = action.error_code
                if action.item is not None:
                    scheduled["item"] = action.item
                if action.map_progress is not None:
                    scheduled["items"] = action.map_progress.total
                add(
                    repo.NewHistory(
                        run_id,
                        "task.scheduled",
                        node_id=action.node_id,
                        task_id=action.task_id,
                        detail=scheduled if action.error is None else seal.doc(scheduled),
                    )
                )
            case DispatchTask() if action.task_id not in created:
                add(
                    repo.NewHistory(
                        run_id,
                        "task.dispatched",
                        node_id=action.node_id,
                        task_id=action.task_id,
                        attempt=0,
                        detail={"queue": action.queue, "not_before": action.not_before.isoformat()},
                    )
                )
            case DispatchTask():
                pass  # its task's task.scheduled row, above, names the queue
            case CompleteTask():
                add(
                    repo.NewHistory(
                        run_id,
                        "task.completed",
                        node_id=action.node_id,
                        task_id=action.task_id,
                        attempt=action.attempt,
                        actor=by,
                    )
                )
            case FailTask():
                add(
                    repo.NewHistory(
                        run_id,
                        "task.failed",
                        node_id=action.node_id,
                        task_id=action.task_id,
                        attempt=action.attempt,
                        actor=by,
                        detail=seal.doc({"error": action.error, "code": action.error_code}),
                    )
                )
            case RetryTask():
                add(
                    repo.NewHistory(
                        run_id,
                        "task.retry_scheduled",
                        node_id=action.node_id,
                        task_id=action.task_id,
                        attempt=action.attempt,
                        actor=by,
                        detail=seal.doc(
                            {
                                "error": action.error,
                                "code": action.error_code,
                                "retry_at": action.not_before.isoformat(),
                                "queue": action.queue,
                            }
                        ),
                    )
                )
            case StartChild():
                child: dict[str, Json] = {
                    "child_run_id": action.child_run_id,
                    "workflow_id": action.child.workflow_id,
                }
                if action.child.version is not None:
                    child["version"] = action.child.version
                if action.not_before is not None:
                    child["not_before"] = action.not_before.isoformat()
                if action.child.detached:
                    child["on_parent_cancel"] = "abandon"
                add(
                    repo.NewHistory(
                        run_id,
                        "child.started",
                        node_id=action.node_id,
                        task_id=action.task_id,
                        attempt=action.attempt,
                        detail=child,
                    )
                )
            case ResolveWait():
                if action.state is TaskState.COMPLETED:
                    add(
                        repo.NewHistory(
                            run_id, "task.completed", node_id=action.node_id, task_id=action.task_id
                        )
                    )
                else:
                    add(
                        repo.NewHistory(
                            run_id,
                            "task.failed" if action.state is TaskState.FAILED else "task.cancelled",
                            node_id=action.node_id,
                            task_id=action.task_id,
                            detail=seal.doc({"error": action.error}),
                        )
                    )
            case ConsumeSignal():
                name = action.name or next(
                    (s.name for s in before.signals or () if s.signal_id == action.signal_id), None
                )
                add(
                    repo.NewHistory(
                        run_id,
                        "signal.consumed",
                        node_id=action.node_id,
                        task_id=_task_id(before, action.node_id),
                        detail={"name": name, "signal_id": action.signal_id},
                    )
                )
            case CancelTasks():
                nodes = {n.task_id: node_id for node_id, n in before.nodes.items()}
                for task_id in action.task_ids:
                    add(
                        repo.NewHistory(
                            run_id,
                            "task.cancelled",
                            node_id=nodes.get(task_id),
                            task_id=task_id,
                            detail=seal.doc({"reason": action.reason}),
                        )
                    )
            case StartItem():
                add(
                    repo.NewHistory(
                        run_id,
                        "task.dispatched",
                        node_id=action.node_id,
                        task_id=action.task_id,
                        attempt=0,
                        detail={"queue": action.queue, "item": action.item},
                    )
                )
            case CancelItems():
                add(
                    repo.NewHistory(
                        run_id,
                        "task.cancelled",
                        node_id=action.node_id,
                        detail=seal.doc({"reason": action.reason, "items": "every unfinished"}),
                    )
                )
            case MapProgressed():
                pass  # the items' own rows say what moved it
            case ReopenRun():
                pass  # the run.retried row of the event says it, with the version below
            case BufferSignal():
                pass  # the signal.received row says it was buffered
            case FinishRun():
                add(
                    repo.NewHistory(
                        run_id,
                        "run.finished",
                        detail=seal.doc({"status": action.status.value, "error": action.error}),
                    )
                )
            case _:
                assert_never(action)
    return out


def child_finished(
    run_id: str, child_run_id: str, taken: repo.TakenRunEvent
) -> repo.NewHistory | None:
    """The parent's row for a child's end, applied to the node that started it (the
    task.completed or task.failed row beside it says what it did to the node)."""
    payload = taken.payload if isinstance(taken.payload, dict) else {}
    match taken.event:
        case _run_events.NODE_COMPLETED:
            status = "SUCCEEDED"
        case _run_events.NODE_FAILED:
            cancelled = payload.get("error_code") == _run_events.CHILD_CANCELLED
            status = "CANCELLED" if cancelled else "FAILED"
        case _:
            return None
    attempt = payload.get("attempt")
    return repo.NewHistory(
        run_id,
        "child.finished",
        node_id=payload.get("node_id") if isinstance(payload.get("node_id"), str) else None,
        task_id=taken.task_id,
        attempt=attempt if isinstance(attempt, int) else None,
        actor=f"run {child_run_id}",
        detail={"child_run_id": child_run_id, "status": status},
    )


def _task_id(run: Run, node_id: str) -> str | None:
    node = run.nodes.get(node_id)
    return None if node is None else node.task_id
