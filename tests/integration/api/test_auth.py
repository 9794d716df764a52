"""The auth matrix over HTTP, route by route from the route table.

For every protected route: no token and an unknown token answer 401, each
weaker role answers 403, and the needed role (and every stronger one) gets
past auth (whatever the route then answers). Open routes need no token.
"""

from __future__ import annotations

import pytest
import uuid6

from composer_api_gateway import ROUTES, Route
from composer_api_gateway.auth import Role, parse_tokens
from tests.integration.api.conftest import TOKENS, Gateway

_VALUES = {
    "workflow_id": "wf",
    "version": "1",
    "name": "go",
    "operation_id": "op",
    "key": "partner",
    "node_id": "n",
    "schedule_id": "nightly",
    "backfill_id": "019ad000-0000-7000-8000-000000000000",
}


def concrete(route: Route) -> str:
    path = route.path.replace("{run_id}", str(uuid6.uuid7()))
    for name, value in _VALUES.items():
        path = path.replace("{" + name + "}", value)
    return path


async def test_every_protected_route_checks_the_role(gateway: Gateway) -> None:
    checked = 0
    for route in ROUTES:
        path = concrete(route)
        if route.role is None:
            answer = await gateway.call(route.method, path, role=None)
            assert answer.status == 200, (route.path, answer.status)
            continue
        anonymous = await gateway.call(route.method, path, role=None)
        assert anonymous.status == 401, (route.path, anonymous.body)
        assert anonymous.headers["WWW-Authenticate"].startswith("Bearer")
        unknown = await gateway.call(
            route.method, path, role=None, headers={"Authorization": "Bearer not-a-token"}
        )
        assert unknown.status == 401, route.path
        basic = await gateway.call(
            route.method, path, role=None, headers={"Authorization": "Basic YWRtaW46eA=="}
        )
        assert basic.status == 401, route.path
        for role in Role:
            answer = await gateway.call(route.method, path, role=role.label)
            if role < route.role:
                assert answer.status == 403, (route.path, role, answer.body)
                assert route.role.label in answer.body["detail"]
            else:
                assert answer.status not in (401, 403), (route.path, role, answer.body)
        checked += 1
    # every protected route was checked: /v1 routes, history, logs, workers, limits,
    # operations and map items among them (25 when this was written)
    assert checked == sum(1 for r in ROUTES if r.role is not None) >= 25


async def test_roles_in_practice(gateway: Gateway) -> None:
    definition = {
        "id": "authz",
        "nodes": [{"id": "w", "type": "WAIT_FOR_EVENT", "spec": {"event": "e"}}],
    }
    as_operator = await gateway.call("POST", "/v1/workflows", role="operator", json=definition)
    assert as_operator.status == 403
    created = await gateway.call(
        "POST", "/v1/workflows", role="admin", json=definition, params={"deploy": "true"}
    )
    assert created.status == 201
    as_viewer = await gateway.call("POST", "/v1/runs", role="viewer", json={"workflow_id": "authz"})
    assert as_viewer.status == 403
    started = await gateway.call("POST", "/v1/runs", role="operator", json={"workflow_id": "authz"})
    assert started.status == 201
    read = await gateway.call("GET", f"/v1/runs/{started.body['run_id']}", role="viewer")
    assert read.status == 200


async def test_no_tokens_configured_refuses_everything(database_url: str, redis_url: str) -> None:
    from tests.integration.api.conftest import open_gateway

    async with open_gateway(database_url, redis_url, tokens="") as gw:
        answer = await gw.call(
            "GET", "/v1/workflows", role=None, headers={"Authorization": "Bearer x"}
        )
        assert answer.status == 401
        assert "COMPOSER_API_TOKENS" in answer.body["detail"]
        assert (await gw.call("GET", "/healthz", role=None)).status == 200


def test_token_parsing() -> None:
    tokens = parse_tokens(f" {TOKENS['admin']}:admin , a:b:c:viewer,")
    assert [(t.secret, t.role) for t in tokens] == [
        (TOKENS["admin"].encode(), Role.ADMIN),
        (b"a:b:c", Role.VIEWER),
    ]
    with pytest.raises(ValueError, match="unknown role 'root'"):
        parse_tokens("abc:root")
    with pytest.raises(ValueError, match="not name=token:role"):
        parse_tokens("just-a-token")
    with pytest.raises(ValueError, match="unknown role") as info:
        parse_tokens("supersecret:boss")
    assert "supersecret" not in str(info.value)  # a bad entry is named without its secret
