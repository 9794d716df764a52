"""Who did what, and what viewers see, over HTTP with named tokens.

The gateway runs with named tokens (``name=token:role``) beside one in the old
form; each write records the name of the token behind it, and a viewer's
answers leave payloads out unless the workflow opts in.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from composer_api_gateway.auth import Role, default_name
from tests.integration.api.conftest import (
    Answer,
    Gateway,
    open_gateway,
    two_waits_workflow,
    waiting_workflow,
)
from tests.unit.cli.runner import Result, invoke

SECRETS = {
    "release": ("release-token-00000000000000000000000000", "admin"),
    "ci": ("ci-token-0000000000000000000000000000000", "operator"),
    "oncall": ("oncall-token-000000000000000000000000000", "operator"),
    "auditor": ("auditor-token-00000000000000000000000000", "viewer"),
}
OLD_FORM = "legacy-token-0000000000000000000000000000"
TOKENS = ",".join(f"{name}={secret}:{role}" for name, (secret, role) in SECRETS.items())


@pytest.fixture
async def gw(database_url: str, redis_url: str) -> AsyncIterator[Gateway]:
    async with open_gateway(
        database_url, redis_url, tokens=f"{TOKENS},{OLD_FORM}:operator", max_context_bytes=200
    ) as gateway:
        yield gateway


async def call(gw: Gateway, who: str, method: str, path: str, **kwargs: Any) -> Answer:
    """A request with the token of ``who`` (a name of SECRETS, or "legacy")."""
    secret = OLD_FORM if who == "legacy" else SECRETS[who][0]
    return await gw.call(
        method, path, role=None, headers={"Authorization": f"Bearer {secret}"}, **kwargs
    )


async def create(gw: Gateway, definition: dict[str, Any]) -> Answer:
    created = await call(gw, "release", "POST", "/v1/workflows", json=definition)
    assert created.status == 201, created.body
    deployed = await call(
        gw, "release", "POST", f"/v1/workflows/{definition['id']}/versions/1/deploy"
    )
    assert deployed.status == 200, deployed.body
    return deployed


async def test_each_write_records_the_name_of_its_token(gw: Gateway) -> None:
    deployed = await create(gw, two_waits_workflow("audited"))
    assert deployed.body["created_by"] == "release"
    versions = await call(gw, "auditor", "GET", "/v1/workflows/audited")
    assert versions.body["versions"][0]["created_by"] == "release"
    assert (await call(gw, "ci", "GET", "/v1/whoami")).body == {"name": "ci", "role": "operator"}

    started = await call(
        gw,
        "ci",
        "POST",
        "/v1/runs",
        json={"workflow_id": "audited", "context": {"ticket": "OPS-1"}},
    )
    assert started.status == 201, started.body
    run_id = started.body["run_id"]
    early = await call(gw, "oncall", "POST", f"/v1/runs/{run_id}/signals/later", json={"n": 1})
    assert early.body == {"delivered": False}  # buffered: its node does not wait yet
    go = await call(gw, "oncall", "POST", f"/v1/runs/{run_id}/signals/go", json={"n": 2})
    assert go.body == {"delivered": True}

    run = (await call(gw, "ci", "GET", f"/v1/runs/{run_id}")).body
    assert run["status"] == "SUCCEEDED"
    assert (run["started_by"], run["cancelled_by"], run["retried_by"]) == ("ci", None, None)
    assert run["context"] == {
        "caller": {"name": "ci", "role": "operator"},
        "metadata": {"ticket": "OPS-1"},
    }
    assert [(s["name"], s["payload"], s["sent_by"], s["consumed_by"]) for s in run["signals"]] == [
        ("later", {"n": 1}, "oncall", "after"),
        ("go", {"n": 2}, "oncall", "wait"),
    ]

    retried = await call(
        gw, "oncall", "POST", f"/v1/runs/{run_id}/retry", json={"from_node": "wait"}
    )
    assert retried.status == 200, retried.body
    assert (retried.body["started_by"], retried.body["retried_by"]) == ("ci", "oncall")
    assert retried.body["context"]["caller"]["name"] == "ci"  # the start's, kept
    cancelled = await call(
        gw, "oncall", "POST", f"/v1/runs/{run_id}/cancel", json={"reason": "done"}
    )
    assert cancelled.status == 200, cancelled.body
    assert cancelled.body["cancelled_by"] == "oncall"
    again = await call(gw, "ci", "POST", f"/v1/runs/{run_id}/cancel")
    assert again.status == 200 and again.body["cancelled_by"] == "oncall"  # the first's

    by_old_form = await call(gw, "legacy", "POST", "/v1/runs", json={"workflow_id": "audited"})
    listed = await call(gw, "auditor", "GET", "/v1/runs", params={"workflow_id": "audited"})
    by_run = {r["run_id"]: r["started_by"] for r in listed.body["runs"]}
    assert by_run == {
        run_id: "ci",
        by_old_form.body["run_id"]: default_name(OLD_FORM, Role.OPERATOR),
    }


async def test_the_start_context_is_a_small_json_object(gw: Gateway) -> None:
    await create(gw, waiting_workflow("ctx"))
    too_large = await call(
        gw, "ci", "POST", "/v1/runs", json={"workflow_id": "ctx", "context": {"x": "y" * 300}}
    )
    assert too_large.status == 413, too_large.body
    assert too_large.body["setting"] == "COMPOSER_MAX_CONTEXT_BYTES"
    not_object = await call(
        gw, "ci", "POST", "/v1/runs", json={"workflow_id": "ctx", "context": [1, 2]}
    )
    assert not_object.status == 400, not_object.body
    assert "context" in not_object.body["detail"]
    without = await call(gw, "ci", "POST", "/v1/runs", json={"workflow_id": "ctx"})
    run = await call(gw, "ci", "GET", f"/v1/runs/{without.body['run_id']}")
    assert run.body["context"] == {"caller": {"name": "ci", "role": "operator"}, "metadata": {}}


async def test_viewers_see_payloads_redacted_unless_the_workflow_allows(gw: Gateway) -> None:
    await create(gw, waiting_workflow("closed"))
    await create(gw, waiting_workflow("open") | {"viewers_see_payloads": True})
    runs = {}
    for workflow in ("closed", "open"):
        started = await call(
            gw,
            "ci",
            "POST",
            "/v1/runs",
            json={
                "workflow_id": workflow,
                "input": {"api_key": "s3cret-input"},
                "config": {"password": "s3cret-config"},
                "context": {"email": "s3cret@example.com"},
            },
        )
        run_id = started.body["run_id"]
        await call(
            gw, "ci", "POST", f"/v1/runs/{run_id}/signals/go", json={"token": "s3cret-signal"}
        )
        runs[workflow] = run_id

    closed = await call(gw, "auditor", "GET", f"/v1/runs/{runs['closed']}")
    assert closed.status == 200
    assert "s3cret" not in json.dumps(closed.body)
    body = closed.body
    assert body["redacted"] is True and body["status"] == "SUCCEEDED"
    assert (body["input"], body["config"], body["output"], body["error"], body["context"]) == (
        None,
        None,
        None,
        None,
        None,
    )
    assert body["started_by"] == "ci"  # who did what stays visible
    [task] = body["tasks"]
    assert task["redacted"] is True and (task["input"], task["output"]) == (None, None)
    assert task["state"] == "COMPLETED"
    assert [(s["name"], s["payload"], s["redacted"], s["sent_by"]) for s in body["signals"]] == [
        ("go", None, True, "ci"),
    ]
    result = await call(gw, "auditor", "GET", f"/v1/runs/{runs['closed']}/result")
    assert result.body["redacted"] is True and result.body["output"] is None

    as_operator = await call(gw, "oncall", "GET", f"/v1/runs/{runs['closed']}")
    assert as_operator.body["redacted"] is False
    assert as_operator.body["input"] == {"api_key": "s3cret-input"}
    assert as_operator.body["context"]["metadata"] == {"email": "s3cret@example.com"}
    assert as_operator.body["signals"][0]["payload"] == {"token": "s3cret-signal"}

    opened = await call(gw, "auditor", "GET", f"/v1/runs/{runs['open']}")
    assert opened.body["redacted"] is False
    assert opened.body["config"] == {"password": "s3cret-config"}
    assert opened.body["output"] == {"got": {"token": "s3cret-signal"}}
    assert opened.body["tasks"][0]["output"] == {"token": "s3cret-signal"}

    cancelled = {}
    for workflow in ("closed", "open"):
        started = await call(gw, "ci", "POST", "/v1/runs", json={"workflow_id": workflow})
        cancelled[workflow] = started.body["run_id"]
        reason = {"reason": f"{'s3cret' if workflow == 'closed' else 'plain'} reason"}
        await call(gw, "ci", "POST", f"/v1/runs/{started.body['run_id']}/cancel", json=reason)
    listed = await call(gw, "auditor", "GET", "/v1/runs", params={"status": "CANCELLED"})
    assert "s3cret" not in json.dumps(listed.body)
    errors = {r["run_id"]: (r["error"], r["redacted"]) for r in listed.body["runs"]}
    assert errors[cancelled["closed"]] == (None, True)
    assert errors[cancelled["open"]] == ("plain reason", False)
    seen_by_operator = await call(gw, "ci", "GET", "/v1/runs", params={"status": "CANCELLED"})
    shown = {r["run_id"]: r["error"] for r in seen_by_operator.body["runs"]}
    assert shown[cancelled["closed"]] == "s3cret reason"


async def test_the_opt_in_is_a_validated_boolean_and_documented(gw: Gateway) -> None:
    bad = await call(
        gw,
        "release",
        "POST",
        "/v1/workflows",
        json=waiting_workflow("bad") | {"viewers_see_payloads": "yes"},
    )
    assert bad.status == 422, bad.body
    assert [p["path"] for p in bad.body["problems"]] == ["viewers_see_payloads"]
    spec = (await gw.call("GET", "/openapi.json", role=None)).body
    assert "viewers_see_payloads" in spec["components"]["schemas"]["WorkflowSpec"]["properties"]
    show = spec["paths"]["/v1/runs/{run_id}"]["get"]["description"]
    assert "viewer" in show and "redacted" in show and "viewers_see_payloads" in show
    run = spec["components"]["schemas"]["Run"]["properties"]
    assert {"started_by", "cancelled_by", "retried_by", "context", "redacted", "signals"} <= set(
        run
    )


async def composer(gw: Gateway, who: str, *args: str) -> Result:
    """The ``composer`` CLI with the token of ``who``, in a thread (it is synchronous)."""
    env = {"COMPOSER_API_URL": gw.url, "COMPOSER_API_TOKEN": SECRETS[who][0], "COLUMNS": "200"}
    return await asyncio.to_thread(invoke, list(args), env)


async def test_the_cli_shows_who_did_what_and_what_is_redacted(gw: Gateway) -> None:
    await create(gw, waiting_workflow("cli-audit"))
    started = await composer(
        gw, "ci", "start", "cli-audit", "--input", '{"k": "s3cret"}', "--context", '{"t": 1}'
    )
    assert started.exit_code == 0, started.output
    run_id = started.output.split()[1]
    signalled = await composer(gw, "oncall", "signal", run_id, "go", "--data", '{"p": "s3cret"}')
    assert signalled.exit_code == 0, signalled.output
    retried = await composer(gw, "oncall", "retry", run_id, "--from", "wait")
    assert retried.exit_code == 0, retried.output

    shown = await composer(gw, "ci", "get", run_id)
    assert shown.exit_code == 0, shown.output
    assert "started by ci" in shown.output and "retried by oncall" in shown.output
    assert "go" in shown.output and "oncall" in shown.output and '{"p":"s3cret"}' in shown.output
    as_json = await composer(gw, "ci", "get", run_id, "--json")
    assert json.loads(as_json.output)["context"]["metadata"] == {"t": 1}

    viewed = await composer(gw, "auditor", "get", run_id)
    assert viewed.exit_code == 0, viewed.output
    assert "s3cret" not in viewed.output
    assert "started by ci" in viewed.output and "redacted" in viewed.output
