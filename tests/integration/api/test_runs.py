"""/v1/runs over HTTP: start (idempotent, client run ids), list, get, signal, cancel, retry."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from typing import Any

import uuid6

import composer_repo as repo
from tests.integration.api.conftest import (
    Gateway,
    deploy,
    queued_workflow,
    two_waits_workflow,
    waiting_workflow,
)


async def start(gw: Gateway, **body: Any) -> tuple[int, dict[str, Any]]:
    answer = await gw.call("POST", "/v1/runs", role="operator", json=body)
    return answer.status, answer.body


async def test_start_and_get(gateway: Gateway) -> None:
    await deploy(gateway, queued_workflow())
    status, body = await start(gateway, workflow_id="queued", input={"n": 1}, config={"c": True})
    assert status == 201, body
    assert body["status"] == "RUNNING" and body["created"] is True
    # operator: a viewer sees payloads redacted (test_callers.py)
    run = await gateway.call("GET", f"/v1/runs/{body['run_id']}", role="operator")
    assert run.status == 200
    assert run.body["workflow_id"] == "queued" and run.body["version"] == 1
    assert run.body["input"] == {"n": 1} and run.body["config"] == {"c": True}
    [task] = run.body["tasks"]
    assert task["node_id"] == "work" and task["type"] == "TASK"
    assert task["state"] in ("PENDING", "QUEUED") and task["attempt"] == 0
    assert task["input"] == {"n": 1}
    assert {"created_at", "started_at", "finished_at", "output", "error"} <= task.keys()


async def test_idempotent_start_answers_200_with_the_same_run(gateway: Gateway) -> None:
    await deploy(gateway, queued_workflow())
    first_status, first = await start(
        gateway, workflow_id="queued", input={"n": 1, "m": [2.0]}, idempotency_key="k1"
    )
    # the same request sent again (its answer lost), keys in another order, 2.0 as 2
    again_status, again = await start(
        gateway, workflow_id="queued", input={"m": [2], "n": 1}, idempotency_key="k1"
    )
    assert (first_status, again_status) == (201, 200), again
    assert again["run_id"] == first["run_id"] and again["created"] is False


async def test_a_start_key_reused_with_another_request_is_409(gateway: Gateway) -> None:
    await deploy(gateway, queued_workflow())
    status, first = await start(gateway, workflow_id="queued", input={"n": 1}, idempotency_key="k2")
    assert status == 201, first
    for changed in ({"input": {"n": 2}}, {"config": {"c": 1}}, {"version": 1}):
        request = {"workflow_id": "queued", "input": {"n": 1}, "idempotency_key": "k2"} | changed
        status, body = await start(gateway, **request)
        assert status == 409, (changed, body)
        assert body["type"] == "urn:composer:problem:idempotency-key-reused"
        assert body["idempotency_key"] == "k2" and body["run_id"] == first["run_id"]
        assert "'k2'" in body["detail"] and "different request" in body["detail"]
    run = await gateway.call("GET", f"/v1/runs/{first['run_id']}", role="operator")
    assert run.body["input"] == {"n": 1}  # the refused repeats changed nothing
    listed = await gateway.call("GET", "/v1/runs", role="viewer", params={"workflow_id": "queued"})
    assert [r["run_id"] for r in listed.body["runs"]].count(first["run_id"]) == 1


async def test_a_key_stored_before_digests_answers_the_first_run(
    gateway: Gateway, database_url: str
) -> None:
    """Keys from before V012 have no digest: a repeat answers the first run, as it did."""
    await deploy(gateway, queued_workflow("legacy"))
    status, first = await start(
        gateway, workflow_id="legacy", input={"n": 1}, idempotency_key="old"
    )
    assert status == 201, first
    conn = await repo.connect(database_url)
    try:
        await conn.execute(
            "UPDATE run_idempotency_keys SET request_digest = NULL WHERE idempotency_key = 'old'"
        )
    finally:
        await conn.close()
    status, again = await start(
        gateway, workflow_id="legacy", input={"n": 2}, idempotency_key="old"
    )
    assert (status, again["run_id"]) == (200, first["run_id"])


async def test_twenty_concurrent_identical_starts_create_one_run(gateway: Gateway) -> None:
    await deploy(gateway, queued_workflow("twenty"))
    answers = await asyncio.gather(
        *(
            start(gateway, workflow_id="twenty", input={"n": 5}, idempotency_key="once")
            for _ in range(20)
        )
    )
    statuses = sorted(s for s, _ in answers)
    assert statuses == [200] * 19 + [201], answers
    assert len({b["run_id"] for _, b in answers}) == 1
    listed = await gateway.call("GET", "/v1/runs", role="viewer", params={"workflow_id": "twenty"})
    assert len(listed.body["runs"]) == 1


async def test_client_run_ids(gateway: Gateway) -> None:
    await deploy(gateway, queued_workflow())
    run_id = str(uuid6.uuid7())
    status, body = await start(gateway, workflow_id="queued", run_id=run_id)
    assert (status, body["run_id"]) == (201, run_id)
    status, body = await start(gateway, workflow_id="queued", run_id=run_id)
    assert status == 409, body
    assert run_id in body["detail"]
    for bad in ("not-a-uuid", str(uuid.uuid4()), _uuid7_at(dt.datetime(2020, 1, 1, tzinfo=dt.UTC))):
        status, body = await start(gateway, workflow_id="queued", run_id=bad)
        assert status == 400, (bad, body)


def _uuid7_at(when: dt.datetime) -> str:
    millis = int(when.timestamp() * 1000)
    return str(uuid.UUID(int=(millis << 80) | (0x7 << 76) | (0b10 << 62) | 12345))


async def test_start_errors(gateway: Gateway) -> None:
    await deploy(gateway, queued_workflow())
    cases = [
        ({"workflow_id": "absent"}, 404),
        ({"workflow_id": "queued", "version": 9}, 404),
        ({"workflow_id": "queued", "start_node": "nope"}, 400),
        ({"workflow_id": "queued", "idempotency_kye": "typo"}, 400),
        ({"workflow_id": 5}, 400),
        ({}, 400),
    ]
    for body, expected in cases:
        answer = await gateway.call("POST", "/v1/runs", role="operator", json=body)
        assert answer.status == expected, (body, answer.body)
        assert answer.content_type == "application/problem+json"
    typo = await gateway.call(
        "POST", "/v1/runs", role="operator", json={"workflow_id": "queued", "idempotency_kye": "x"}
    )
    assert typo.body["errors"][0]["path"] == "idempotency_kye"
    array = await gateway.call("POST", "/v1/runs", role="operator", json=[1, 2])
    assert array.status == 400


async def test_list_pages_with_an_opaque_cursor(gateway: Gateway) -> None:
    await deploy(gateway, queued_workflow("paged"))
    await deploy(gateway, waiting_workflow("paged-other"))
    started = [
        (await start(gateway, workflow_id="paged", input={"n": i}))[1]["run_id"] for i in range(5)
    ]
    await start(gateway, workflow_id="paged-other")
    seen: list[str] = []
    cursor: str | None = None
    while True:
        params = {"workflow_id": "paged", "limit": "2"} | ({"cursor": cursor} if cursor else {})
        page = await gateway.call("GET", "/v1/runs", role="viewer", params=params)
        assert page.status == 200, page.body
        seen += [r["run_id"] for r in page.body["runs"]]
        cursor = page.body["next_cursor"]
        if cursor is None:
            break
        assert started[0] not in cursor  # opaque: not the run id itself
    assert seen == started[::-1]
    everything = await gateway.call("GET", "/v1/runs", role="viewer", params={"limit": "1000"})
    assert set(started) < {r["run_id"] for r in everything.body["runs"]}
    succeeded = await gateway.call(
        "GET", "/v1/runs", role="viewer", params={"workflow_id": "paged", "status": "SUCCEEDED"}
    )
    assert succeeded.body["runs"] == []
    later = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)).isoformat()
    none = await gateway.call("GET", "/v1/runs", role="viewer", params={"created_after": later})
    assert none.body["runs"] == []
    for bad in (
        {"cursor": "garbage!"},
        {"limit": "0"},
        {"limit": "lots"},
        {"status": "DONE"},
        {"created_after": "yesterday"},
        {"created_after": "2026-01-01T00:00:00"},
        {"colour": "red"},
    ):
        answer = await gateway.call("GET", "/v1/runs", role="viewer", params=bad)
        assert answer.status == 400, (bad, answer.body)


async def test_get_errors(gateway: Gateway) -> None:
    missing = await gateway.call("GET", f"/v1/runs/{uuid6.uuid7()}", role="viewer")
    assert missing.status == 404
    malformed = await gateway.call("GET", "/v1/runs/abc", role="viewer")
    assert malformed.status == 400 and "not a UUID" in malformed.body["detail"]


async def test_signal_buffered_then_delivered(gateway: Gateway) -> None:
    await deploy(gateway, two_waits_workflow("buffers"))
    await deploy(gateway, waiting_workflow())
    _, first = await start(gateway, workflow_id="buffers")
    buffered = await gateway.call(
        "POST", f"/v1/runs/{first['run_id']}/signals/later", role="operator", json={"x": 1}
    )
    assert (buffered.status, buffered.body) == (200, {"delivered": False}), buffered.body

    _, waiting = await start(gateway, workflow_id="waits")
    run_id = waiting["run_id"]
    delivered = await gateway.call(
        "POST", f"/v1/runs/{run_id}/signals/go", role="operator", json={"paid": 42}
    )
    assert (delivered.status, delivered.body) == (200, {"delivered": True})
    run = await gateway.call("GET", f"/v1/runs/{run_id}", role="operator")
    assert run.body["status"] == "SUCCEEDED"
    assert run.body["output"] == {"got": {"paid": 42}}
    finished = await gateway.call("POST", f"/v1/runs/{run_id}/signals/go", role="operator")
    assert finished.status == 409
    missing = await gateway.call("POST", f"/v1/runs/{uuid6.uuid7()}/signals/go", role="operator")
    assert missing.status == 404
    bad_payload = await gateway.call(
        "POST",
        f"/v1/runs/{run_id}/signals/go",
        role="operator",
        data="{nope",
        content_type="application/json",
    )
    assert bad_payload.status == 400


async def test_a_signal_no_node_waits_for_is_refused_not_buffered(gateway: Gateway) -> None:
    await deploy(gateway, two_waits_workflow("declares"))
    await deploy(gateway, queued_workflow("declares-none"))
    _, run = await start(gateway, workflow_id="declares")
    refused = await gateway.call(
        "POST", f"/v1/runs/{run['run_id']}/signals/later-typo", role="operator", json={"x": 1}
    )
    assert refused.status == 422, refused.body
    assert refused.body["type"] == "urn:composer:problem:unknown-signal"
    assert refused.body["signal"] == "later-typo"
    assert refused.body["declared"] == ["go", "later"]
    assert "'later-typo'" in refused.body["detail"] and "'later'" in refused.body["detail"]
    shown = await gateway.call("GET", f"/v1/runs/{run['run_id']}", role="operator")
    assert shown.body["signals"] == []  # nothing was buffered

    _, other = await start(gateway, workflow_id="declares-none", input={"n": 1})
    none = await gateway.call("POST", f"/v1/runs/{other['run_id']}/signals/go", role="operator")
    assert none.status == 422 and none.body["declared"] == []
    assert "no WAIT_FOR_EVENT node" in none.body["detail"]

    # once the run is over it takes no signal at all, declared or not: 409, as for any
    cancelled = await gateway.call(
        "POST", f"/v1/runs/{other['run_id']}/cancel", role="operator", json={}
    )
    assert cancelled.status == 200, cancelled.body
    late = await gateway.call("POST", f"/v1/runs/{other['run_id']}/signals/go", role="operator")
    assert late.status == 409, late.body


async def test_a_signal_sent_again_with_its_idempotency_key_takes_effect_once(
    gateway: Gateway,
) -> None:
    await deploy(
        gateway,
        {
            "id": "two-waits",
            "nodes": [
                {"id": "w1", "type": "WAIT_FOR_EVENT", "spec": {"event": "go"}},
                {"id": "w2", "type": "WAIT_FOR_EVENT", "spec": {"event": "go"}},
            ],
            "edges": [{"from": "w1", "to": "w2"}],
        },
    )
    _, body = await start(gateway, workflow_id="two-waits")
    run_id = body["run_id"]

    async def send(key: str, name: str = "go") -> Any:
        return await gateway.call(
            "POST",
            f"/v1/runs/{run_id}/signals/{name}",
            role="operator",
            json={"k": key},
            headers={"Idempotency-Key": key},
        )

    first, again = await send("pay-1"), await send("pay-1")
    assert (first.status, first.body) == (200, {"delivered": True})
    assert (again.status, again.body) == (200, {"delivered": True})  # as the first answered
    run = await gateway.call("GET", f"/v1/runs/{run_id}", role="viewer")
    states = {t["node_id"]: t["state"] for t in run.body["tasks"]}
    assert states == {"w1": "COMPLETED", "w2": "WAITING"}  # one node took it, once

    other_name = await send("pay-1", "stop")
    assert other_name.status == 409 and "pay-1" in other_name.body["detail"]
    second = await send("pay-2")  # a new key is a new signal
    assert (second.status, second.body) == (200, {"delivered": True})
    run = await gateway.call("GET", f"/v1/runs/{run_id}", role="viewer")
    assert run.body["status"] == "SUCCEEDED"


async def test_cancel_then_retry_from_a_node(gateway: Gateway) -> None:
    await deploy(gateway, queued_workflow())
    _, body = await start(gateway, workflow_id="queued", input={"n": 1})
    run_id = body["run_id"]
    early_retry = await gateway.call(
        "POST", f"/v1/runs/{run_id}/retry", role="operator", json={"from_node": "work"}
    )
    assert early_retry.status == 409, early_retry.body  # tasks are still active

    cancelled = await gateway.call(
        "POST", f"/v1/runs/{run_id}/cancel", role="operator", json={"reason": "enough"}
    )
    assert cancelled.status == 200, cancelled.body
    assert cancelled.body["status"] == "CANCELLED" and "enough" in (cancelled.body["error"] or "")
    again = await gateway.call("POST", f"/v1/runs/{run_id}/cancel", role="operator")
    # sent again (its answer lost, say): answered as the first cancel was
    assert (again.status, again.body["status"]) == (200, "CANCELLED"), again.body

    unknown_node = await gateway.call(
        "POST", f"/v1/runs/{run_id}/retry", role="operator", json={"from_node": "nope"}
    )
    assert unknown_node.status == 400
    missing_field = await gateway.call("POST", f"/v1/runs/{run_id}/retry", role="operator", json={})
    assert missing_field.status == 400
    retried = await gateway.call(
        "POST",
        f"/v1/runs/{run_id}/retry",
        role="operator",
        json={"from_node": "work", "input": {"n": 2}},
    )
    assert retried.status == 200, retried.body
    assert retried.body["status"] == "RUNNING" and retried.body["input"] == {"n": 2}
    assert retried.body["tasks"][0]["input"] == {"n": 2}
    missing = await gateway.call("POST", f"/v1/runs/{uuid6.uuid7()}/cancel", role="operator")
    assert missing.status == 404


async def test_health_readiness_metrics_and_docs(gateway: Gateway) -> None:
    health = await gateway.call("GET", "/healthz", role=None)
    assert (health.status, health.body) == (200, {"status": "ok"})
    ready = await gateway.admin("/readyz")
    assert ready.status == 200, ready.body
    assert ready.body == {"ready": True, "checks": {"database": "ok", "redis": "ok"}}
    for duplicate in ("/readyz", "/metrics"):  # one place for each: the admin port
        assert (await gateway.call("GET", duplicate, role=None)).status == 404
    spec = await gateway.call("GET", "/openapi.json", role=None)
    assert spec.body["openapi"].startswith("3.1")
    assert "/v1/runs/{run_id}/result" in spec.body["paths"]
    assert "/readyz" not in spec.body["paths"]
    docs = await gateway.call("GET", "/docs", role=None)
    assert docs.status == 200 and "/v1/runs/{run_id}/signals/{name}" in docs.body
    assert "<script" not in docs.body
    metrics = await gateway.admin("/metrics")
    assert metrics.status == 200 and metrics.content_type == "text/plain"
