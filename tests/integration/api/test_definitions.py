"""/v1/workflows over HTTP: YAML and JSON definitions, versions, deploy, delete, 422s."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

import composer_repo as repo
from tests.integration.api.conftest import Gateway, deploy, queued_workflow

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


async def test_create_yaml_then_versions_deploy_and_delete(gateway: Gateway) -> None:
    text = (EXAMPLES / "price-check.yaml").read_text()
    first = await gateway.call("POST", "/v1/workflows", data=text, content_type="application/yaml")
    assert first.status == 201, first.body
    assert first.body == {
        "id": "price-check",
        "version": 1,
        "name": "Price check",
        "deployed": False,
        "unchanged": False,
    }
    assert first.headers["Location"] == "/v1/workflows/price-check/versions/1"

    same = await gateway.call(
        "POST", "/v1/workflows", json=yaml.safe_load(text), params={"deploy": "true"}
    )
    assert same.status == 200, same.body  # the same definition as JSON: no new version
    assert same.body == {
        "id": "price-check",
        "version": 1,
        "name": "Price check",
        "deployed": True,
        "unchanged": True,
    }

    second = await gateway.call(
        "POST",
        "/v1/workflows",
        json=yaml.safe_load(text) | {"description": "v2"},
        params={"deploy": "true"},
    )
    assert second.status == 201
    assert second.body["version"] == 2 and second.body["deployed"] is True
    assert second.body["unchanged"] is False

    listed = await gateway.call("GET", "/v1/workflows", role="viewer")
    assert [w["id"] for w in listed.body["workflows"]] == ["price-check"]
    assert listed.body["workflows"][0]["deployed_version"] == 2

    shown = await gateway.call("GET", "/v1/workflows/price-check", role="viewer")
    assert shown.status == 200
    assert [v["version"] for v in shown.body["versions"]] == [2, 1]
    assert shown.body["deployed_version"] == 2

    one = await gateway.call("GET", "/v1/workflows/price-check/versions/1", role="viewer")
    assert one.status == 200
    assert one.body["spec"]["nodes"][0]["id"] == "fetch"
    assert one.body["spec"] == yaml.safe_load(text)  # stored as written, defaults not filled in

    deployed = await gateway.call("POST", "/v1/workflows/price-check/versions/1/deploy")
    assert deployed.status == 200 and deployed.body["deployed"] is True
    again = await gateway.call("GET", "/v1/workflows/price-check", role="viewer")
    assert again.body["deployed_version"] == 1

    deleted = await gateway.call("DELETE", "/v1/workflows/price-check")
    assert deleted.status == 200 and deleted.body == {
        "id": "price-check",
        "deleted_versions": [1, 2],
    }
    gone = await gateway.call("GET", "/v1/workflows/price-check", role="viewer")
    assert gone.status == 404
    assert gone.content_type == "application/problem+json"
    start = await gateway.call(
        "POST", "/v1/runs", role="operator", json={"workflow_id": "price-check", "version": 1}
    )
    assert start.status in (400, 404), start.body  # a deleted workflow starts no run


async def test_an_unchanged_definition_adds_no_version(gateway: Gateway) -> None:
    """What `composer apply` of a file nobody changed relies on: compared as the model
    reads it, so layout, comments, key order and spelt-out defaults are no change."""
    text = (EXAMPLES / "price-check.yaml").read_text().replace("id: price-check", "id: twice")
    first = await gateway.call("POST", "/v1/workflows", data=text, content_type="application/yaml")
    assert (first.status, first.body["version"], first.body["unchanged"]) == (201, 1, False)

    document = yaml.safe_load(text)
    document["nodes"][0]["retry"]["multiplier"] = 2.0  # the default, spelt out
    reordered = dict(reversed(list(document.items())))
    relaid = "# reformatted\n" + yaml.safe_dump(reordered, default_flow_style=True)
    for body, media in ((relaid, "application/yaml"), (reordered, None)):
        again = await gateway.call(
            "POST",
            "/v1/workflows",
            data=body if media else None,
            json=None if media else body,
            content_type=media,
        )
        assert again.status == 200, again.body
        assert (again.body["version"], again.body["unchanged"]) == (1, True)
        assert again.body["deployed"] is False
    shown = await gateway.call("GET", "/v1/workflows/twice", role="viewer")
    assert [v["version"] for v in shown.body["versions"]] == [1]

    deployed = await gateway.call(
        "POST", "/v1/workflows", json=document, params={"deploy": "true"}
    )  # unchanged, and now deployed: the version it already is
    assert deployed.status == 200, deployed.body
    assert (deployed.body["version"], deployed.body["deployed"]) == (1, True)

    changed = yaml.safe_load(text)
    changed["nodes"][0]["retry"]["max_attempts"] = 5
    second = await gateway.call("POST", "/v1/workflows", json=changed)
    assert (second.status, second.body["version"], second.body["unchanged"]) == (201, 2, False)
    # the first definition again differs from the newest: a new version, not version 1
    back = await gateway.call("POST", "/v1/workflows", data=text, content_type="application/yaml")
    assert (back.status, back.body["version"]) == (201, 3)

    await gateway.call("DELETE", "/v1/workflows/twice")
    revived = await gateway.call(
        "POST", "/v1/workflows", data=text, content_type="application/yaml"
    )  # a deleted workflow has no newest version to be unchanged from
    assert (revived.status, revived.body["version"]) == (201, 4)


async def test_every_problem_is_listed_with_its_path(gateway: Gateway) -> None:
    broken = {
        "id": "broken",
        "nodes": [
            {"id": "a", "type": "HTTP", "spec": {}},
            {"id": "a", "type": "WAIT", "spec": {}},
            {
                "id": "c",
                "type": "PYTHON",
                "spec": {"code": "def main(input): pass", "input": "{{nope.x}}"},
            },
        ],
        "edges": [{"from": "a", "to": "zzz"}],
    }
    answer = await gateway.call("POST", "/v1/workflows", json=broken)
    assert answer.status == 422
    assert answer.content_type == "application/problem+json"
    assert answer.body["type"] == "urn:composer:problem:definition-invalid"
    paths = {p["path"] for p in answer.body["problems"]}
    assert {"nodes[0].spec.url", "nodes[1].id", "edges[0].to"} <= paths, answer.body
    assert any(p.startswith("nodes[2].spec") for p in paths), answer.body
    assert len(answer.body["problems"]) >= 4


async def test_a_node_carrying_a_secret_must_write_its_host_literally(gateway: Gateway) -> None:
    """The finding: with ``http://api.example.invalid{{input.path}}`` and a secret header, a
    run's input chose the host the secret went to. Such a definition is refused; one whose
    templates come after the host is taken (tests/integration/e2e/test_secrets.py runs
    one stored before the rule)."""

    def calling(url: str) -> dict[str, object]:
        spec = {"url": url, "headers": {"X-Api-Key": "{{ secret.API_TOKEN }}"}}
        return {"id": "keyed", "nodes": [{"id": "call", "type": "HTTP", "spec": spec}]}

    for url in (
        "http://api.example.invalid{{input.path}}",
        "https://{{input.host}}/v1",
        "https://api.example.invalid:{{input.port}}/",
        "https://me:{{secret.PW}}@api.example.invalid/",
    ):
        answer = await gateway.call("POST", "/v1/workflows", json=calling(url))
        assert answer.status == 422, (url, answer.body)
        [problem] = answer.body["problems"]
        assert problem["path"] == "nodes[0].spec.url"
        assert problem["message"].startswith(
            "an HTTP node that carries a secret reference must name where it sends it"
        )
    taken = await gateway.call(
        "POST", "/v1/workflows", json=calling("http://api.example.invalid/{{input.path}}")
    )
    assert taken.status == 201, taken.body


async def test_a_webhook_url_s_credentials_are_shown_to_no_one(
    gateway: Gateway, conn: repo.Connection
) -> None:
    """The finding: viewers saw webhook_url with its user:password@. It is kept (the
    webhook is sent with it) and shown as ***@ to every role, in every answer."""
    password = "hunter2-pw-0417"
    definition = {
        "id": "hooked",
        "webhook_url": f"https://hook-user:{password}@hooks.example.com/composer?k=1",
        "nodes": [{"id": "w", "type": "WAIT", "spec": {"duration_seconds": 1}}],
    }
    created = await gateway.call("POST", "/v1/workflows", json=definition)
    assert created.status == 201, created.body
    deployed = await gateway.call("POST", "/v1/workflows/hooked/versions/1/deploy")
    shown_url = "https://***@hooks.example.com/composer?k=1"
    for role in ("viewer", "operator", "admin"):
        versions = await gateway.call("GET", "/v1/workflows/hooked", role=role)
        one = await gateway.call("GET", "/v1/workflows/hooked/versions/1", role=role)
        assert versions.body["versions"][0]["webhook_url"] == shown_url
        assert one.body["webhook_url"] == one.body["spec"]["webhook_url"] == shown_url
        for answer in (versions, one, deployed):
            assert password not in json.dumps(answer.body) and "hook-user" not in json.dumps(
                answer.body
            )
    stored = await conn.fetchval("SELECT webhook_url FROM workflow_definitions WHERE id = 'hooked'")
    assert stored == definition["webhook_url"]  # kept for the POST

    # the definition as the API shows it, applied again, would post with '***': refused
    again = await gateway.call("POST", "/v1/workflows", json=one.body["spec"])
    assert again.status == 422, again.body
    [problem] = again.body["problems"]
    assert problem["path"] == "webhook_url" and "write the real ones" in problem["message"]


async def test_a_task_node_on_a_builtin_queue_is_refused(gateway: Gateway) -> None:
    # Found by an attack: a TASK node on queue python with spec {code: "{{input.code}}"},
    # started by an operator, ran the operator's code on the built-in workers.
    yaml_text = "\n".join(
        [
            "id: runs-your-code",
            "nodes:",
            "  - id: run",
            "    type: TASK",
            "    queue: python",
            '    spec: {code: "{{input.code}}"}',
            "  - id: fetch",
            "    type: TASK",
            "    queue: http",
            '    spec: {url: "{{input.url}}"}',
            "edges: [{from: run, to: fetch}]",
        ]
    )
    answer = await gateway.call(
        "POST", "/v1/workflows", data=yaml_text, content_type="application/yaml"
    )
    assert answer.status == 422, answer.body
    assert answer.content_type == "application/problem+json"
    assert answer.body["type"] == "urn:composer:problem:definition-invalid"
    problems = {p["path"]: p["message"] for p in answer.body["problems"]}
    assert problems == {
        "nodes[0].queue": "'python' is reserved for PYTHON nodes (the built-in workers run "
        "every task on it as Python code), and this node's type is TASK: name a queue of "
        "your own that your workers read (e.g. 'run-tasks'); http and python are the "
        "built-in workers'",
        "nodes[1].queue": "'http' is reserved for HTTP nodes (the built-in workers run every "
        "task on it as an HTTP request), and this node's type is TASK: name a queue of your "
        "own that your workers read (e.g. 'fetch-tasks'); http and python are the built-in "
        "workers'",
    }
    listed = await gateway.call("GET", "/v1/workflows/runs-your-code", role="viewer")
    assert listed.status == 404  # nothing was stored


async def test_shape_errors_and_bad_syntax_are_422(gateway: Gateway) -> None:
    unknown = await gateway.call(
        "POST", "/v1/workflows", json={"id": "x", "nodes": [], "colour": "red"}
    )
    assert unknown.status == 422
    assert {"path": "colour", "message": "unknown field"} in unknown.body["problems"]
    bad_yaml = await gateway.call(
        "POST", "/v1/workflows", data="id: [unclosed\n", content_type="application/yaml"
    )
    assert bad_yaml.status == 422 and "line" in bad_yaml.body["problems"][0]["message"]
    bad_json = await gateway.call(
        "POST", "/v1/workflows", data='{"id": ', content_type="application/json"
    )
    assert bad_json.status == 422 and "not valid JSON" in bad_json.body["detail"]
    scalar = await gateway.call("POST", "/v1/workflows", data="42", content_type="application/json")
    assert scalar.status == 422


async def test_media_type_size_and_alias_bombs(gateway: Gateway) -> None:
    xml = await gateway.call("POST", "/v1/workflows", data="<x/>", content_type="application/xml")
    assert xml.status == 415
    huge = await gateway.call(
        "POST", "/v1/workflows", data="#" * (3 * 1024 * 1024), content_type="application/yaml"
    )
    assert huge.status == 413
    assert huge.body["type"] == "urn:composer:problem:too-large"
    bomb = "\n".join(
        [
            "id: bomb",
            "a: &a [x, x, x, x, x, x, x, x, x, x]",
            *(
                f"{n}: &{n} [{', '.join(['*' + p] * 10)}]"
                for p, n in zip("abcdefgh", "bcdefghi", strict=True)
            ),
            "nodes: []",
        ]
    )
    answer = await gateway.call("POST", "/v1/workflows", data=bomb, content_type="application/yaml")
    assert answer.status == 422
    assert "aliases" in answer.body["problems"][0]["message"]


async def test_missing_things_are_404(gateway: Gateway) -> None:
    await deploy(gateway, queued_workflow("present"))
    for path in (
        "/v1/workflows/absent",
        "/v1/workflows/absent/versions/1",
        "/v1/workflows/present/versions/7",
        "/v1/workflows/present/versions/99999999999",
        "/v1/workflows/present/versions/x",
        "/v1/workflows/%E2%98%83",
    ):
        answer = await gateway.call("GET", path, role="viewer")
        assert answer.status == 404, (path, answer.body)
        assert answer.content_type == "application/problem+json"
    deploy_missing = await gateway.call("POST", "/v1/workflows/present/versions/3/deploy")
    assert deploy_missing.status == 404
    delete_missing = await gateway.call("DELETE", "/v1/workflows/absent")
    assert delete_missing.status == 404
    no_route = await gateway.call("GET", "/v1/nothing-here", role="viewer")
    assert no_route.status == 404 and no_route.content_type == "application/problem+json"
    wrong_method = await gateway.call("PUT", "/v1/workflows")
    assert wrong_method.status == 405 and wrong_method.content_type == "application/problem+json"
