"""SWITCH: chooses the branches its edges' conditions select, inline."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from composer_core.errors import TemplateError
from composer_core.kinds._kind import ControlKind, Decision, SpecChecks
from composer_core.kinds._values import SpecModel
from composer_core.templates import Json

if TYPE_CHECKING:
    from composer_core.model import Node


class SwitchSpec(SpecModel):
    """Chooses branches: each edge out of it may carry a ``condition``; every edge whose
    condition is true is taken (an edge without one always is), the others' nodes are
    skipped. Takes no spec; its output is its predecessor's output."""


class Switch(ControlKind):
    name = "SWITCH"
    spec_model = SwitchSpec
    takes_conditions = True

    def check_spec(self, checks: SpecChecks, path: str, node: Node) -> None:
        if not checks.has_outgoing(node.id):
            checks.add(path.removesuffix(".spec"), f"SWITCH {node.id!r} has no outgoing edge")

    def activate(self, node: Node, decision: Decision) -> list[Node]:
        """Complete inline, passing on the predecessor's output and recording which
        branches the conditions select (a decision later events never re-make)."""
        try:
            decision.ensure_outputs(decision.dag.task_refs(node.id))
            branches = _select_branches(node, decision)
        except TemplateError as exc:
            decision.fail(node, f"SWITCH {node.id}: {exc}")
            return []
        return decision.complete(node, decision.predecessor_output(node), branches=branches)


def _select_branches(node: Node, decision: Decision) -> tuple[str, ...]:
    dag = decision.dag
    activation: Mapping[str, object] | None = None
    branches: list[str] = []
    for edge in dag.outgoing(node.id):
        condition = dag.condition(edge)
        if condition is not None:
            if activation is None:
                activation = decision.activation()
            try:
                taken = _truthy(condition.evaluate(activation))
            except TemplateError as exc:
                raise TemplateError(
                    f"condition of edge {edge.source} → {edge.target}: {exc}"
                ) from exc
            if not taken:
                continue
        branches.append(edge.target)
    return tuple(branches)


def _truthy(value: Json) -> bool:
    """Conditions are read the way Python reads them: null, false, 0, "" and empty
    lists and maps are false, everything else true."""
    return bool(value)


SWITCH = Switch()
