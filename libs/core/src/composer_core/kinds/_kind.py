"""What a node kind is: one object that says everything Composer does differently for it.

A kind holds its spec model (docs/nodes.md and the OpenAPI document read it), the
checks of its spec, its category, and how the machine activates a node of it when
the node is reached (and, for a wait, how a timer resolves it). The model, the
machine, the engine, the gateway and the docs ask the kind, never the kind's name
(docs/architecture.md §2, "Adding a node kind").

A kind speaks to the model through ``SpecChecks`` and to the machine through
``Decision``: narrow views, so a kind never builds an action or a problem itself.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from pydantic import BaseModel

from composer_core.errors import InputTooLarge, TemplateError
from composer_core.templates import Json

if TYPE_CHECKING:
    from composer_core.model import Node, WorkflowDAG
    from composer_core.statemachine import Signal


class Category(StrEnum):
    """How a kind's nodes run (docs/architecture.md §2)."""

    #: Dispatched to a queue and run by a worker under a lease; completed by its report.
    WORKER = "worker"
    #: Completes inline, inside the decision that reaches it.
    CONTROL = "control"
    #: Parks WAITING until a timer fires or a signal arrives.
    WAIT = "wait"
    #: Starts a child run and waits for it: completed (or failed) by the child's end.
    SUB_WORKFLOW = "sub_workflow"
    #: Waits (WAITING) while one worker task per item of a list runs; completes with
    #: their outputs (kinds/map.py).
    MAP = "map"


#: Why a kind that takes no secret refuses one, unless it says better.
SECRETS_ONLY_IN = (
    "secret references go only in HTTP and PYTHON node specs, which the built-in workers "
    "resolve at run time"
)


class SpecChecks(Protocol):
    """What validation offers a kind checking a node's spec (composer_core.model)."""

    #: The version is already stored: rules added after it was are not applied again.
    @property
    def stored(self) -> bool: ...

    def add(self, path: str, message: str) -> None:
        """Report a problem at ``path`` (validation goes on)."""

    def check_seconds(self, path: str, value: Any) -> None:
        """Report ``value`` unless it is a number of seconds (or a template)."""

    def has_outgoing(self, node_id: str) -> bool:
        """Whether an edge leaves ``node_id``."""


class Decision(Protocol):
    """What the machine offers a kind whose node a decision reaches or resolves
    (composer_core.statemachine). Each call emits the actions it names; those that
    complete a node return the nodes to look at next."""

    @property
    def now(self) -> dt.datetime: ...

    @property
    def dag(self) -> WorkflowDAG: ...

    def new_id(self) -> str: ...

    def resolve_input(self, node: Node) -> Json:
        """The node's spec rendered: raises InputTooLarge or TemplateError."""

    def ensure_outputs(self, refs: frozenset[str] | None) -> None:
        """Make sure the outputs ``refs`` names are loaded (None: every reached node's)."""

    def activation(self) -> Mapping[str, object]:
        """The values expressions see."""

    def predecessor_output(self, node: Node) -> Json:
        """The output of the completed predecessor whose edge into ``node`` was taken."""

    def buffered(self, name: str) -> Signal | None:
        """The oldest buffered signal called ``name``."""

    def consume(self, signal: Signal, node: Node) -> None:
        """``node`` takes the buffered ``signal``."""

    def complete(
        self,
        node: Node,
        output: Json,
        *,
        task_id: str | None = None,
        input: Json = None,
        branches: tuple[str, ...] | None = None,
    ) -> list[Node]:
        """Create the node's task COMPLETED with ``output`` (``branches``: the successors
        it selected, recorded once); return its successors."""

    def dispatch(self, node: Node, input: Json) -> None:
        """Create the node's task PENDING with ``input`` and dispatch it to its queue."""

    def park(
        self,
        node: Node,
        input: Json,
        *,
        task_id: str,
        wake_at: dt.datetime | None,
        awaited_signal: str | None = None,
    ) -> None:
        """Create the node's task WAITING, for the timer at ``wake_at`` (None: none) or
        the signal ``awaited_signal``."""

    def fail(self, node: Node, error: str, code: str | None = None) -> None:
        """Create the node's task FAILED: it could not even start."""

    def start_child(self, node: Node, child: ChildRun) -> None:
        """Create the node's task RUNNING and start ``child`` for its first attempt: the
        child run's id is decided here, so the engine records it with the task."""

    def map_max_items(self, asked: int) -> int:
        """The most items a MAP may take: ``asked`` (its max_items), capped by the server."""

    def start_map(self, node: Node, items: list[Json], *, max_parallel: int) -> list[Node]:
        """Create a MAP node's task WAITING and one task per item (each rendered with
        ``item`` and ``index``), and dispatch the first ``max_parallel``."""

    def fail_too_large(self, node: Node, exc: InputTooLarge) -> None:
        """Create the node's task FAILED: its input is over the node input limit."""

    def wake(self, node_id: str, task_id: str, output: Json) -> None:
        """A WAITING node completes with ``output``; the run goes on from it."""

    def time_out(self, node_id: str, task_id: str, error: str) -> None:
        """A WAITING node fails with ``error``."""


