"""input_schema (composer_core.model._input_schema): checked as a JSON Schema 2020-12
with the definition, every problem at its place; applied to an input, every problem
at its JSON path, in document order, at most MAX_INPUT_PROBLEMS of them."""

from __future__ import annotations

from typing import Any

import pytest

from composer_core.errors import DefinitionInvalid
from composer_core.model import (
    MAX_INPUT_PROBLEMS,
    InputSchema,
    build_dag,
    parse_definition,
    schema_problems,
)


def problems(schema: Any) -> list[str]:
    return [str(p) for p in schema_problems(schema)]


@pytest.mark.parametrize(
    "schema",
    [
        True,
        {},
        {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
        {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"},
        {"$defs": {"sku": {"type": "string"}}, "properties": {"s": {"$ref": "#/$defs/sku"}}},
        {"prefixItems": [{"type": "string"}], "unevaluatedItems": False},
        {"properties": {"x": {"const": {"$ref": "not a reference: data"}}}},
    ],
)
def test_a_valid_schema_has_no_problem(schema: Any) -> None:
    assert problems(schema) == []


def test_every_problem_of_a_schema_is_named_at_its_place() -> None:
    assert problems(
        {"type": "objekt", "properties": {"n": {"minimum": "one"}}, "required": "n"}
    ) == [
        "input_schema.properties.n.minimum: not a valid JSON Schema 2020-12: 'one' is not of type 'number'",
        "input_schema.required: not a valid JSON Schema 2020-12: 'n' is not of type 'array'",
        "input_schema.type: not a valid JSON Schema 2020-12: 'objekt' is not valid under any of the given schemas",
    ]


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        (
            [{"type": "object"}],
            "input_schema: must be a JSON Schema (an object or a boolean), not an array",
        ),
        (
            {"pattern": "("},
            "input_schema.pattern: not a valid JSON Schema 2020-12: '(' is not a 'regex'",
        ),
        (
            {"$ref": "#/$defs/missing"},
            "input_schema.$ref: '#/$defs/missing' cannot be resolved: a reference must "
            "point inside the schema (nothing is fetched)",
        ),
        (
            {"properties": {"a": {"$ref": "https://example.com/a.json"}}},
            "input_schema.properties.a.$ref: 'https://example.com/a.json' cannot be "
            "resolved: a reference must point inside the schema (nothing is fetched)",
        ),
        (
            {"properties": {"default": {"$ref": "#/$defs/none"}}},
            "input_schema.properties.default.$ref: '#/$defs/none' cannot be resolved: a "
            "reference must point inside the schema (nothing is fetched)",
        ),
        (
            {"$schema": "http://json-schema.org/draft-07/schema#"},
            "input_schema.$schema: input schemas are JSON Schema 2020-12: write "
            "'https://json-schema.org/draft/2020-12/schema' or leave $schema out, not "
            "'http://json-schema.org/draft-07/schema#'",
        ),
    ],
)
def test_what_is_refused(schema: Any, expected: str) -> None:
    assert problems(schema) == [expected]


def test_a_definition_with_a_broken_schema_is_invalid_beside_its_other_problems() -> None:
    spec = parse_definition(
        "id: w\n"
        "input_schema: {type: strng}\n"
        "nodes: [{id: a, type: WAIT, spec: {duration_seconds: -1}}]\n"
    )
    with pytest.raises(DefinitionInvalid) as caught:
        build_dag(spec)
    paths = [p.path for p in caught.value.problems]
    assert "input_schema.type" in paths and "nodes[0].spec.duration_seconds" in paths


def test_the_dag_carries_the_compiled_schema() -> None:
    spec = parse_definition(
        "id: w\ninput_schema: {type: object, required: [n]}\nnodes: [{id: a, type: FORK}]\n"
    )
    dag = build_dag(spec)
    assert dag.input_schema is not None
    assert dag.input_schema.problems({"n": 1}) == []
    assert [str(p) for p in dag.input_schema.problems({})] == ["$: 'n' is a required property"]
    assert build_dag(parse_definition("id: w\nnodes: [{id: a, type: FORK}]\n")).input_schema is None


def test_input_problems_come_in_document_order_with_json_paths() -> None:
    schema = InputSchema(
        {
            "type": "object",
            "required": ["id"],
            "properties": {
                "items": {"type": "array", "items": {"type": "integer"}},
                "mail": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            },
        }
    )
    found = schema.problems({"items": [1, "b"] + [3] * 9 + ["l"], "mail": 5})
    assert [(p.path, p.message) for p in found] == [
        ("$", "'id' is a required property"),
        ("$.items[1]", "'b' is not of type 'integer'"),
        ("$.items[11]", "'l' is not of type 'integer'"),
        (
            "$.mail",
            "5 is not valid under any of the given schemas (5 is not of type 'null'; "
            "5 is not of type 'string')",
        ),
    ]


def test_a_flood_of_problems_is_cut_short_and_says_so() -> None:
    schema = InputSchema({"type": "array", "items": {"type": "string"}})
    found = schema.problems(list(range(MAX_INPUT_PROBLEMS + 7)))
    assert len(found) == MAX_INPUT_PROBLEMS + 1
    assert found[-1].path == "$" and found[-1].message == "and 7 more problem(s) not listed"


def test_a_long_value_is_not_quoted_whole() -> None:
    schema = InputSchema({"type": "integer"})
    [problem] = schema.problems("x" * 10_000)
    assert len(problem.message) <= 300 and problem.message.endswith("…")
