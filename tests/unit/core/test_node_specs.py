"""The per-type spec models (composer_core.model.NODE_SPECS) and the HTTP node's accept_status.

The models are what docs/nodes.md and the OpenAPI document show; these tests hold
them to what validation does, so what a user reads is what a definition may say.
"""

from __future__ import annotations

from typing import Any

import pytest

from composer_core.errors import DefinitionInvalid
from composer_core.model import NODE_SPECS, NodeType, parse_definition, validate


def problems_of(node: dict[str, Any], *, successor: bool = False) -> list[str]:
    nodes = [node]
    edges: list[dict[str, str]] = []
    if successor:  # a SWITCH needs an edge out of it
        nodes.append({"id": "after", "type": "FORK"})
        edges.append({"from": node["id"], "to": "after"})
    doc = {"id": "wf", "nodes": nodes, "edges": edges}
    try:
        spec = parse_definition(doc)
    except DefinitionInvalid as exc:
        return [str(p) for p in exc.problems]
    return [str(p) for p in validate(spec)]


def http(accept: Any) -> dict[str, Any]:
    return {
        "id": "h",
        "type": "HTTP",
        "spec": {"url": "https://example.com", "accept_status": accept},
    }


def test_every_node_type_has_a_spec_model() -> None:
    assert set(NODE_SPECS) == set(NodeType)


@pytest.mark.parametrize("node_type", list(NodeType))
def test_each_models_example_is_a_valid_spec(node_type: NodeType) -> None:
    examples = NODE_SPECS[node_type].model_json_schema().get("examples", [{}])
    for example in examples:
        node: dict[str, Any] = {"id": "n", "type": node_type.value, "spec": example}
        if node_type is NodeType.TASK:
            node["queue"] = "orders"
        assert problems_of(node, successor=node_type is NodeType.SWITCH) == []


@pytest.mark.parametrize("node_type", [t for t in NodeType if t is not NodeType.TASK])
def test_a_key_no_model_has_is_refused_and_the_message_lists_the_models_fields(
    node_type: NodeType,
) -> None:
    fields = sorted(NODE_SPECS[node_type].model_fields)
    node = {"id": "n", "type": node_type.value, "spec": {"nope": 1}}
    found = problems_of(node, successor=node_type is NodeType.SWITCH)
    takes = f"takes {', '.join(fields)}" if fields else "takes no spec"
    assert f"nodes[0].spec.nope: unknown field; {node_type} {takes}" in found


@pytest.mark.parametrize(
    "accept",
    [None, [200], ["2xx", 404], ["5XX", 599, 100], "{{config.accept}}", ["{{input.code}}", 200]],
)
def test_good_accept_status_values_pass(accept: Any) -> None:
    assert problems_of(http(accept)) == []


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        (
            "2xx",
            [
                "nodes[0].spec.accept_status: must be a list of statuses (404) or classes "
                "(\"2xx\"), got '2xx'"
            ],
        ),
        (
            404,
            [
                "nodes[0].spec.accept_status: must be a list of statuses (404) or classes "
                '("2xx"), got 404'
            ],
        ),
        (
            [],
            [
                "nodes[0].spec.accept_status: is empty: no status could complete the node; "
                'leave it out for ["2xx"]'
            ],
        ),
        (
            [200, 600, "6xx", True, "200", 99, 2.5],
            [
                f"nodes[0].spec.accept_status[{i}]: {shown} is not a status: use a number "
                'from 100 to 599 (404) or a class "1xx" to "5xx"'
                for i, shown in [
                    (1, "600"),
                    (2, "'6xx'"),
                    (3, "True"),
                    (4, "'200'"),
                    (5, "99"),
                    (6, "2.5"),
                ]
            ],
        ),
    ],
)
def test_bad_accept_status_values_name_the_item_and_the_fix(
    accept: Any, expected: list[str]
) -> None:
    assert problems_of(http(accept)) == expected
