"""The history rows of an applied event (composer_engine._history): what each
event and action becomes, and which values are sealed."""

from __future__ import annotations

import base64
import datetime as dt
import os

from composer_core.model import NodeType, RunStatus, TaskState
from composer_core.statemachine import (
    CancelTasks,
    CompleteTask,
    CreateTask,
    DispatchTask,
    FinishRun,
    NodeFailed,
    NodeState,
    ReopenRun,
    ResolveWait,
    RetryTask,
    Run,
    RunCancelled,
    RunResumed,
    RunRetried,
    RunStarted,
    SignalReceived,
)
from composer_engine._history import KINDS, rows
from composer_engine.sealing import PLAIN, PREFIX, sealer_from

RUN = Run(
    "0192f0c4-3b8a-7cc0-8000-000000000001",
    "wf",
    3,
    RunStatus.RUNNING,
    {"card": "4111"},
    None,
    nodes={
        "a": NodeState("task-a", TaskState.RUNNING),
        "w": NodeState("task-w", TaskState.WAITING, awaited_signal="go"),
    },
    signals=(),
)
AT = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)


def test_a_start_records_its_input_by_whom_and_what_it_scheduled() -> None:
    actions = (
        CreateTask("task-a", "a", NodeType.TASK, TaskState.PENDING),
        DispatchTask("task-a", "a", NodeType.TASK, "pay", AT),
    )
    out = rows(RUN, RunStarted(), actions, PLAIN, by="ci")
    # created and sent by one event: one row says both
    assert [(r.kind, r.node_id, r.actor) for r in out] == [
        ("run.started", None, "ci"),
        ("task.scheduled", "a", None),
    ]
    assert out[0].detail == {"version": 3, "input": {"card": "4111"}}
    assert out[1].detail == {
        "type": "TASK",
        "state": "PENDING",
        "queue": "pay",
        "not_before": AT.isoformat(),
    }
    assert {r.kind for r in out} <= set(KINDS)


def test_a_dispatch_of_a_task_created_before_has_a_row_of_its_own() -> None:
    # a MAP item's task made earlier, or any dispatch without its CreateTask beside it
    out = rows(
        RUN, RunResumed(), (DispatchTask("task-a", "a", NodeType.TASK, "pay", AT),), PLAIN, by=None
    )
    assert [(r.kind, r.task_id, r.attempt, r.detail) for r in out] == [
        ("run.resumed", None, None, None),
        ("task.dispatched", "task-a", 0, {"queue": "pay", "not_before": AT.isoformat()}),
    ]


def test_a_failed_attempt_keeps_its_error_and_when_it_is_retried() -> None:
    retry = RetryTask("task-a", "a", NodeType.TASK, 0, "card declined", "pay", AT, "declined")
    failed = NodeFailed("task-a", "a", 0, "card declined", "declined")
    [row] = rows(RUN, failed, (retry,), PLAIN, by=None)  # the report itself adds no row
    assert (row.kind, row.task_id, row.attempt) == ("task.retry_scheduled", "task-a", 0)
    assert row.detail == {
        "error": "card declined",
        "code": "declined",
        "retry_at": AT.isoformat(),
        "queue": "pay",
    }


def test_a_signal_taken_as_it_arrived_is_received_consumed_and_completes_the_wait() -> None:
    actions = (ResolveWait("task-w", "w", TaskState.COMPLETED, {"ok": 1}),)
    out = rows(RUN, SignalReceived("go", {"ok": 1}), actions, PLAIN, by="ops")
    assert [(r.kind, r.node_id, r.actor) for r in out] == [
        ("signal.received", None, "ops"),
        ("signal.consumed", "w", None),
        ("task.completed", "w", None),
    ]
    assert out[0].detail == {"name": "go", "buffered": False}


def test_a_cancel_names_each_cancelled_node_and_a_retry_its_version() -> None:
    cancel = rows(
        RUN,
        RunCancelled("customer called"),
        (CancelTasks("customer called", ("task-a", "task-w")), FinishRun(RunStatus.CANCELLED)),
        PLAIN,
        by="oncall",
    )
    assert [(r.kind, r.node_id) for r in cancel] == [
        ("run.cancelled", None),
        ("task.cancelled", "a"),
        ("task.cancelled", "w"),
        ("run.finished", None),
    ]
    retried = rows(RUN, RunRetried("w"), (ReopenRun(4, None, None, ("w",)),), PLAIN, by="release")
    assert [(r.kind, r.actor, r.detail) for r in retried] == [
        ("run.retried", "release", {"from_node": "w", "version": 4, "reset_nodes": ["w"]})
    ]


def test_a_sealed_run_seals_the_values_and_leaves_the_rest_plain() -> None:
    sealer = sealer_from(f"k1:{base64.b64encode(os.urandom(32)).decode()}")
    seal = sealer.for_run(RUN.run_id, sealer.new_data_key(RUN.run_id))
    retry = RetryTask("task-a", "a", NodeType.TASK, 0, "card 4111 declined", "pay", AT)
    out = rows(
        RUN,
        RunStarted(),
        (
            CreateTask("task-a", "a", NodeType.TASK, TaskState.PENDING),
            retry,
            CompleteTask("task-a", "a", 1),
        ),
        seal,
        by="ci",
    )
    started, scheduled, failed, completed = out
    assert isinstance(started.detail, str) and started.detail.startswith(PREFIX)
    assert isinstance(failed.detail, str) and "4111" not in failed.detail
    assert sealer.open(RUN.run_id, failed.detail)["error"] == "card 4111 declined"
    assert scheduled.detail == {"type": "TASK", "state": "PENDING"}  # nothing of the run's data
    assert completed.detail is None
