"""MAP: one worker task per item of a list, at most ``max_parallel`` at once.

The MAP node's own task waits (WAITING) while its items run and completes with the
list of their outputs, in item order. Each item is a worker task of its own — the
inner ``node``'s type, queue, retry policy and timeout — with its own attempts,
lease, history and logs (docs/architecture.md §2, "MAP").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import ConfigDict, Field, ValidationError

from composer_core.errors import InputTooLarge, TemplateError
from composer_core.kinds._kind import Decision, MapKind, SpecChecks
from composer_core.kinds._values import SpecModel, Template

if TYPE_CHECKING:
    from composer_core.model import Node

#: The kinds a MAP's inner node may be: those a worker runs, and a SUB_WORKFLOW (one
#: child run per item attempt).
INNER_TYPES = ("HTTP", "PYTHON", "TASK", "SUB_WORKFLOW")
#: How many items a MAP takes when its spec does not say (a setting caps it:
#: COMPOSER_MAP_MAX_ITEMS, passed to the machine).
DEFAULT_MAX_ITEMS = 1000
DEFAULT_MAX_PARALLEL = 10
#: Names the inner node's templates may read besides the usual ones.
ITEM_ROOTS = frozenset({"item", "index"})


class MapSpec(SpecModel):
    """Runs its inner ``node`` once per item of ``items``, as a task of its own: at
    most ``max_parallel`` at once, the next item as one finishes. The inner node's
    templates read ``item`` (the item) and ``index`` (its position, from 0).

    The node's output is the list of the items' outputs, in item order. When an item
    fails for good (its retries spent): ``on_failure: fail_fast`` (the default) cancels
    the items still going and fails the node; ``continue`` lets the others finish, and
    the failed item's entry in the output is null (its task keeps its error). An empty
    list completes the node at once with ``[]``.

    The inner node may be a ``SUB_WORKFLOW``: each item then starts one child run per
    attempt (its ``input`` rendered with ``item`` and ``index``), at most
    ``max_parallel`` children at once, and the output is the children's outputs in
    item order. Each child's ``parent`` names the MAP node and its item's task;
    ``fail_fast`` cancels the other children still going (but those with
    ``on_parent_cancel: abandon``); the item has no retry unless the inner node sets
    ``retry`` (a retry starts a new child).
    """

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "items": "{{ input.lines }}",
                    "max_parallel": 5,
                    "on_failure": "continue",
                    "node": {
                        "type": "TASK",
                        "queue": "fulfilment",
                        "spec": {"line": "{{ item }}", "position": "{{ index }}"},
                        "retry": {"max_attempts": 2},
                    },
                }
            ]
        }
    )

    items: Template | list[Any] = Field(
        description="a {{ template }} giving the list to map over (or a literal list)"
    )
    node: dict[str, Any] = Field(
        description="the node run per item: `type` (HTTP, PYTHON, TASK or SUB_WORKFLOW), "
        "`spec`, and as such a node takes, `queue`, `retry` and `timeout_seconds`; its "
        "templates may read `item` and `index` (a SUB_WORKFLOW starts one child run per item "
        "attempt)"
    )
    max_parallel: int = Field(
        default=DEFAULT_MAX_PARALLEL,
        ge=1,
        le=1000,
        description="at most this many items run at once",
    )
    max_items: int = Field(
        default=DEFAULT_MAX_ITEMS,
        ge=0,
        description="a longer list fails the node; the server's COMPOSER_MAP_MAX_ITEMS "
        "caps it (1,000 by default)",
    )
    on_failure: Literal["fail_fast", "continue"] = Field(
        default="fail_fast",
        description="when an item fails for good: `fail_fast` cancels the others and fails "
        "the node; `continue` finishes the others, with null for the failed item",
    )


class Map(MapKind):
    name = "MAP"
    spec_model = MapSpec
    runs_on = "its inner node's queue: one task per item"
    #: The inner node is rendered per item (with ``item`` and ``index``), not with the MAP.
    verbatim = frozenset({"node", "on_failure"})
    refuses_secrets = (
        "a MAP node's items cannot hold a secret: its items are stored with its task; put "
        "secret references in the inner node's spec (HTTP, PYTHON)"
    )
    example_fields: ClassVar[Mapping[str, Any]] = {}

    def check_spec(self, checks: SpecChecks, path: str, node: Node) -> None:
        spec = node.spec
        if "items" not in spec:
            checks.add(f"{path}.items", "required for MAP: a {{ template }} giving a list")
        inner = spec.get("node")
        if inner is None:
            checks.add(
                f"{path}.node",
                f"required for MAP: the node to run per item ({', '.join(INNER_TYPES)})",
            )
        elif not isinstance(inner, dict):
            checks.add(f"{path}.node", "must be a mapping: type, spec, queue, retry, …")
        else:
            kind = inner.get("type")
            if kind not in INNER_TYPES:
                checks.add(
                    f"{path}.node.type",
                    f"must be one of {', '.join(INNER_TYPES)} (a worker node or a "
                    f"SUB_WORKFLOW), got {kind!r}",
                )
            for key in ("id", "name", "description"):
                if key in inner:
                    checks.add(
                        f"{path}.node.{key}",
                        "not for an inner node: its tasks carry the MAP node's id",
                    )
        for key in ("max_parallel", "max_items"):
            value = spec.get(key)
            if value is not None and (
                type(value) is not int or value < (1 if key == "max_parallel" else 0)
            ):
                low = 1 if key == "max_parallel" else 0
                checks.add(f"{path}.{key}", f"must be a whole number from {low}, got {value!r}")
        if spec.get("max_parallel", 0) > 1000:
            checks.add(f"{path}.max_parallel", "at most 1000")
        on_failure = spec.get("on_failure", "fail_fast")
        if on_failure not in ("fail_fast", "continue"):
            checks.add(f"{path}.on_failure", f"must be fail_fast or continue, got {on_failure!r}")

    def activate(self, node: Node, decision: Decision) -> list[Node]:
        try:
            resolved = decision.resolve_input(node)
        except InputTooLarge as exc:
            decision.fail_too_large(node, exc)
            return []
        except TemplateError as exc:
            decision.fail(node, f"items of {node.id} could not be resolved: {exc}")
            return []
        assert isinstance(resolved, dict)
        items = resolved.get("items")
        if not isinstance(items, list):
            decision.fail(
                node,
                f"items of MAP {node.id} must resolve to a list, got "
                f"{type(items).__name__}: {_short(items)}",
            )
            return []
        limit = decision.map_max_items(_int(resolved.get("max_items"), DEFAULT_MAX_ITEMS))
        if len(items) > limit:
            decision.fail(
                node,
                f"MAP {node.id} has {len(items)} items; at most {limit} (its max_items, capped "
                "by the server's COMPOSER_MAP_MAX_ITEMS): split the list, or raise max_items",
            )
            return []
        return decision.start_map(
            node, items, max_parallel=_int(resolved.get("max_parallel"), DEFAULT_MAX_PARALLEL)
        )


def inner_node_fields(node: Node) -> dict[str, Any] | None:
    """The inner node of a MAP as a node's fields (its id: the MAP's), or None."""
    inner = node.spec.get("node")
    if not isinstance(inner, dict):
        return None
    return {**inner, "id": node.id}


def fails_fast(node: Node) -> bool:
    return bool(node.spec.get("on_failure", "fail_fast") != "continue")


def max_parallel(node: Node) -> int:
    return _int(node.spec.get("max_parallel"), DEFAULT_MAX_PARALLEL)


def _int(value: Any, default: int) -> int:
    return value if type(value) is int and value >= 0 else default


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


MAP = Map()

__all__ = ["INNER_TYPES", "ITEM_ROOTS", "MAP", "ValidationError", "fails_fast", "inner_node_fields"]
