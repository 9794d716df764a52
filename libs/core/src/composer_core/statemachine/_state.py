"""The run snapshot the machine decides on.

It holds, per reached node, only what routing needs: no inputs, and outputs
only in a cache filled on demand through the Store. Actions update it as they
are emitted, so a later decision in the same event sees the earlier ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from composer_core.model import RunStatus, TaskState
from composer_core.templates import Json


@dataclass(slots=True)
class NodeState:
    """A reached node: its one task's current state."""

    task_id: str
    state: TaskState
    attempt: int = 0
    #: The successors a completed SWITCH selected: recorded once, never re-evaluated.
    branches: tuple[str, ...] | None = None
    #: The signal a WAITING WAIT_FOR_EVENT node waits for.
    awaited_signal: str | None = None
    error: str | None = None

    def matches(self, task_id: str, attempt: int) -> bool:
        """The fencing check: a report counts only for the current task attempt."""
        return self.task_id == task_id and self.attempt == attempt


@dataclass(slots=True)
class Run:
    run_id: str
    workflow_id: str
    version: int
    status: RunStatus
    input: Json = None
    config: Json = None
    nodes: dict[str, NodeState] = field(default_factory=dict)
    #: Outputs loaded so far (node id → output): a cache, never the source of truth.
    outputs: dict[str, Json] = field(default_factory=dict)

    @property
    def is_terminal(self) -> bool:
        return self.status.is_terminal

    def active_nodes(self) -> list[str]:
        return [node_id for node_id, n in self.nodes.items() if n.state.is_active]

    def failed_nodes(self) -> list[str]:
        """Failed nodes, oldest task first (task ids are time-ordered)."""
        failed = [
            (n.task_id, node_id) for node_id, n in self.nodes.items() if n.state is TaskState.FAILED
        ]
        return [node_id for _, node_id in sorted(failed)]


@dataclass(frozen=True, slots=True)
class Signal:
    """A buffered signal no node was waiting for when it arrived."""

    signal_id: str
    name: str
    payload: Json = None