@dataclass(frozen=True, slots=True)
class ChildRun:
    """The run a sub-workflow node's attempt starts (docs/architecture.md §4.15)."""

    #: The workflow the child runs.
    workflow_id: str
    #: Its version; None: the one deployed when the node starts (then kept for the
    #: node's retries).
    version: int | None
    #: The child run's input, templates resolved.
    input: Json
    #: on_parent_cancel ``abandon``: the parent's cancel leaves the child running.
    detached: bool = False


@dataclass(frozen=True, slots=True)
class WaitFor:
    """What a wait node's resolved spec says it waits for."""

    #: When its timer fires: the WAIT's time, or a WAIT_FOR_EVENT's timeout (None: none).
    wake_at: dt.datetime | None
    #: The signal it waits for (None: only the timer).
    event: str | None = None


class NodeKind:
    """One kind of node. Subclass ``WorkerKind``, ``ControlKind`` or ``WaitKind``, make
    one instance in the kind's module, and register it in ``composer_core.kinds``."""

    #: The node's ``type`` as a definition writes it.
    name: ClassVar[str]
    category: ClassVar[Category]
    #: What its ``spec`` takes: its fields' names are the keys validation accepts (an
    #: ``extra="allow"`` model: any), and its docstring, fields and example feed
    #: docs/nodes.md and the OpenAPI document.
    spec_model: ClassVar[type[BaseModel]]
    #: docs/nodes.md: where a node of it runs.
    runs_on: ClassVar[str]
    #: The queue of the built-in workers that run it, reserved for it (§6.1); None: none.
    builtin_queue: ClassVar[str | None] = None
    #: What the built-in workers run a task on its reserved queue as.
    runs_as: ClassVar[str | None] = None
    #: A worker kind whose node names a queue of its own (required, not a reserved one).
    own_queue: ClassVar[bool] = False
    #: Spec keys kept as text, never compiled as templates.
    verbatim: ClassVar[frozenset[str]] = frozenset()
    #: Why its spec may not hold a secret reference; None: it takes them (the built-in
    #: workers resolve them at run time and store nothing; docs/secrets.md).
    refuses_secrets: ClassVar[str | None] = SECRETS_ONLY_IN
    #: Its node takes ``retry``: a failed attempt may be followed by another.
    takes_retry: ClassVar[bool] = False
    #: Attempts in all when its node sets no ``retry`` (taken only with ``takes_retry``).
    default_attempts: ClassVar[int] = 1
    #: Edges out of it may carry a condition; it records the branches it selects.
    takes_conditions: ClassVar[bool] = False
    #: Its task row carries the run's calling context, for the user's handler.
    carries_context: ClassVar[bool] = False
    #: docs/nodes.md: fields its example node needs besides ``spec``.
    example_fields: ClassVar[Mapping[str, Any]] = {}

    def check_spec(self, checks: SpecChecks, path: str, node: Node) -> None:
        """Report what is wrong with ``node``'s spec beyond unknown keys (at ``path``)."""

    def awaited_signal(self, spec: Mapping[str, Any]) -> str | None:
        """The signal name a node of it waits for, as written (None: none)."""
        return None

    def finish_input(self, node: Node, value: Json) -> None:
        """Add to a rendered input what the definition's text decides (HTTP: ``$origin``)."""

    def activate(self, node: Node, decision: Decision) -> list[Node]:
        """Start a reached, ready node; return the nodes to look at next."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{self.category} kind {self.name}>"


class WorkerKind(NodeKind):
    """Its task's input is rendered once and dispatched; a worker's report completes it."""

    category = Category.WORKER
    takes_retry = True
    default_attempts = 3  # DEFAULT_RETRY's

    def activate(self, node: Node, decision: Decision) -> list[Node]:
        try:
            node_input = decision.resolve_input(node)
        except InputTooLarge as exc:
            decision.fail_too_large(node, exc)
            return []
        except TemplateError as exc:
            decision.fail(node, f"input of {node.id} could not be resolved: {exc}")
            return []
        decision.dispatch(node, node_input)
        return []


class ControlKind(NodeKind):
    """Completes inside the decision that reaches it; by default with the output ``{}``."""

    category = Category.CONTROL
    runs_on = "the coordinator, at once"

    def activate(self, node: Node, decision: Decision) -> list[Node]:
        return decision.complete(node, {})


class ChildKind(NodeKind):
    """Starts a child run per attempt; the child's end completes or fails the node, and a
    retry of the node starts a new child (docs/architecture.md §4.15)."""

    category = Category.SUB_WORKFLOW
    #: A retry starts a new child; by default there is none (the child retries its own
    #: nodes), as a Temporal child workflow has no retry policy unless given one.
    takes_retry = True

    def activate(self, node: Node, decision: Decision) -> list[Node]:
        try:
            child = self.child(node, decision)
        except InputTooLarge as exc:
            decision.fail_too_large(node, exc)
            return []
        except (TemplateError, ValueError) as exc:
            decision.fail(node, f"{node.id}: {exc}")
            return []
        decision.start_child(node, child)
        return []

    def child(self, node: Node, decision: Decision) -> ChildRun:
        """The run an attempt of ``node`` starts, its spec rendered now; raises
        InputTooLarge, TemplateError or ValueError (a message for the user)."""
        raise NotImplementedError

    def child_of(self, node: Node, resolved: Json) -> ChildRun:
        """The run an attempt of ``node`` starts, from its spec already rendered (a MAP
        item's stored input); raises ValueError."""
        raise NotImplementedError


class WaitKind(NodeKind):
    """Parks WAITING (or completes at once when already satisfied); the timer or a
    signal resolves it."""

    category = Category.WAIT

    def activate(self, node: Node, decision: Decision) -> list[Node]:
        try:
            resolved = decision.resolve_input(node)
            if not isinstance(resolved, dict):
                raise ValueError(f"spec must resolve to a mapping, got {resolved!r}")
            wait = self.read(resolved, decision.now)
        except InputTooLarge as exc:
            decision.fail_too_large(node, exc)
            return []
        except (TemplateError, ValueError) as exc:
            decision.fail(node, f"{node.id}: {exc}")
            return []
        return self.settle(node, resolved, wait, decision)

    def read(self, spec: dict[str, Json], now: dt.datetime) -> WaitFor:
        """What the resolved spec says to wait for; ValueError with a message for the
        user when it is unusable."""
        raise NotImplementedError

    def settle(self, node: Node, resolved: Json, wait: WaitFor, decision: Decision) -> list[Node]:
        """Park the node, or complete it now when what it waits for is already there."""
        raise NotImplementedError

    def on_timer(
        self, node_id: str, task_id: str, awaited_signal: str | None, decision: Decision
    ) -> None:
        """Its timer fired while it was WAITING."""
        raise NotImplementedError


class MapKind(NodeKind):
    """Waits (WAITING) while one worker task per item of a list runs; completes with the
    list of their outputs (kinds/map.py)."""

    category = Category.MAP
