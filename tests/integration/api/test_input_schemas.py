"""A definition's input_schema through the API: checked as a JSON Schema 2020-12 when
the definition is published (a 422 naming the place in the schema), applied when a run
starts (400 input-invalid listing every problem at its JSON path, and no run), and
kept by the version (a later version's schema does not apply to an earlier one)."""

from __future__ import annotations

from typing import Any

from tests.integration.api.conftest import Gateway, Live, deploy

ORDER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["order_id", "lines"],
    "properties": {
        "order_id": {"type": "string", "description": "the shop's order id"},
        "lines": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["sku", "qty"],
                "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 1}},
            },
        },
    },
    "additionalProperties": False,
}


def orders(schema: Any = ORDER_SCHEMA, workflow_id: str = "orders") -> dict[str, Any]:
    """Waits for ``go``, then succeeds with the input it was given."""
    return {
        "id": workflow_id,
        "input_schema": schema,
        "output": {"order": "{{input}}"},
        "nodes": [{"id": "wait", "type": "WAIT_FOR_EVENT", "spec": {"event": "go"}}],
    }


async def start(gw: Gateway, workflow_id: str, input: Any = None) -> Any:
    body: dict[str, Any] = {"workflow_id": workflow_id}
    if input is not None:
        body["input"] = input
    return await gw.call("POST", "/v1/runs", role="operator", json=body)


async def test_a_good_input_starts_and_runs_to_the_end(live: Live) -> None:
    gw = live.gateway
    await deploy(gw, orders())
    good = {"order_id": "A-1", "lines": [{"sku": "tea", "qty": 2}]}
    started = await start(gw, "orders", good)
    assert started.status == 201, started.body
    run_id = started.body["run_id"]
    sent = await gw.call("POST", f"/v1/runs/{run_id}/signals/go", role="operator")
    assert sent.body == {"delivered": True}
    result = await gw.call(
        "GET", f"/v1/runs/{run_id}/result", role="operator", params={"timeout": "15"}
    )
    assert result.status == 200 and result.body["status"] == "SUCCEEDED", result.body
    assert result.body["output"] == {"order": good}
    # the schema is part of the version as published
    version = await gw.call("GET", "/v1/workflows/orders/versions/1", role="viewer")
    assert version.status == 200, version.body
    assert version.body["spec"]["input_schema"] == ORDER_SCHEMA
    # a retry that replaces the input is held to the schema too
    retried = await gw.call(
        "POST",
        f"/v1/runs/{run_id}/retry",
        role="operator",
        json={"from_node": "wait", "input": {"order_id": 7, "lines": []}},
    )
    assert retried.status == 400, retried.body
    assert retried.body["type"] == "urn:composer:problem:input-invalid"
    assert [(p["path"], p["message"]) for p in retried.body["problems"]] == [
        ("$.lines", "[] should be non-empty"),
        ("$.order_id", "7 is not of type 'string'"),
    ]
    run = await gw.call("GET", f"/v1/runs/{run_id}", role="operator")
    assert run.body["status"] == "SUCCEEDED" and run.body["input"] == good


async def test_a_bad_input_answers_400_with_every_problem_and_starts_nothing(
    gateway: Gateway,
) -> None:
    await deploy(gateway, orders(workflow_id="refuses"))
    bad = {"lines": [{"sku": "tea", "qty": 0}, {"qty": "two"}], "coupon": "X"}
    answer = await start(gateway, "refuses", bad)

    assert answer.status == 400, answer.body
    assert answer.content_type == "application/problem+json"
    assert answer.body["type"] == "urn:composer:problem:input-invalid"
    assert sorted((p["path"], p["message"]) for p in answer.body["problems"]) == sorted(
        [
            ("$", "Additional properties are not allowed ('coupon' was unexpected)"),
            ("$", "'order_id' is a required property"),
            ("$.lines[0].qty", "0 is less than the minimum of 1"),
            ("$.lines[1]", "'sku' is a required property"),
            ("$.lines[1].qty", "'two' is not of type 'integer'"),
        ]
    )
    assert "input_schema of 'refuses' version 1" in answer.body["detail"]
    listed = await gateway.call("GET", "/v1/runs", role="viewer", params={"workflow_id": "refuses"})
    assert listed.status == 200 and listed.body["runs"] == [], listed.body

    # no input at all is the empty object, which the schema also refuses
    empty = await start(gateway, "refuses")
    assert empty.status == 400
    assert {p["message"] for p in empty.body["problems"]} == {
        "'order_id' is a required property",
        "'lines' is a required property",
    }


async def test_a_broken_schema_is_refused_at_publish_naming_its_place(gateway: Gateway) -> None:
    broken = {
        "type": "object",
        "properties": {
            "qty": {"type": "integr", "minimum": "one"},
            "code": {"type": "string", "pattern": "("},
        },
        "required": "order_id",
    }
    answer = await gateway.call(
        "POST", "/v1/workflows", json=orders(broken), params={"deploy": "true"}
    )
    assert answer.status == 422, answer.body
    assert answer.body["type"] == "urn:composer:problem:definition-invalid"
    paths = {p["path"] for p in answer.body["problems"]}
    assert paths == {
        "input_schema.properties.qty.type",
        "input_schema.properties.qty.minimum",
        "input_schema.required",
    }, answer.body["problems"]
    # once those are fixed, the bad pattern is named
    fixed = {"type": "object", "properties": {"code": {"type": "string", "pattern": "("}}}
    again = await gateway.call("POST", "/v1/workflows", json=orders(fixed))
    assert again.status == 422
    assert [p["path"] for p in again.body["problems"]] == ["input_schema.properties.code.pattern"]
    elsewhere = await gateway.call(
        "POST", "/v1/workflows", json=orders({"$ref": "https://example.com/order.json"})
    )
    assert elsewhere.status == 422
    assert "nothing is fetched" in elsewhere.body["problems"][0]["message"]
    draft7 = await gateway.call(
        "POST",
        "/v1/workflows",
        json=orders({"$schema": "http://json-schema.org/draft-07/schema#"}),
    )
    assert draft7.status == 422
    assert draft7.body["problems"][0]["path"] == "input_schema.$schema"


async def test_each_version_keeps_its_own_schema(gateway: Gateway) -> None:
    await deploy(gateway, orders({"type": "object", "required": ["a"]}, "versions"))
    # v2 published but not deployed: starts of the deployed v1 still use v1's schema
    v2 = await gateway.call(
        "POST", "/v1/workflows", json=orders({"type": "object", "required": ["b"]}, "versions")
    )
    assert v2.status == 201, v2.body
    assert (await start(gateway, "versions", {"a": 1})).status == 201
    refused = await start(gateway, "versions", {"b": 1})
    assert refused.status == 400
    answer = await gateway.call(
        "POST",
        "/v1/runs",
        role="operator",
        json={"workflow_id": "versions", "version": 2, "input": {"b": 1}},
    )
    assert answer.status == 201, answer.body
