"""The OpenAPI document is complete and self-consistent, straight from the route table."""

from __future__ import annotations

import json
from typing import Any

from composer_api_gateway import ROUTES, build_spec
from composer_api_gateway.openapi import render_docs


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
