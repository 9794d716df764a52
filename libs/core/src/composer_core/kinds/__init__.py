"""Node kinds: each one module, all registered in the one table below.

A node kind is one object (``NodeKind``, in ``_kind.py``): its spec model, the
checks of its spec, its category, and how the machine activates and resolves a
node of it. Everything else — validation, the DAG, the machine, the engine's
writes, the OpenAPI document, docs/nodes.md, the web UI — reads the kind from
``KINDS``. A new kind is a module here, one member of ``NodeType`` and one entry
of ``KINDS`` (docs/architecture.md §2, "Adding a node kind").
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType

from composer_core.kinds import (
    fork,
    http,
    join,
    map,
    python,
    sub_workflow,
    switch,
    task,
    wait,
    wait_for_event,
)
from composer_core.kinds._kind import (
    Category,
    ChildKind,
    ChildRun,
    ControlKind,
    Decision,
    MapKind,
    NodeKind,
    SpecChecks,
    WaitFor,
    WaitKind,
    WorkerKind,
)
from composer_core.kinds._values import MAX_SECONDS, SpecModel, Template, parse_seconds, parse_time


class NodeType(StrEnum):
    """A node's type: what kind of node it is (docs/nodes.md)."""

    # One member per entry of KINDS below, named as the kind's ``name``.

    HTTP = "HTTP"
    PYTHON = "PYTHON"
    TASK = "TASK"
    SWITCH = "SWITCH"
    FORK = "FORK"
    JOIN = "JOIN"
    WAIT = "WAIT"
    WAIT_FOR_EVENT = "WAIT_FOR_EVENT"
    SUB_WORKFLOW = "SUB_WORKFLOW"
    MAP = "MAP"

    @property
    def kind(self) -> NodeKind:
        return KINDS[self]

    @property
    def is_worker(self) -> bool:
        """Executed by a worker through a queue (the others resolve in the coordinator)."""
        return KINDS[self].category is Category.WORKER

    @property
    def is_control(self) -> bool:
        return KINDS[self].category is Category.CONTROL

    @property
    def is_wait(self) -> bool:
        return KINDS[self].category is Category.WAIT

    @property
    def is_map(self) -> bool:
        return KINDS[self].category is Category.MAP


#: Every node kind, by its type, in the order docs/nodes.md and the OpenAPI document list them.
KINDS: Mapping[NodeType, NodeKind] = MappingProxyType(
    {
        NodeType.HTTP: http.HTTP,
        NodeType.PYTHON: python.PYTHON,
        NodeType.TASK: task.TASK,
        NodeType.SWITCH: switch.SWITCH,
        NodeType.FORK: fork.FORK,
        NodeType.JOIN: join.JOIN,
        NodeType.WAIT: wait.WAIT,
        NodeType.WAIT_FOR_EVENT: wait_for_event.WAIT_FOR_EVENT,
        NodeType.SUB_WORKFLOW: sub_workflow.SUB_WORKFLOW,
        NodeType.MAP: map.MAP,
    }
)

#: Queues of the built-in executors; a worker kind with ``own_queue`` names its own.
BUILTIN_QUEUES: Mapping[NodeType, str] = MappingProxyType(
    {t: k.builtin_queue for t, k in KINDS.items() if k.builtin_queue is not None}
)
#: The built-in queues, each reserved for its node type: the built-in workers run what
#: they lease there as that type (an HTTP request, Python code), so no other node type
#: may be sent to one (docs/architecture.md §6.1).
RESERVED_QUEUES: Mapping[str, NodeType] = MappingProxyType(
    {queue: t for t, queue in BUILTIN_QUEUES.items()}
)


def kind_of(node_type: NodeType) -> NodeKind:
    """The kind of a node of ``node_type``."""
    return KINDS[node_type]


__all__ = [
    "BUILTIN_QUEUES",
    "KINDS",
    "MAX_SECONDS",
    "RESERVED_QUEUES",
    "Category",
    "ChildKind",
    "ChildRun",
    "ControlKind",
    "Decision",
    "MapKind",
    "NodeKind",
    "NodeType",
    "SpecChecks",
    "SpecModel",
    "Template",
    "WaitFor",
    "WaitKind",
    "WorkerKind",
    "kind_of",
    "parse_seconds",
    "parse_time",
]
