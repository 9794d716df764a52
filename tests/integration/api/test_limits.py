"""Run inputs and signal payloads over their limits answer 413 naming the limit
(docs/architecture.md, "Limits"); under them, they go through."""

from __future__ import annotations

import json
from typing import Any

from tests.integration.api.conftest import (
    Gateway,
    deploy,
    open_gateway,
    queued_workflow,
    waiting_workflow,
)

#: Over the 1 MiB default of each limit, under the 2 MiB body limit.
OVER = "x" * 1_500_000


async def post(gw: Gateway, path: str, body: Any) -> Any:
    """POST ``body`` as JSON (as bytes: the test client streams a large body)."""
    return await gw.call(
        "POST", path, role="operator", data=json.dumps(body), content_type="application/json"
    )


def assert_too_large(answer: Any, what: str, setting: str, limit: str = "1 MiB") -> None:
    assert answer.status == 413, answer.body
    assert answer.content_type == "application/problem+json"
    assert answer.body["type"] == "urn:composer:problem:too-large"
    assert answer.body["detail"] == f"{what} is 1.5 MB, over the {limit} limit ({setting})"
    assert answer.body["setting"] == setting


async def test_a_run_input_or_config_over_the_limit_is_refused(gateway: Gateway) -> None:
    await deploy(gateway, queued_workflow())
    for field, what in (("input", "run input"), ("config", "run config")):
        refused = await post(gateway, "/v1/runs", {"workflow_id": "queued", field: OVER})
        assert_too_large(refused, what, "COMPOSER_MAX_RUN_INPUT_BYTES")
    listed = await gateway.call("GET", "/v1/runs", role="viewer")
    assert listed.body["runs"] == []  # nothing was started
    fits = await post(gateway, "/v1/runs", {"workflow_id": "queued", "input": OVER[:900_000]})
    assert fits.status == 201, fits.body
    run_id = fits.body["run_id"]
    retried = await post(gateway, f"/v1/runs/{run_id}/retry", {"from_node": "work", "input": OVER})
    assert_too_large(retried, "run input", "COMPOSER_MAX_RUN_INPUT_BYTES")


async def test_a_signal_payload_over_the_limit_is_refused(gateway: Gateway) -> None:
    await deploy(gateway, waiting_workflow("limits-waits"))
    started = await post(gateway, "/v1/runs", {"workflow_id": "limits-waits"})
    run_id = started.body["run_id"]
    refused = await post(gateway, f"/v1/runs/{run_id}/signals/go", {"blob": OVER})
    assert refused.status == 413, refused.body
    assert refused.body["setting"] == "COMPOSER_MAX_SIGNAL_BYTES"
    assert "signal payload is 1.5 MB, over the 1 MiB limit" in refused.body["detail"]
    fits = await gateway.call(
        "POST", f"/v1/runs/{run_id}/signals/go", role="operator", json={"blob": "x"}
    )
    assert fits.status == 200, fits.body


async def test_the_limits_are_settings(database_url: str, redis_url: str) -> None:
    async with open_gateway(
        database_url, redis_url, max_run_input_bytes=512 * 1024, max_signal_bytes=64 * 1024
    ) as gw:
        await deploy(gw, queued_workflow())
        refused = await post(gw, "/v1/runs", {"workflow_id": "queued", "input": OVER})
        assert_too_large(refused, "run input", "COMPOSER_MAX_RUN_INPUT_BYTES", "512 KiB")
        assert refused.body["limit"] == 512 * 1024
