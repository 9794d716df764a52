"""What a worker reports of one attempt: its outcome (``Report``) and its log lines.

A leaf module: the persistence of a transaction (``_writes``) stores the log, and
the reports use case (``_reports``) applies the report; neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass

from composer_core.statemachine import NodeCompleted, NodeFailed
from composer_core.templates import Json
from composer_engine._leases import Reporter


@dataclass(frozen=True, slots=True)
class AttemptLog:
    """The lines a worker attempt logged, as the worker bounded them: ``truncated``
    lines past its bound were dropped (the last line kept is a marker that says so)."""

    lines: tuple[str, ...]
    truncated: int = 0


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

    def event(self) -> NodeCompleted | NodeFailed:
        if self.completed:
            return NodeCompleted(self.task_id, self.node_id, self.attempt, self.output)
        return NodeFailed(
            self.task_id, self.node_id, self.attempt, self.error, self.code, self.permanent
        )
