"""PUT /v1/limits/{key} over real HTTP: a rate key may hold '/', written as it is or
escaped, and a viewer may not change one."""

from __future__ import annotations

import uuid

from tests.integration.api.conftest import Gateway


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
