"""Hostile requests never get a 500 or hang: every route of the table, fuzzed.

Hypothesis draws a route, path values (odd unicode, percent-encoding,
non-UUIDs, real run ids), a query string, a content type and a body (JSON of
the right shape with wrong types or unknown fields, any JSON, malformed JSON
or YAML, raw bytes, deep nesting, odd unicode) and sends it with an admin
token, so it gets past auth to the handlers. Any answer below 500 is fine;
an error must be problem+json. The gateway's long-poll limit is cut to a
fraction of a second so the result route cannot stall the run.
"""

from __future__ import annotations

import json
import string
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from composer_api_gateway import ROUTES, Route
from tests.integration.api.conftest import TOKENS, Gateway, deploy, open_gateway

FUZZ_WORKFLOW = {
    "id": "fuzz",
    "output": {"sum": "{{tasks.work.output}}"},
    "nodes": [
        {"id": "gate", "type": "WAIT_FOR_EVENT", "spec": {"event": "go"}},
        {"id": "work", "type": "TASK", "queue": "nobody", "spec": {"n": "{{input.n + 1}}"}},
    ],
    "edges": [{"from": "gate", "to": "work"}],
}

odd_text = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"])
    | st.sampled_from("\x00\u202e\ufeff\U0001f600/%?#."),
    max_size=40,
)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | odd_text
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(odd_text, inner, max_size=4),
    max_leaves=20,
)


def deep(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def model_shaped(model: type[BaseModel]) -> st.SearchStrategy[dict[str, Any]]:
    """An object with the model's field names (some), each holding any JSON, maybe one extra."""
    fields = dict.fromkeys(model.model_fields, json_values)
    return st.fixed_dictionaries({}, optional=fields) | st.builds(
        lambda d, extra: d | extra,
        st.fixed_dictionaries({}, optional=fields),
        st.dictionaries(odd_text, json_values, max_size=2),
    )


raw_bodies = st.one_of(
    st.binary(max_size=200),
    st.sampled_from(
        [
            b'{"workflow_id": ',
            b"{'single': 'quotes'}",
            b'{"a": NaN}',
            b'{"a": Infinity}',
            b"[1, 2,]",
            b'"\\ud800"',
            b'{"k": "\\u0000"}',
            b"1e999",
            b"9" * 5000,
            deep(50_000),
            b"id: [unclosed",
            b"- a\n - b",
            b"a: &a [x]\nb: *a\nc: *nope",
            b"!!python/object:os.system 'echo hi'",
            b"\xff\xfe\x00\x00",
            b"\xef\xbb\xbf{}",
        ]
    ),
    odd_text.map(lambda t: t.encode("utf-8", "surrogatepass")),
)
content_types = st.sampled_from(
    [
        None,
        "application/json",
        "application/yaml",
        "text/plain",
        "application/xml",
        "multipart/form-data",
        "garbage",
    ]
)


@pytest.fixture
async def fuzz_gateway(database_url: str, redis_url: str) -> AsyncIterator[tuple[Gateway, str]]:
    async with open_gateway(
        database_url, redis_url, max_wait_seconds=0.2, max_body_bytes=64 * 1024
    ) as gw:
        await deploy(gw, FUZZ_WORKFLOW)
        started = await gw.call(
            "POST", "/v1/runs", role="operator", json={"workflow_id": "fuzz", "input": {"n": 1}}
        )
        assert started.status == 201
        yield gw, started.body["run_id"]


@st.composite
def requests(
    draw: st.DrawFn, run_id: str
) -> tuple[str, str, dict[str, str], bytes | None, str | None]:
    route: Route = draw(st.sampled_from(ROUTES))
    path = route.path
    values = {
        "run_id": st.sampled_from([run_id, run_id.upper(), "0" * 32, "not-a-uuid"]) | odd_text,
        "workflow_id": st.sampled_from(["fuzz", "FUZZ", "a" * 200]) | odd_text,
        "version": st.sampled_from(["1", "0", "-1", "99999999999999999999", "1.5"]) | odd_text,
        "name": st.sampled_from(["go", "x" * 500]) | odd_text,
    }
    for name, strategy in values.items():
        if "{" + name + "}" in path:
            path = path.replace("{" + name + "}", quote(draw(strategy), safe="") or "x")
    query_fields = list(route.query.model_fields) if route.query else []
    query = draw(
        st.dictionaries(
            st.sampled_from(query_fields) | st.text(string.ascii_letters, min_size=1, max_size=8)
            if query_fields
            else st.text(string.ascii_letters, min_size=1, max_size=8),
            odd_text.filter(lambda t: "\x00" not in t),
            max_size=3,
        )
    )
    body: bytes | None = None
    if route.method in ("POST", "PUT", "PATCH") or draw(st.booleans()):
        if isinstance(route.body, type):
            shaped = model_shaped(route.body).map(lambda v: json.dumps(v).encode())
            body = draw(shaped | raw_bodies | json_values.map(lambda v: json.dumps(v).encode()))
        else:
            body = draw(raw_bodies | json_values.map(lambda v: json.dumps(v).encode()))
    return route.method, path, query, body, draw(content_types)


@settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
async def test_no_request_gets_a_500_or_hangs(
    fuzz_gateway: tuple[Gateway, str], data: st.DataObject
) -> None:
    gw, run_id = fuzz_gateway
    method, path, query, body, content_type = data.draw(requests(run_id))
    headers = {"Authorization": f"Bearer {TOKENS['admin']}"}
    if content_type:
        headers["Content-Type"] = content_type
    timeout = aiohttp.ClientTimeout(total=10)
    async with gw.session.request(
        method, gw.url + path, params=query, data=body, headers=headers, timeout=timeout
    ) as response:
        text = await response.text(errors="replace")
        assert response.status < 500, (method, path, query, body, response.status, text)
        if response.status >= 400:
            assert response.content_type == "application/problem+json", text


async def test_huge_and_deep_bodies_on_every_body_route(fuzz_gateway: tuple[Gateway, str]) -> None:
    gw, run_id = fuzz_gateway
    for route in ROUTES:
        if route.body is None:
            continue
        path = (
            route.path.replace("{run_id}", run_id)
            .replace("{name}", "go")
            .replace("{key}", "k")
            .replace("{schedule_id}", "nightly")
        )
        for body, expected in ((b"x" * (200 * 1024), {413}), (deep(30_000), {400, 422})):
            for chunked in (False, True):
                data: Any = body
                if chunked:  # no Content-Length: the limit must hold while reading

                    async def chunks(payload: bytes = body) -> AsyncIterator[bytes]:
                        for i in range(0, len(payload), 16 * 1024):
                            yield payload[i : i + 16 * 1024]

                    data = chunks()
                answer = await gw.call(
                    route.method, path, data=data, content_type="application/json"
                )
                assert answer.status in expected, (route.path, chunked, answer.status, answer.body)
