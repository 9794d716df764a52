"""The run snapshot the machine decides on, and the data it may ask for.

It holds, per reached node, only what routing needs: no inputs, and only the
outputs the caller loaded (``outputs``). The machine never loads anything: when
a template reads an output it was not given, or a WAIT_FOR_EVENT node needs
the buffered signals and ``signals`` is None, it answers ``Missing`` and the
caller applies the event again on the snapshot extended ``with_data``.

Everything here is frozen; a decision builds a new snapshot (``Transition.run``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from composer_core.model import RunStatus, TaskState
from composer_core.templates import Json


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
class Signal:
    """A buffered signal no node was waiting for when it arrived."""

    signal_id: str
    name: str
    payload: Json = None


@dataclass(frozen=True, slots=True)
class Run:
    """One run as the machine sees it. Treat the mappings as read-only."""

    run_id: str
    workflow_id: str
    version: int
    status: RunStatus
    input: Json = None
    config: Json = None
    nodes: Mapping[str, NodeState] = field(default_factory=dict)
    #: Outputs the caller loaded (node id → output): never the source of truth.
    outputs: Mapping[str, Json] = field(default_factory=dict)
    #: The buffered, unconsumed signals, oldest first; None when the caller did not
    #: load them (the machine then asks, if it needs them). ``()`` means none.
    signals: tuple[Signal, ...] | None = None

    @property
    def is_terminal(self) -> bool:
        return self.status.is_terminal

    def active_nodes(self) -> list[str]:
        return [node_id for node_id, n in self.nodes.items() if n.state.is_active]

    def failed_nodes(self) -> list[str]:
        """Failed (or cancelled) nodes, oldest task first (task ids are time-ordered)."""
        return _failed(self.nodes)

    def with_data(
        self, outputs: Mapping[str, Json] | None = None, signals: tuple[Signal, ...] | None = None
    ) -> Run:
        """This snapshot with more loaded outputs and (when given) the buffered signals."""
        return Run(
            self.run_id,
            self.workflow_id,
            self.version,
            self.status,
            self.input,
            self.config,
            self.nodes,
            {**self.outputs, **outputs} if outputs else self.outputs,
            self.signals if signals is None else signals,
        )


@dataclass(frozen=True, slots=True)
class Missing:
    """What the machine needs to decide and was not given: apply the event again on
    ``run.with_data(...)`` with these loaded. Nothing was decided."""

    #: Completed nodes whose outputs a template reads.
    outputs: frozenset[str] = frozenset()
    #: The run's buffered signals (``Run.signals`` was None).
    signals: bool = False


#: Final states a run cannot succeed with. CANCELLED counts: a node a cancel stopped that
#: a retry did not reset never ran, so the retried run must not pass for a success.
_UNSUCCESSFUL = frozenset({TaskState.FAILED, TaskState.CANCELLED})


def _failed(nodes: Mapping[str, NodeState]) -> list[str]:
    failed = [(n.task_id, node_id) for node_id, n in nodes.items() if n.state in _UNSUCCESSFUL]
    return [node_id for _, node_id in sorted(failed)]
