"""Statuses of runs and tasks, and the kinds of node (docs/architecture.md §2)."""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
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

    @property
    def is_final(self) -> bool:
        return not self.is_active


_WITH_WORKER = frozenset({TaskState.PENDING, TaskState.QUEUED, TaskState.RUNNING})


class NodeType(StrEnum):
    HTTP = "HTTP"
    PYTHON = "PYTHON"
    TASK = "TASK"
    SWITCH = "SWITCH"
    FORK = "FORK"
    JOIN = "JOIN"
    WAIT = "WAIT"
    WAIT_FOR_EVENT = "WAIT_FOR_EVENT"

    @property
    def is_worker(self) -> bool:
        """Executed by a worker through a queue (the others resolve in the coordinator)."""
        return self in _WORKER

    @property
    def is_control(self) -> bool:
        return self in _CONTROL

    @property
    def is_wait(self) -> bool:
        return self in _WAIT


_WORKER = frozenset({NodeType.HTTP, NodeType.PYTHON, NodeType.TASK})
_CONTROL = frozenset({NodeType.SWITCH, NodeType.FORK, NodeType.JOIN})
_WAIT = frozenset({NodeType.WAIT, NodeType.WAIT_FOR_EVENT})

#: Queues of the built-in executors; a TASK node names its own.
BUILTIN_QUEUES: dict[NodeType, str] = {NodeType.HTTP: "http", NodeType.PYTHON: "python"}
#: The built-in queues, each reserved for its node type: the built-in workers run what
#: they lease there as that type (an HTTP request, Python code), so no other node type
#: may be sent to one (docs/architecture.md §6.1).
RESERVED_QUEUES: dict[str, NodeType] = {queue: t for t, queue in BUILTIN_QUEUES.items()}
