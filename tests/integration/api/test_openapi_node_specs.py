"""The served OpenAPI document types each node's spec, so /docs shows every type's fields."""

from __future__ import annotations

from tests.integration.api.conftest import Gateway


async def test_the_served_document_lists_the_http_nodes_spec_fields(gateway: Gateway) -> None:
    served = await gateway.call("GET", "/openapi.json", role=None)
    assert served.status == 200
    schemas = served.body["components"]["schemas"]
    nodes = schemas["WorkflowSpec"]["properties"]["nodes"]["items"]
    http_node = schemas[nodes["discriminator"]["mapping"]["HTTP"].rsplit("/", 1)[-1]]
    http_spec = schemas[http_node["properties"]["spec"]["$ref"].rsplit("/", 1)[-1]]
    assert {"url", "method", "headers", "query", "body", "accept_status"} <= set(
        http_spec["properties"]
    )
    body = served.body["paths"]["/v1/workflows"]["post"]["requestBody"]["content"]
    assert body["application/yaml"]["schema"]["$ref"].endswith("/WorkflowSpec")

    docs = await gateway.call("GET", "/docs", role=None)
    assert docs.status == 200
    assert 'id="schema-HttpSpec"' in docs.body and "accept_status" in docs.body
