"""The values the engine's use cases answer with, by name, for the services that
annotate with them (a service never imports composer_repo: docs/architecture.md §1).

They are the repository's records: the read side hands them on as read (opened or
redacted), so naming them here adds no copy.
"""

from __future__ import annotations

from composer_repo import (
    BackfillRecord,
    Definition,
    DefinitionVersion,
    Dropped,
    DueWait,
    ExpiredLease,
    HistoryEntry,
    LeaseRequest,
    LostDispatch,
    OperationRecord,
    OutboxMessage,
    ScheduleEvent,
    ScheduleRecord,
    TaskAttempt,
    TaskLogRecord,
    TaskRecord,
    TaskRef,
    UnservedQueue,
    WorkerBeat,
    WorkerRecord,
    WorkerState,
    WorkflowSummary,
)

__all__ = [
    "BackfillRecord",
    "Definition",
    "DefinitionVersion",
    "Dropped",
    "DueWait",
    "ExpiredLease",
    "HistoryEntry",
    "LeaseRequest",
    "LostDispatch",
    "OperationRecord",
    "OutboxMessage",
    "ScheduleEvent",
    "ScheduleRecord",
    "TaskAttempt",
    "TaskLogRecord",
    "TaskRecord",
    "TaskRef",
    "UnservedQueue",
    "WorkerBeat",
    "WorkerRecord",
    "WorkerState",
    "WorkflowSummary",
]
