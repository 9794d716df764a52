"""Size limits a definition must stay within."""

from __future__ import annotations

from dataclasses import dataclass


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


DEFAULT_LIMITS = Limits()
