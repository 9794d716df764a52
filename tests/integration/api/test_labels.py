"""Run labels over HTTP: a start stores them, every view returns them (in plain text,
even sealed and to a viewer), GET /v1/runs finds runs by label (repeatable: all
must match) together with workflow, status and creation time, and bad labels are
refused at the door with every problem named."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json
import os
from typing import Any

from composer_engine.sealing import sealer_from
from tests.integration.api.conftest import (
    TOKENS,
    Gateway,
    deploy,
    open_gateway,
    queued_workflow,
    waiting_workflow,
)
from tests.integration.e2e.conftest import open_stack
from tests.unit.cli.runner import Result, invoke


async def start(gw: Gateway, workflow_id: str, labels: Any = None) -> str:
    body: dict[str, Any] = {"workflow_id": workflow_id}
    if labels is not None:
        body["labels"] = labels
    answer = await gw.call("POST", "/v1/runs", role="operator", json=body)
    assert answer.status == 201, answer.body
    run_id: str = answer.body["run_id"]
    return run_id


async def cli(gw: Gateway, *args: str) -> Result:
    env = {"COMPOSER_API_URL": gw.url, "COMPOSER_API_TOKEN": TOKENS["operator"]}
    return await asyncio.to_thread(invoke, list(args), env)


async def listed(gw: Gateway, query: str) -> list[str]:
    """The run ids of every page of ``GET /v1/runs?<query>``, a page of 2 at a time."""
    ids: list[str] = []
    cursor = ""
    while True:
        answer = await gw.call("GET", f"/v1/runs?{query}&limit=2{cursor}", role="viewer")
        assert answer.status == 200, answer.body
        ids += [r["run_id"] for r in answer.body["runs"]]
        if not answer.body.get("next_cursor"):
            return ids
        cursor = f"&cursor={answer.body['next_cursor']}"


async def test_labels_are_stored_and_returned_by_the_run_and_the_listing(
    gateway: Gateway,
) -> None:
    await deploy(gateway, queued_workflow("labelled"))
    labels = {"customer": "umbrella", "order.id": "A-17/2", "empty": ""}
    run_id = await start(gateway, "labelled", labels)
    plain = await start(gateway, "labelled")

    # a viewer's view is redacted (no payloads) but keeps the labels
    shown = await gateway.call("GET", f"/v1/runs/{run_id}", role="viewer")
    assert shown.body["redacted"] is True and shown.body["labels"] == labels
    unlabelled = await gateway.call("GET", f"/v1/runs/{plain}", role="operator")
    assert unlabelled.body["labels"] == {}
    page = await gateway.call("GET", "/v1/runs?workflow_id=labelled", role="viewer")
    assert {r["run_id"]: r["labels"] for r in page.body["runs"]} == {run_id: labels, plain: {}}


async def test_filters_combine_and_every_label_must_match(gateway: Gateway) -> None:
    await deploy(gateway, waiting_workflow("shop-a"))
    await deploy(gateway, waiting_workflow("shop-b"))
    before = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
    prod_a = await start(gateway, "shop-a", {"customer": "acme", "env": "prod"})
    staging_a = await start(gateway, "shop-a", {"customer": "acme", "env": "staging"})
    prod_b = await start(gateway, "shop-b", {"customer": "acme", "env": "prod"})
    other = await start(gateway, "shop-a", {"customer": "globex", "env": "prod"})
    bare = await start(gateway, "shop-a")
    cancelled = await gateway.call("POST", f"/v1/runs/{prod_a}/cancel", role="operator", json={})
    assert cancelled.status == 200, cancelled.body

    newest_first = [prod_b, staging_a, prod_a]
    assert await listed(gateway, "label=customer:acme") == newest_first
    assert await listed(gateway, "label=customer:acme&label=env:prod") == [prod_b, prod_a]
    assert await listed(gateway, "label=env:prod&workflow_id=shop-a") == [other, prod_a]
    assert await listed(gateway, "label=env:prod&workflow_id=shop-a&status=CANCELLED") == [prod_a]
    assert await listed(gateway, "label=customer:acme&status=RUNNING") == [prod_b, staging_a]
    assert await listed(gateway, "workflow_id=shop-a&status=RUNNING") == [bare, other, staging_a]
    after = before.isoformat().replace("+00:00", "Z")
    later = (dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)).isoformat().replace("+00:00", "Z")
    assert await listed(gateway, f"label=customer:acme&created_after={after}") == newest_first
    assert await listed(gateway, f"label=customer:acme&created_after={later}") == []
    assert await listed(gateway, f"label=customer:acme&created_before={after}") == []
    # one key asked with two values: no run can carry both
    assert await listed(gateway, "label=env:prod&label=env:staging") == []
    assert await listed(gateway, "label=customer:nobody") == []
    # ':' ends the key; the value may hold more of them
    colons = await start(gateway, "shop-b", {"url": "https://x:8/y"})
    assert await listed(gateway, "label=url:https://x:8/y") == [colons]


async def test_bad_labels_are_refused_naming_each_problem(gateway: Gateway) -> None:
    await deploy(gateway, queued_workflow("refused"))
    cases: list[tuple[Any, str]] = [
        ({f"k{i}": "v" for i in range(17)}, "at most 16"),
        ({"n": 7}, "labels.n"),
        ({"bad key": "v"}, "not a label key"),
        ({"a:b": "v"}, "not a label key"),
        ({"long": "x" * 257}, "at most 256"),
        ({"nl": "a\nb"}, "control character"),
        (["customer", "acme"], "labels"),
    ]
    for labels, expected in cases:
        answer = await gateway.call(
            "POST", "/v1/runs", role="operator", json={"workflow_id": "refused", "labels": labels}
        )
        assert answer.status == 400, (labels, answer.body)
        assert expected in answer.body["detail"], (labels, answer.body)
        assert answer.body["errors"], answer.body
    both = await gateway.call(
        "POST",
        "/v1/runs",
        role="operator",
        json={"workflow_id": "refused", "labels": {"bad key": "v", "long": "x" * 300}},
    )
    assert {e["path"] for e in both.body["errors"]} == {"labels.bad key", "labels.long"}
    page = await gateway.call("GET", "/v1/runs?workflow_id=refused", role="viewer")
    assert page.body["runs"] == []  # nothing started
    for query in ("label=customer", "label=:acme", "label=bad key:x"):
        answer = await gateway.call("GET", f"/v1/runs?{query}", role="viewer")
        assert answer.status == 400 and "key:value" in answer.body["detail"], answer.body
    many = "&".join(f"label=k{i}:v" for i in range(17))
    assert (await gateway.call("GET", f"/v1/runs?{many}", role="viewer")).status == 400


async def test_labels_stay_plain_text_when_payloads_are_sealed(
    database_url: str, redis_url: str
) -> None:
    keys = f"k1:{base64.b64encode(os.urandom(32)).decode()}"
    async with (
        open_stack(database_url, redis_url, sealer=sealer_from(keys)) as stack,
        open_gateway(database_url, redis_url, prefix=stack.prefix, encryption_keys=keys) as gw,
    ):
        await deploy(gw, waiting_workflow("sealed-labels"))
        answer = await gw.call(
            "POST",
            "/v1/runs",
            role="operator",
            json={"workflow_id": "sealed-labels", "input": {"x": 1}, "labels": {"team": "red"}},
        )
        assert answer.status == 201, answer.body
        run_id = answer.body["run_id"]
        async with stack.pool.acquire() as conn:
            row = await conn.fetchrow(
                "SELECT input, labels FROM workflow_runs WHERE id = $1", run_id
            )
        assert row is not None
        assert isinstance(row["input"], str)  # sealed
        assert row["labels"] == {"team": "red"}  # plain, so the index can find it
        found = await gw.call("GET", "/v1/runs?label=team:red", role="viewer")
        assert [r["run_id"] for r in found.body["runs"]] == [run_id]


async def test_the_cli_starts_and_finds_runs_by_label(gateway: Gateway) -> None:
    await deploy(gateway, queued_workflow("cli-labels"))
    started = await cli(
        gateway, "start", "cli-labels", "--label", "team=blue", "--label", "tier=gold", "--json"
    )
    assert started.exit_code == 0, started.output
    run_id = json.loads(started.stdout)["run_id"]
    await start(gateway, "cli-labels", {"team": "blue"})
    found = await cli(gateway, "runs", "--label", "team=blue", "--label", "tier=gold", "--json")
    assert found.exit_code == 0, found.output
    assert [r["run_id"] for r in json.loads(found.stdout)["runs"]] == [run_id]
    none = await cli(gateway, "runs", "--label", "team=green")
    assert "no runs labelled team=green" in none.stdout
    bad = await cli(gateway, "runs", "--label", "team")
    assert bad.exit_code == 2 and "KEY=VALUE" in bad.output
    shown = await cli(gateway, "get", run_id)
    assert "labels team=blue tier=gold" in shown.stdout
