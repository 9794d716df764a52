"""Statuses of runs and tasks; the kinds of node are composer_core.kinds' (docs/architecture.md §2)."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType

from pydantic import BaseModel

from composer_core.kinds import BUILTIN_QUEUES, KINDS, RESERVED_QUEUES, NodeType

__all__ = [
    "BUILTIN_QUEUES",
    "NODE_SPECS",
    "RESERVED_QUEUES",
    "NodeType",
    "RunStatus",
    "TaskState",
]


class RunStatus(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    # Not finished: held by a person (POST /v1/runs/{id}/pause) until resumed. A client
    # that reads "not RUNNING" as "finished" misreads it (temporalio/api#653): test
    # is_terminal. Its running attempts finish and are recorded; nothing new goes.
    PAUSED = "PAUSED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    # A cancel is its own terminal status: users asked "did it fail or did
    # someone stop it?" often enough that FAILED-with-a-reason was not clear.
    CANCELLED = "CANCELLED"

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL_RUN


_TERMINAL_RUN = frozenset({RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED})


class TaskState(StrEnum):
    PENDING = "PENDING"  # created; its dispatch sits in the outbox
    QUEUED = "QUEUED"  # in a stream, waiting for a worker
    RUNNING = "RUNNING"  # leased by a worker
    WAITING = "WAITING"  # parked on a timer or a signal
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    SKIPPED = "SKIPPED"
    # Stopped by a cancel of its run, not failed: a wait someone cancelled did not
    # fail, and showing it FAILED sent people looking for an error that never was.
    CANCELLED = "CANCELLED"

    @property
    def is_with_worker(self) -> bool:
        """On its way to, or held by, a worker: reports for it may still arrive."""
        return self in _WITH_WORKER

    @property
    def is_active(self) -> bool:
        """Still has to finish before the run can."""
        return self in _WITH_WORKER or self is TaskState.WAITING


_WITH_WORKER = frozenset({TaskState.PENDING, TaskState.QUEUED, TaskState.RUNNING})


#: The spec model of each node type (its kind's).
NODE_SPECS: Mapping[NodeType, type[BaseModel]] = MappingProxyType(
    {node_type: kind.spec_model for node_type, kind in KINDS.items()}
)
