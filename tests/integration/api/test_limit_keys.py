"""PUT /v1/limits/{key} over real HTTP: a rate key may hold '/', written as it is or
escaped, and a viewer may not change one."""

from __future__ import annotations

import uuid
from typing import Any

from tests.integration.api.conftest import Gateway, deploy
from tests.integration.waits import until


async def test_a_rate_key_with_a_slash_is_set_as_written_or_escaped(gateway: Gateway) -> None:
    base = f"partner-{uuid.uuid4().hex[:6]}"
    for key, path in ((f"{base}/eu", f"{base}/eu"), (f"{base}/us/east", f"{base}%2Fus%2Feast")):
        answer = await gateway.call(
            "PUT",
            f"/v1/limits/{path}",
            role="operator",
            json={"limit": 7, "per_seconds": 60},
        )
        assert answer.status == 200, answer.body
        assert (answer.body["key"], answer.body["limit"]) == (key, 7)
        assert answer.body["set_by"].startswith("operator")
    listed = (await gateway.call("GET", "/v1/limits", role="viewer")).body["limits"]
    mine = {row["key"]: row["limit"] for row in listed if row["kind"] == "rate_limit"}
    assert mine[f"{base}/eu"] == 7 and mine[f"{base}/us/east"] == 7

    refused = await gateway.call(
        "PUT", f"/v1/limits/{base}/eu", role="viewer", json={"limit": 1, "per_seconds": 1}
    )
    assert refused.status == 403, refused.body


async def test_a_viewer_sees_the_keys_a_definition_names_not_those_rendered_from_input(
    gateway: Gateway,
) -> None:
    """A key a template rendered is made of a run's data (a customer's id): a viewer
    gets it as null, like a run key, unless the workflow lets viewers see payloads;
    a key the definition writes as plain text is shown to anyone."""
    tag = uuid.uuid4().hex[:6]
    node = {
        "id": "call",
        "type": "TASK",
        "queue": f"nobody-{tag}",
        "spec": {},
        "concurrency": {"key": "{{input.customer}}", "max": 1, "scope": "global"},
        "rate_limit": {"key": "partner-{{input.customer}}", "limit": 100, "per_seconds": 1},
    }
    static = {
        **node,
        "concurrency": {"key": f"shared-{tag}", "max": 5, "scope": "global"},
        "rate_limit": {"key": f"partner-{tag}", "limit": 100, "per_seconds": 1},
    }
    secret, plain = f"acme-{tag}", f"shared-{tag}"
    await deploy(gateway, {"id": f"rendered-{tag}", "nodes": [node]})
    await deploy(gateway, {"id": f"static-{tag}", "nodes": [static]})
    for workflow_id in (f"rendered-{tag}", f"static-{tag}"):
        answer = await gateway.call(
            "POST",
            "/v1/runs",
            role="operator",
            json={"workflow_id": workflow_id, "input": {"customer": secret}},
        )
        assert answer.status == 201, answer.body

    def keys(rows: list[dict[str, Any]]) -> set[tuple[str, str | None, bool]]:
        return {
            (r["kind"], r["key"], r["redacted"]) for r in rows if r["kind"] != "run_concurrency"
        }

    async def listed(role: str) -> set[tuple[str, str | None, bool]]:
        answer = await gateway.call("GET", "/v1/limits", role=role)
        assert answer.status == 200, answer.body
        return keys(answer.body["limits"])

    async def both_in_flight() -> bool:
        return ("node_concurrency", secret, False) in await listed("operator")

    await until(both_in_flight, what="the rendered key's attempt in flight")
    assert {
        ("node_concurrency", secret, False),
        ("node_concurrency", plain, False),
        ("rate_limit", f"partner-{secret}", False),
        ("rate_limit", f"partner-{tag}", False),
    } <= await listed("operator")
    seen = await listed("viewer")
    assert not any(secret in (key or "") for _, key, _ in seen), seen
    assert {("node_concurrency", plain, False), ("rate_limit", f"partner-{tag}", False)} <= seen
    assert ("node_concurrency", None, True) in seen and ("rate_limit", None, True) in seen

    open_to_viewers = {"id": f"rendered-{tag}", "viewers_see_payloads": True, "nodes": [node]}
    await deploy(gateway, open_to_viewers)  # its workflow-scoped keys only: these are global
    assert not any(secret in (key or "") for _, key, _ in await listed("viewer"))
