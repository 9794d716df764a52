"""What a worker reports of one attempt: its outcome (``Report``) and its log lines.

A leaf module: the persistence of a transaction (``_writes``) stores the log, and
the reports use case (``_reports``) applies the report; neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass

from composer_core.model import NodeType
from composer_core.statemachine import NodeCompleted, NodeFailed
from composer_core.templates import Json
from composer_engine._leases import LeaseGrant, Reporter


@dataclass(frozen=True, slots=True)
class AttemptLog:
    """The lines a worker attempt logged, as the worker bounded them: ``truncated``
    lines past its bound were dropped (the last line kept is a marker that says so)."""

    lines: tuple[str, ...]
    truncated: int = 0


@dataclass(frozen=True, slots=True)
class TakeNext:
    """A reporting worker's offer to run a task its report dispatches, on the handler
    it reports from (docs/architecture.md §3.2): a task ready now on ``queue``, of one
    of ``node_types`` (None: not said), is leased to it for ``ttl`` seconds in the
    report's own transaction, and answered with the report, never published."""

    queue: str
    node_types: frozenset[NodeType] | None
    ttl: float


@dataclass(frozen=True, slots=True)
class NextTask:
    """An accepted report's answer when a task was leased to its worker with it: the
    task's stream message (what an entry would have carried) and its lease."""

    fields: dict[str, str]
    grant: LeaseGrant


@dataclass(frozen=True, slots=True)
class Report:
    """A worker's report of one attempt: its output (``completed``) or its failure."""

    run_id: str
    task_id: str
    node_id: str
    attempt: int
    #: The worker reporting: it counts only with the lease's token (None: the engine's
    #: own report, the sweeper's).
    reporter: Reporter | None
    completed: bool
    output: Json = None
    error: str = ""
    code: str | None = None
    permanent: bool = False
    #: What the attempt logged, stored with the report when it is applied (None: nothing).
    log: AttemptLog | None = None
    #: The worker runs a task this report dispatches, if there is one for it (None: no).
    take_next: TakeNext | None = None

    def event(self) -> NodeCompleted | NodeFailed:
        if self.completed:
            return NodeCompleted(self.task_id, self.node_id, self.attempt, self.output)
        return NodeFailed(
            self.task_id, self.node_id, self.attempt, self.error, self.code, self.permanent
        )
