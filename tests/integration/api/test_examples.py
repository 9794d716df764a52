"""What the examples call, served by the gateway when COMPOSER_API_EXAMPLES is on (issue
31: examples/price-check.yaml called a placeholder host and could not run as shipped)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.integration.api.conftest import Gateway, open_gateway
from tests.integration.e2e.conftest import open_stack

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


async def test_price_check_runs_on_the_shop_the_gateway_serves(
    database_url: str, redis_url: str
) -> None:
    async with (
        open_stack(database_url, redis_url) as stack,
        open_gateway(database_url, redis_url, prefix=stack.prefix, examples=True) as gw,
    ):
        await stack.builtin_workers()
        definition = yaml.safe_load((EXAMPLES / "price-check.yaml").read_text())
        stored = await gw.call("POST", "/v1/workflows?deploy=true", json=definition)
        assert stored.status == 201, stored.body
        quotes: dict[str, Any] = {}
        for item in ("7", "3"):
            url = f"{gw.url}/examples/shop/items/{item}"
            started = await gw.call(
                "POST", "/v1/runs", json={"workflow_id": "price-check", "input": {"url": url}}
            )
            assert started.status == 201, started.body
            run = await stack.wait_run(started.body["run_id"])
            assert run.status.value == "SUCCEEDED", run
            quotes[item] = run.output
        # the discount branch and the cheap one
        assert quotes["7"] == {
            "item": "lamp",
            "quote": {"price": 120, "discount": 0.1, "total": 108.0},
        }
        assert quotes["3"] == {"item": "pencil", "quote": {"price": 2, "discount": 0.0, "total": 2}}
        missing = await gw.call("GET", "/examples/shop/items/99", role=None)
        assert missing.status == 404 and "has no item '99'" in missing.body["detail"]


async def test_without_the_setting_the_gateway_serves_no_shop(gateway: Gateway) -> None:
    answer = await gateway.call("GET", "/examples/shop/items/7", role=None)
    assert answer.status == 404
    spec = (await gateway.call("GET", "/openapi.json", role=None)).body
    assert not any(path.startswith("/examples") for path in spec["paths"])
