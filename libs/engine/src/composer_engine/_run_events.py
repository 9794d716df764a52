"""Events between runs: what a run's end tells its parent's node, and what a
parent's cancel tells its children (docs/architecture.md §4.10).

Such an event is an outbox row of kind ``run_event``, written in the
transaction of its cause and deleted by the transaction that applies it, under
the target run's lock; so it is applied once, however many deliverers race or
retry. The committer delivers it right after its commit (in the background:
its caller does not wait for another run's transaction); the outbox-enqueuer
delivers what a committer did not (it died between commit and delivery, or
the target's transaction failed) once it is ``grace`` seconds old. The event is
fenced like a worker's report: a completion or failure names the node's task
and attempt, and the machine ignores one whose attempt has moved on; a cancel
of a run that has finished meanwhile changes nothing.

Documents in the payload (a child's output and error, a cancel's reason) are
sealed under the sending run's key, named in the payload (``from``), and
sealed again under the target's key when the event is applied.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import composer_repo as repo
from composer_core.model import RunStatus
from composer_core.statemachine import (
    FinishRun,
    NodeCompleted,
    NodeFailed,
    RunCancelled,
    RunStarted,
)
from composer_engine.sealing import RunSeal, Sealer

#: The events one run may send another (the row's ``destination``).
NODE_COMPLETED = "node_completed"
NODE_FAILED = "node_failed"
RUN_CANCELLED = "run_cancelled"
#: Starts a PENDING run: one handed its key's slot (§4.13), or a child run its
#: parent's node wrote (engine/_children.py, §4.15).
RUN_STARTED = "run_started"

#: The error codes a parent's node fails with when its child run did not succeed.
CHILD_FAILED = "child_failed"
CHILD_CANCELLED = "child_cancelled"

RunEvent = NodeCompleted | NodeFailed | RunCancelled | RunStarted


def child_finished(
    parent: repo.ParentRef, child_run_id: str, finish: FinishRun, seal: RunSeal
) -> repo.NewRunEvent:
    """The event a finished run sends the node it was started for: completed with
    its output, or failed with its error (its run id in the text)."""
    about: dict[str, Any] = {
        "from": child_run_id,
        "node_id": parent.node_id,
        "attempt": parent.attempt,
    }
    if finish.status is RunStatus.SUCCEEDED:
        return repo.NewRunEvent(
            parent.run_id,
            parent.task_id,
            NODE_COMPLETED,
            {**about, "output": seal.doc(finish.output)},
        )
    status = finish.status.value
    detail = f": {finish.error}" if finish.error else ""
    return repo.NewRunEvent(
        parent.run_id,
        parent.task_id,
        NODE_FAILED,
        {
            **about,
            "error": seal.text(f"child run {child_run_id} {status}{detail}"),
            "error_code": CHILD_CANCELLED if finish.status is RunStatus.CANCELLED else CHILD_FAILED,
        },
    )


def cancel_child(
    child_run_id: str, parent_run_id: str, reason: str, seal: RunSeal
) -> repo.NewRunEvent:
    """The event a cancelled run sends each of its children still going."""
    text = f"its parent run {parent_run_id} was cancelled" + (f": {reason}" if reason else "")
    return repo.NewRunEvent(
        child_run_id, None, RUN_CANCELLED, {"from": parent_run_id, "reason": seal.text(text)}
    )


def cancel_item_child(
    child_run_id: str, parent_run_id: str, reason: str, seal: RunSeal
) -> repo.NewRunEvent:
    """The event a MAP sends the child of each of its items it cancelled (fail_fast, or
    its run's cancel)."""
    text = f"its MAP item in run {parent_run_id} was cancelled" + (f": {reason}" if reason else "")
    return repo.NewRunEvent(
        child_run_id, None, RUN_CANCELLED, {"from": parent_run_id, "reason": seal.text(text)}
    )


def displaced(victim_run_id: str, new_run_id: str, text: str, seal: RunSeal) -> repo.NewRunEvent:
    """The cancel a run of a ``cancel_in_progress`` key sends the oldest running run of
    that key, whose slot it took."""
    return repo.NewRunEvent(
        victim_run_id, None, RUN_CANCELLED, {"from": new_run_id, "reason": seal.text(text)}
    )


def slot_handed(waiting: repo.WaitingRun, from_run_id: str) -> repo.NewRunEvent:
    """The start a run that freed its key's slot sends the run that goes next."""
    return repo.NewRunEvent(
        waiting.run_id,
        None,
        RUN_STARTED,
        {"from": from_run_id, "start_node": waiting.start_node},
    )


def start_run(
    child_run_id: str, parent_run_id: str, *, not_before: dt.datetime | None = None
) -> repo.NewRunEvent:
    """The event that starts a child run its parent's node wrote PENDING."""
    return repo.NewRunEvent(
        child_run_id, None, RUN_STARTED, {"from": parent_run_id}, not_before=not_before
    )


def attempt_failed(
    attempt: repo.ParentRef, error: str, code: str, seal: RunSeal
) -> repo.NewRunEvent:
    """The event a run sends its own node attempt that could not start its child: it
    fails for good (no retry would start one either)."""
    return repo.NewRunEvent(
        attempt.run_id,
        attempt.task_id,
        NODE_FAILED,
        {
            "from": attempt.run_id,
            "node_id": attempt.node_id,
            "attempt": attempt.attempt,
            "error": seal.text(error),
            "error_code": code,
            "permanent": True,
        },
    )


class UnknownRunEvent(ValueError):
    """A run event row this engine cannot read (written by a newer one, or damaged)."""


def decode(taken: repo.TakenRunEvent, sealer: Sealer) -> RunEvent:
    """The event a ``run_event`` row holds, its documents opened with the sender's key."""
    payload = taken.payload
    if not isinstance(payload, dict) or not isinstance(payload.get("from"), str):
        raise UnknownRunEvent(f"run event {taken.event!r} for run {taken.run_id} has no sender")
    sender = payload["from"]
    match taken.event:
        case "node_completed" if taken.task_id is not None:
            return NodeCompleted(
                taken.task_id,
                payload["node_id"],
                int(payload["attempt"]),
                sealer.open(sender, payload.get("output")),
            )
        case "node_failed" if taken.task_id is not None:
            return NodeFailed(
                taken.task_id,
                payload["node_id"],
                int(payload["attempt"]),
                sealer.open_text(sender, payload.get("error")) or "its child run failed",
                payload.get("error_code"),
                permanent=payload.get("permanent") is True,
            )
        case "run_cancelled":
            return RunCancelled(sealer.open_text(sender, payload.get("reason")) or "")
        case "run_started":
            start_node = payload.get("start_node")
            return RunStarted(start_node if isinstance(start_node, str) else None)
    raise UnknownRunEvent(
        f"run event {taken.event!r} for run {taken.run_id} is not one this engine knows "
        f"({NODE_COMPLETED}, {NODE_FAILED}, {RUN_CANCELLED}, {RUN_STARTED}): is a newer "
        "engine writing them?"
    )


def sender(taken: repo.TakenRunEvent) -> str | None:
    """The run that sent the event, for the history's "by"."""
    payload = taken.payload
    value = payload.get("from") if isinstance(payload, dict) else None
    return value if isinstance(value, str) else None
