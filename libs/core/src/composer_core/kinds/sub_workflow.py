"""SUB_WORKFLOW: starts a child run of another workflow and waits for its end."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ConfigDict, Field

from composer_core.kinds._kind import ChildKind, ChildRun, Decision, SpecChecks
from composer_core.kinds._values import SpecModel

if TYPE_CHECKING:
    from composer_core.model import Node

#: What a parent's cancel does to a running child.
ON_PARENT_CANCEL = ("cancel", "abandon")
#: A workflow id, as a definition's ``id`` is checked (composer_core.model).
_WORKFLOW_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


class SubWorkflowSpec(SpecModel):
    """Starts a run of another workflow (its child) and waits for it: the node's output
    is the child's output. The child failing (or being cancelled) fails the node, with
    the child's error and run id; a retry of the node (its `retry`, by default none)
    starts a new child. No worker is involved.

    The child runs the version deployed when the node starts, unless ``version`` pins
    one; a retry of the node keeps the first attempt's. Children nest up to
    `COMPOSER_MAX_CHILD_DEPTH` levels (10): a node that would start a deeper one fails,
    naming the depth and the limit. A parent's cancel cancels its running children
    (and theirs, all the way down) unless ``on_parent_cancel`` is ``abandon``.
    """

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "workflow": "fulfil-line",
                    "input": {"order_id": "{{input.order_id}}", "sku": "{{input.sku}}"},
                    "on_parent_cancel": "cancel",
                }
            ]
        }
    )

    workflow: str = Field(description="the id of the workflow the child runs")
    version: int | None = Field(
        default=None,
        ge=1,
        description="the version it runs; absent: the one deployed when the node starts",
    )
    input: Any = Field(
        default=None, description="the child run's input (templates resolved); absent: `{}`"
    )
    on_parent_cancel: Literal["cancel", "abandon"] = Field(
        default="cancel",
        description="when this run is cancelled while the child runs: `cancel` cancels the "
        "child (and its own children); `abandon` leaves it running, on its own",
    )


class SubWorkflow(ChildKind):
    name = "SUB_WORKFLOW"
    spec_model = SubWorkflowSpec
    runs_on = "a child run; the coordinator starts it, no worker"
    #: Read as written: names and a choice, not values to render.
    verbatim = frozenset({"workflow", "on_parent_cancel"})
    refuses_secrets = (
        "a SUB_WORKFLOW node cannot pass a secret: the child's input is stored in the "
        "database; let the child's HTTP or PYTHON nodes read the secret themselves"
    )

    def check_spec(self, checks: SpecChecks, path: str, node: Node) -> None:
        spec = node.spec
        workflow = spec.get("workflow")
        if workflow is None:
            checks.add(f"{path}.workflow", "required for SUB_WORKFLOW: the workflow to start")
        elif not isinstance(workflow, str) or not _WORKFLOW_ID.fullmatch(workflow):
            checks.add(
                f"{path}.workflow",
                f"{workflow!r} is not a workflow id: use letters, digits, '_', '-' or '.'",
            )
        version = spec.get("version")
        if version is not None and (
            isinstance(version, bool) or not isinstance(version, int) or version < 1
        ):
            checks.add(f"{path}.version", f"must be a version number (1 or more), got {version!r}")
        on_cancel = spec.get("on_parent_cancel", "cancel")
        if on_cancel not in ON_PARENT_CANCEL:
            checks.add(
                f"{path}.on_parent_cancel",
                f"must be one of {', '.join(map(repr, ON_PARENT_CANCEL))}, got {on_cancel!r}",
            )

    def child(self, node: Node, decision: Decision) -> ChildRun:
        return self.child_of(node, decision.resolve_input(node))

    def child_of(self, node: Node, resolved: Any) -> ChildRun:
        """The child run of ``node`` whose spec rendered to ``resolved`` (a MAP item's
        child: its stored input, the inner node's spec rendered with its item)."""
        if not isinstance(resolved, dict):  # pragma: no cover - a spec is a mapping
            raise ValueError(f"spec must resolve to a mapping, got {resolved!r}")
        version = resolved.get("version")
        child_input = resolved.get("input")
        return ChildRun(
            workflow_id=str(node.spec["workflow"]),
            version=version if isinstance(version, int) else None,
            input={} if child_input is None else child_input,
            detached=node.spec.get("on_parent_cancel") == "abandon",
        )


SUB_WORKFLOW = SubWorkflow()
