"""The OpenAPI document is complete and self-consistent, straight from the route table."""

from __future__ import annotations

import json
from typing import Any

from composer_api_gateway import ROUTES, build_spec
from composer_api_gateway.openapi import render_docs
from composer_core.model import NODE_SPECS, NodeType


def refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for v in node.values() for r in refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in refs(v)]
    return []


def test_every_route_is_documented_and_every_ref_resolves() -> None:
    spec = build_spec()
    assert spec["openapi"] == "3.1.0"
    for route in ROUTES:
        op = spec["paths"][route.path][route.method.lower()]
        assert op["summary"] == route.summary
        if route.role is not None:
            assert op["x-required-role"] == route.role.label
            assert {"401", "403"} <= op["responses"].keys()
        for status in route.responses:
            assert str(status) in op["responses"]
    schemas = spec["components"]["schemas"]
    for ref in refs(spec):
        assert ref.startswith("#/components/schemas/"), ref
        assert ref.rsplit("/", 1)[-1] in schemas, ref
    json.dumps(spec)  # serialisable as it is served


def test_definitions_use_the_yaml_field_names() -> None:
    spec = build_spec()
    edge = spec["components"]["schemas"]["Edge"]
    assert {"from", "to"} <= edge["properties"].keys()
    body = spec["paths"]["/v1/workflows"]["post"]["requestBody"]["content"]
    assert {"application/yaml", "application/json"} <= body.keys()


def test_the_docs_page_lists_every_route_and_loads_nothing() -> None:
    page = render_docs(build_spec())
    for route in ROUTES:
        assert route.path in page
    assert "<script" not in page and "<link" not in page and "src=" not in page


def test_each_node_type_has_its_own_schema_with_its_spec_fields() -> None:
    schemas = build_spec()["components"]["schemas"]
    nodes = schemas["WorkflowSpec"]["properties"]["nodes"]["items"]
    assert nodes["discriminator"]["propertyName"] == "type"
    mapping = nodes["discriminator"]["mapping"]
    assert set(mapping) == {t.value for t in NodeType}
    assert sorted(one["$ref"] for one in nodes["oneOf"]) == sorted(mapping.values())
    for node_type, ref in mapping.items():
        node = schemas[ref.rsplit("/", 1)[-1]]
        assert node["properties"]["type"]["const"] == node_type
        spec_name = node["properties"]["spec"]["$ref"].rsplit("/", 1)[-1]
        model = NODE_SPECS[NodeType(node_type)]
        assert spec_name == model.__name__
        assert set(schemas[spec_name].get("properties", {})) == set(model.model_fields)

    http = schemas[mapping["HTTP"].rsplit("/", 1)[-1]]
    assert "spec" in http["required"]
    http_spec = schemas["HttpSpec"]
    assert {"url", "method", "headers", "query", "body", "accept_status"} <= set(
        http_spec["properties"]
    )
    assert http_spec["required"] == ["url"]
    assert http_spec["properties"]["method"]["default"] == "GET"
    assert "2xx" in http_spec["properties"]["accept_status"]["description"]
    assert http_spec["additionalProperties"] is False
    assert schemas["TaskSpec"].get("additionalProperties") is True  # the task's own input
    assert "queue" in schemas["TaskNode"]["required"]
    for control in ("SwitchNode", "ForkNode", "JoinNode", "WaitNode", "WaitForEventNode"):
        for field in ("queue", "timeout_seconds", "retry"):
            assert schemas[control]["properties"][field]["type"] == "null"


def test_the_docs_page_shows_the_http_nodes_fields() -> None:
    page = render_docs(build_spec())
    assert 'id="schema-HttpSpec"' in page
    assert "accept_status" in page
