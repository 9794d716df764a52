"""The API with sealing on: it answers with opened values, stores none in the clear,
refuses a value that would read as sealed, and still answers, saying so, for a
run whose key it does not have (docs/sealing.md)."""

from __future__ import annotations

import base64
import os

from composer_engine.sealing import PREFIX, sealer_from
from tests.integration.api.conftest import deploy, open_gateway, waiting_workflow
from tests.integration.e2e.conftest import open_stack

SECRET = "SECRET-API-4111"
KEYS = f"k1:{base64.b64encode(os.urandom(32)).decode()}"


async def test_the_api_answers_opened_values_and_stores_them_sealed(
    database_url: str, redis_url: str
) -> None:
    async with (
        open_stack(database_url, redis_url, sealer=sealer_from(KEYS)) as stack,
        open_gateway(database_url, redis_url, prefix=stack.prefix, encryption_keys=KEYS) as gw,
    ):
        await deploy(gw, waiting_workflow("sealed-waits"))
        started = await gw.call(
            "POST",
            "/v1/runs",
            role="operator",
            json={"workflow_id": "sealed-waits", "input": {"card": SECRET}},
        )
        assert started.status == 201, started.body
        run_id = started.body["run_id"]
        sent = await gw.call(
            "POST", f"/v1/runs/{run_id}/signals/go", role="operator", json={"note": SECRET}
        )
        assert sent.status < 300, sent.body
        run = await stack.wait_run(run_id)

        shown = await gw.call("GET", f"/v1/runs/{run_id}", role="operator")
        assert shown.body["status"] == "SUCCEEDED"
        assert shown.body["input"] == {"card": SECRET}
        assert shown.body["output"] == {"got": {"note": SECRET}}
        assert shown.body["tasks"][0]["output"] == {"note": SECRET}

        assert isinstance(run.input, str) and run.input.startswith(PREFIX)  # as stored
        async with stack.pool.acquire() as conn:
            stored = await conn.fetch(
                "SELECT row_to_json(r)::text FROM workflow_runs r WHERE id = $1 "
                "UNION ALL SELECT row_to_json(t)::text FROM task_instances t WHERE run_id = $1",
                run_id,
            )
        assert stored and not [r[0] for r in stored if SECRET in r[0]]

        looks_sealed = await gw.call(
            "POST",
            "/v1/runs",
            role="operator",
            json={"workflow_id": "sealed-waits", "input": PREFIX + "k1:x:y"},
        )
        assert looks_sealed.status == 400, looks_sealed.body
        assert "$sealed:v1:" in looks_sealed.body["detail"]

        # a start's Idempotency-Key keeps its request's digest sealed, and still tells
        # the same request sent again from another one
        keyed = {"workflow_id": "sealed-waits", "input": {"card": SECRET}, "idempotency_key": "s"}
        answers = [
            await gw.call("POST", "/v1/runs", role="operator", json=keyed | changed)
            for changed in ({}, {}, {"input": {"card": "other"}})
        ]
        assert [a.status for a in answers] == [201, 200, 409], answers[-1].body
        assert answers[1].body["run_id"] == answers[0].body["run_id"]
        async with stack.pool.acquire() as conn:
            digest = await conn.fetchval(
                "SELECT request_digest FROM run_idempotency_keys WHERE idempotency_key = 's'"
            )
        assert isinstance(digest, str) and digest.startswith(PREFIX)

    # an api-gateway without k1 still answers for the run, and says why it cannot show it
    async with open_gateway(database_url, redis_url) as plain:
        shown = await plain.call("GET", f"/v1/runs/{run_id}", role="operator")
        assert shown.status == 200
        assert shown.body["input"] == (
            "<sealed with key 'k1', which this api-gateway does not have>"
        )


async def test_a_cancel_reason_is_sealed_in_every_row_and_shown_to_payload_readers(
    database_url: str, redis_url: str
) -> None:
    """The finding: with sealing on, the reason was stored in the clear on each task the
    cancel stopped (the run's error and the history's rows were already sealed)."""
    reason = f"customer {SECRET} asked us to stop"
    async with (
        open_stack(database_url, redis_url, sealer=sealer_from(KEYS)) as stack,
        open_gateway(database_url, redis_url, prefix=stack.prefix, encryption_keys=KEYS) as gw,
    ):
        await deploy(gw, waiting_workflow("sealed-cancels"))
        started = await gw.call(
            "POST", "/v1/runs", role="operator", json={"workflow_id": "sealed-cancels"}
        )
        assert started.status == 201, started.body
        run_id = started.body["run_id"]
        cancelled = await gw.call(
            "POST", f"/v1/runs/{run_id}/cancel", role="operator", json={"reason": reason}
        )
        assert cancelled.status == 200, cancelled.body

        async with stack.pool.acquire() as conn:
            stored = await conn.fetch(
                "SELECT row_to_json(r)::text FROM workflow_runs r WHERE id = $1 "
                "UNION ALL SELECT row_to_json(t)::text FROM task_instances t WHERE run_id = $1 "
                "UNION ALL SELECT row_to_json(h)::text FROM run_history h WHERE run_id = $1",
                run_id,
            )
            task_error = await conn.fetchval(
                "SELECT error FROM task_instances WHERE run_id = $1", run_id
            )
        assert len(stored) > 3 and [r[0] for r in stored if SECRET in r[0]] == []
        assert isinstance(task_error, str) and task_error.startswith(PREFIX)

        # whoever sees payloads reads it: the run's error, its task's, the history's
        shown = await gw.call("GET", f"/v1/runs/{run_id}", role="operator")
        assert shown.body["status"] == "CANCELLED"
        assert shown.body["error"] == reason
        assert shown.body["tasks"][0]["error"] == reason
        history = await gw.call("GET", f"/v1/runs/{run_id}/history", role="operator")
        reasons = [e["detail"].get("reason") for e in history.body["entries"]]
        assert reasons.count(reason) == 2, history.body  # task.cancelled and run.cancelled
        viewer = await gw.call("GET", f"/v1/runs/{run_id}", role="viewer")
        assert viewer.body["error"] is None and viewer.body["tasks"][0]["error"] is None

        looks_sealed = await gw.call(
            "POST",
            "/v1/runs",
            role="operator",
            json={"workflow_id": "sealed-cancels"},
        )
        refused = await gw.call(
            "POST",
            f"/v1/runs/{looks_sealed.body['run_id']}/cancel",
            role="operator",
            json={"reason": PREFIX + "k1:x:y"},
        )
        assert refused.status == 400, refused.body
        assert "$sealed:v1:" in refused.body["detail"]
