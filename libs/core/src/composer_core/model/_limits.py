"""Size limits a definition must stay within."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from composer_core.kinds import MAX_SECONDS

__all__ = ["DEFAULT_LIMITS", "MAX_SECONDS", "Limits", "nesting_depth"]


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds that keep one definition from hurting the engine.

    A run's snapshot holds one entry per reached node and every event walks
    the graph, so the node count bounds the cost of each transition; spec size
    bounds what is copied into every task row.
    """

    max_definition_bytes: int = 1024 * 1024
    max_nodes: int = 1000
    max_edges: int = 5000
    max_spec_bytes: int = 64 * 1024
    max_id_length: int = 64
    max_expression_length: int = 4096
    #: Lists and maps inside lists and maps: compiling and storing a value recurses this deep.
    max_depth: int = 64
    #: Values a YAML document may expand to through its aliases (a "billion laughs"
    #: document is a few hundred bytes that expand to billions of values).
    max_yaml_values: int = 200_000


DEFAULT_LIMITS = Limits()


def nesting_depth(value: Any) -> int:
    """How deeply lists and maps nest in ``value`` (a scalar is 0), without recursing."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        current, depth = stack.pop()
        if isinstance(current, dict):
            children: Any = current.values()
        elif isinstance(current, list | tuple):
            children = current
        else:
            continue
        deepest = max(deepest, depth + 1)
        stack.extend((child, depth + 1) for child in children)
    return deepest
