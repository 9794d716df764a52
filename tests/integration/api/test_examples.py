"""What the examples call, served by the gateway when COMPOSER_API_EXAMPLES is on (issue
31: examples/price-check.yaml called a placeholder host and could not run as shipped)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from tests.integration.api.conftest import Gateway, Live, open_gateway
from tests.integration.api.test_cli import composer
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


async def test_order_fulfilment_lines_fulfils_each_line_in_a_child_run_of_its_own(
    database_url: str, redis_url: str
) -> None:
    """examples/order-fulfilment-lines.yaml as shipped, on the built-in workers: one
    fulfil-line child per line, the lines in order, the total of those that shipped and
    a failed line null (on_failure: continue)."""
    async with (
        open_stack(database_url, redis_url) as stack,
        open_gateway(database_url, redis_url, prefix=stack.prefix) as gw,
    ):
        await stack.builtin_workers()
        for name in ("fulfil-line.yaml", "order-fulfilment-lines.yaml"):
            definition = yaml.safe_load((EXAMPLES / name).read_text())
            stored = await gw.call("POST", "/v1/workflows?deploy=true", json=definition)
            assert stored.status == 201, stored.body
        order = json.loads((EXAMPLES / "order-fulfilment-lines.input.json").read_text())
        order["lines"].insert(1, {"sku": "ghost", "qty": 0, "price": 1.0})  # cannot reserve
        started = await gw.call(
            "POST", "/v1/runs", json={"workflow_id": "order-fulfilment-lines", "input": order}
        )
        assert started.status == 201, started.body
        run_id = started.body["run_id"]
        run = await stack.wait_run(run_id, timeout=60)

        assert run.status.value == "SUCCEEDED", run
        output = run.output
        assert isinstance(output, dict)
        lines = output["lines"]
        assert [line and line["sku"] for line in lines] == [
            "lamp",
            None,
            "pencil",
            "desk",
            "chair",
        ]
        assert lines[0] == {
            "line": 0,
            "sku": "lamp",
            "reservation": "o-1001-0-lamp",
            "charged": 120.0,
            "tracking": "TRK-O-1001-0-LAMP",
        }
        assert output["total"] == 120.0 + 6.0 + 340.0 + 171.0
        assert output["failed"] == [1]
        children = (await gw.call("GET", f"/v1/runs/{run_id}")).body["children"]
        assert len(children) == 5 and {c["workflow_id"] for c in children} == {"fulfil-line"}
        assert sorted(c["status"] for c in children) == ["FAILED"] + ["SUCCEEDED"] * 4


async def test_the_demo_s_commands_run_order_fulfilment_lines(
    database_url: str, redis_url: str
) -> None:
    """What `make demo` does for it: one apply of both files, a start with the input
    file, waited for; every line ships."""
    async with (
        open_stack(database_url, redis_url) as stack,
        open_gateway(database_url, redis_url, prefix=stack.prefix) as gw,
    ):
        await stack.builtin_workers()
        live = Live(gw, stack)
        applied = await composer(
            live,
            "apply",
            "-f",
            str(EXAMPLES / "fulfil-line.yaml"),
            "-f",
            str(EXAMPLES / "order-fulfilment-lines.yaml"),
            "--deploy",
        )
        assert applied.exit_code == 0, applied.output
        started = await composer(
            live,
            "start",
            "order-fulfilment-lines",
            "--input",
            f"@{EXAMPLES / 'order-fulfilment-lines.input.json'}",
            "--wait",
        )
        assert started.exit_code == 0, started.output
        assert "SUCCEEDED" in started.output
        assert "lines items: 4 / 4 (4 COMPLETED)" in started.output  # every line shipped
