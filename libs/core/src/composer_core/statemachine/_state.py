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
from dataclasses import dataclass, field, replace

from composer_core.model import RunStatus, TaskState
from composer_core.templates import Json


@dataclass(frozen=True, slots=True)
class MapProgress:
    """How far a MAP node's items are (stored on the MAP's own task row, V021): what an
    event needs to go on, so that it never loads all items (docs/architecture.md §2)."""

    total: int
    #: Items [0, next) were sent to their queue; the others wait for a place.
    next: int = 0
    completed: int = 0
    failed: int = 0
    #: The indexes of the items sent and not finished, in the order they went.
    in_flight: tuple[int, ...] = ()

    @property
    def finished(self) -> int:
        return self.completed + self.failed

    def as_json(self) -> dict[str, Json]:
        return {
            "total": self.total,
            "next": self.next,
            "completed": self.completed,
            "failed": self.failed,
            "in_flight": list(self.in_flight),
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Json]) -> MapProgress:
        def count(key: str) -> int:
            v = value.get(key, 0)
            return v if isinstance(v, int) else 0

        in_flight = value.get("in_flight") or []
        return cls(
            count("total"),
            count("next"),
            count("completed"),
            count("failed"),
            tuple(i for i in in_flight if isinstance(i, int))
            if isinstance(in_flight, list)
            else (),
        )


@dataclass(frozen=True, slots=True)
class MapState:
    """A MAP node's items as an event sees them: its progress, and the item tasks it
    loaded (those in flight and the next to go, by index) — never all of them."""

    progress: MapProgress
    items: Mapping[int, NodeState] = field(default_factory=dict)

    def find(self, task_id: str) -> int | None:
        """The index of the item in flight whose task is ``task_id`` (None: none)."""
        for index in self.progress.in_flight:
            item = self.items.get(index)
            if item is not None and item.task_id == task_id:
                return index
        return None


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
    #: A MAP node: its items' progress and the items loaded (None: not a MAP).
    map: MapState | None = None

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
    #: The outputs of every item of the MAP nodes asked for (node id → one per item, in
    #: order: None for an item that failed), loaded when the machine asks (once, as the
    #: MAP completes).
    item_outputs: Mapping[str, tuple[Json, ...]] = field(default_factory=dict)

    @property
    def is_terminal(self) -> bool:
        return self.status.is_terminal

    def active_nodes(self) -> list[str]:
        return [node_id for node_id, n in self.nodes.items() if n.state.is_active]

    def failed_nodes(self) -> list[str]:
        """Failed (or cancelled) nodes, oldest task first (task ids are time-ordered)."""
        return _failed(self.nodes)

    def with_data(
        self,
        outputs: Mapping[str, Json] | None = None,
        signals: tuple[Signal, ...] | None = None,
        *,
        items: Mapping[str, Mapping[int, NodeState]] | None = None,
        item_outputs: Mapping[str, tuple[Json, ...]] | None = None,
    ) -> Run:
        """This snapshot with more loaded outputs, (when given) the buffered signals, more
        loaded MAP items (node id → index → state) and MAP item outputs."""
        nodes = self.nodes
        if items:
            nodes = dict(nodes)
            for node_id, loaded in items.items():
                old = nodes[node_id]
                if old.map is not None:
                    merged = MapState(old.map.progress, {**old.map.items, **loaded})
                    nodes[node_id] = replace(old, map=merged)
        return Run(
            self.run_id,
            self.workflow_id,
            self.version,
            self.status,
            self.input,
            self.config,
            nodes,
            {**self.outputs, **outputs} if outputs else self.outputs,
            self.signals if signals is None else signals,
            {**self.item_outputs, **item_outputs} if item_outputs else self.item_outputs,
        )


@dataclass(frozen=True, slots=True)
class Missing:
    """What the machine needs to decide and was not given: apply the event again on
    ``run.with_data(...)`` with these loaded. Nothing was decided."""

    #: Completed nodes whose outputs a template reads.
    outputs: frozenset[str] = frozenset()
    #: The run's buffered signals (``Run.signals`` was None).
    signals: bool = False
    #: MAP items whose task states a decision needs (node id, index): the next to go.
    items: frozenset[tuple[str, int]] = frozenset()
    #: MAP nodes whose items' outputs the MAP's completion collects.
    item_outputs: frozenset[str] = frozenset()


#: Final states a run cannot succeed with. CANCELLED counts: a node a cancel stopped that
#: a retry did not reset never ran, so the retried run must not pass for a success.
_UNSUCCESSFUL = frozenset({TaskState.FAILED, TaskState.CANCELLED})


def _failed(nodes: Mapping[str, NodeState]) -> list[str]:
    failed = [(n.task_id, node_id) for node_id, n in nodes.items() if n.state in _UNSUCCESSFUL]
    return [node_id for _, node_id in sorted(failed)]
