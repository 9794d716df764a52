"""The HTTP executor against a real aiohttp server on loopback (no mocked network)."""

from __future__ import annotations

import asyncio
import ipaddress
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from composer_executors import (
    ErrorCode,
    ExecutionError,
    ExecutionTimeout,
    HttpPolicy,
    HttpStatusError,
    InvalidSpec,
    TargetRefused,
    create_http_session,
    run_http,
)

RELEASE = web.AppKey("release", asyncio.Event)
OPEN = HttpPolicy(allow_private=True)


async def echo(request: web.Request) -> web.Response:
    return web.json_response(
        {
            "method": request.method,
            "query": [[k, v] for k, v in request.query.items()],
            "headers": {k.lower(): v for k, v in request.headers.items()},
            "content_type": request.content_type,
            "body": await request.text(),
        }
    )


async def text(_: web.Request) -> web.Response:
    return web.Response(text="plain hello", headers={"X-Multi": "a"})


async def status(request: web.Request) -> web.Response:
    code = int(request.match_info["code"])
    return web.Response(status=code, text=f"nope {code}: " + "x" * 2000)


async def slow(request: web.Request) -> web.Response:
    await request.app[RELEASE].wait()
    return web.Response(text="late")


async def big(request: web.Request) -> web.StreamResponse:
    n = int(request.query["n"])
    if request.query.get("chunked"):
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        for _ in range(n // 100):
            await response.write(b"y" * 100)
        await response.write_eof()
        return response
    return web.Response(body=b"y" * n, content_type="application/octet-stream")


async def redirect(request: web.Request) -> web.Response:
    return _redirect(int(request.query.get("status", "302")), request.query["to"])


def _redirect(code: int, location: str) -> web.Response:
    return web.Response(status=code, headers={"Location": location})


async def chain(request: web.Request) -> web.Response:
    n = int(request.match_info["n"])
    if n == 0:
        return web.json_response({"arrived": True})
    return _redirect(302, f"/chain/{n - 1}")


def make_app() -> web.Application:
    app = web.Application()
    app[RELEASE] = asyncio.Event()
    app.router.add_route("*", "/echo", echo)
    app.router.add_get("/text", text)
    app.router.add_get("/status/{code}", status)
    app.router.add_get("/slow", slow)
    app.router.add_get("/big", big)
    app.router.add_route("*", "/redirect", redirect)
    app.router.add_get("/chain/{n}", chain)
    return app


async def start(host: str) -> TestServer:
    server = TestServer(make_app(), host=host, port=0)
    await server.start_server()
    return server


async def stop(server: TestServer) -> None:
    server.app[RELEASE].set()  # let /slow handlers finish so shutdown does not wait for them
    await server.close()


@pytest.fixture
async def server() -> AsyncIterator[TestServer]:
    srv = await start("127.0.0.1")
    yield srv
    await stop(srv)


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with create_http_session(OPEN) as s:
        yield s


def url(server: TestServer, path: str) -> str:
    return str(server.make_url(path))


async def call(
    spec: dict[str, Any],
    session: aiohttp.ClientSession,
    policy: HttpPolicy = OPEN,
    timeout: float = 5,
) -> dict[str, Any]:
    return await run_http(spec, timeout=timeout, session=session, policy=policy)


# --- requests and responses ------------------------------------------------------------


async def test_get_passes_query_and_headers_and_decodes_json(
    server: TestServer, session: aiohttp.ClientSession
) -> None:
    out = await call(
        {
            "url": url(server, "/echo?fixed=1"),
            "query": {"a": "x y", "n": 2, "flag": True, "many": ["1", "2"], "skip": None},
            "headers": {"X-Token": "abc", "X-Num": 7},
        },
        session,
    )
    assert out["status"] == 200
    assert out["headers"]["content-type"].startswith("application/json")
    body = out["body"]
    assert body["method"] == "GET"
    assert body["query"] == [
        ["fixed", "1"],
        ["a", "x y"],
        ["n", "2"],
        ["flag", "true"],
        ["many", "1"],
        ["many", "2"],
    ]
    assert body["headers"]["x-token"] == "abc"
    assert body["headers"]["x-num"] == "7"


async def test_post_sends_a_dict_as_json(
    server: TestServer, session: aiohttp.ClientSession
) -> None:
    out = await call(
        {"method": "post", "url": url(server, "/echo"), "body": {"order": 1, "é": [True, None]}},
        session,
    )
    body = out["body"]
    assert body["method"] == "POST"
    assert body["content_type"] == "application/json"
    assert json.loads(body["body"]) == {"order": 1, "é": [True, None]}


async def test_post_sends_a_list_as_json_and_a_string_as_text(
    server: TestServer, session: aiohttp.ClientSession
) -> None:
    as_list = await call({"method": "PUT", "url": url(server, "/echo"), "body": [1, 2]}, session)
    assert as_list["body"]["content_type"] == "application/json"
    assert json.loads(as_list["body"]["body"]) == [1, 2]

    as_text = await call({"method": "POST", "url": url(server, "/echo"), "body": "hi"}, session)
    assert as_text["body"]["content_type"] == "text/plain"
    assert as_text["body"]["body"] == "hi"


async def test_a_content_type_header_from_the_spec_wins(
    server: TestServer, session: aiohttp.ClientSession
) -> None:
    out = await call(
        {
            "method": "POST",
            "url": url(server, "/echo"),
            "headers": {"Content-Type": "application/x-www-form-urlencoded"},
            "body": "a=1&b=2",
        },
        session,
    )
    assert out["body"]["content_type"] == "application/x-www-form-urlencoded"
    assert out["body"]["body"] == "a=1&b=2"


async def test_a_text_response_stays_text(
    server: TestServer, session: aiohttp.ClientSession
) -> None:
    out = await call({"url": url(server, "/text")}, session)
    assert out == {"status": 200, "headers": out["headers"], "body": "plain hello"}
    assert out["headers"]["x-multi"] == "a"
    assert all(name == name.lower() for name in out["headers"])


@pytest.mark.parametrize(
    ("code", "permanent"),
    [
        (400, True),
        (404, True),
        (408, False),
        (425, False),
        (429, False),
        (500, False),
        (503, False),
    ],
)
async def test_a_non_2xx_status_fails_with_the_status_and_an_excerpt(
    server: TestServer, session: aiohttp.ClientSession, code: int, permanent: bool
) -> None:
    with pytest.raises(HttpStatusError) as caught:
        await call({"url": url(server, f"/status/{code}")}, session)
    err = caught.value
    assert err.status == code
    assert err.code == f"http_{code}"
    assert err.permanent is permanent
    assert err.excerpt.startswith(f"nope {code}: xxx")
    assert len(err.excerpt) <= 501  # a short excerpt, not the 2 KB body
    assert f"answered {code}" in err.message
    assert f"/status/{code}" in err.message


async def test_a_slow_server_times_out_as_retryable(
    server: TestServer, session: aiohttp.ClientSession
) -> None:
    with pytest.raises(ExecutionTimeout) as caught:
        await call({"url": url(server, "/slow")}, session, timeout=0.3)
    assert caught.value.code == ErrorCode.TIMEOUT
    assert caught.value.permanent is False
    assert "0.3 s" in caught.value.message


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
async def test_a_response_over_the_cap_fails(server: TestServer, chunked: bool) -> None:
    policy = HttpPolicy(allow_private=True, max_response_bytes=1000)
    suffix = "&chunked=1" if chunked else ""
    async with create_http_session(policy) as session:
        ok = await call({"url": url(server, f"/big?n=1000{suffix}")}, session, policy)
        assert ok["body"] == "y" * 1000
        with pytest.raises(ExecutionError) as caught:
            await call({"url": url(server, f"/big?n=5000{suffix}")}, session, policy)
    assert caught.value.code == ErrorCode.RESPONSE_TOO_LARGE
    assert "1000-byte limit" in caught.value.message


async def test_head_is_not_held_to_the_declared_size(server: TestServer) -> None:
    policy = HttpPolicy(allow_private=True, max_response_bytes=1000)
    async with create_http_session(policy) as session:
        out = await call({"method": "HEAD", "url": url(server, "/big?n=5000")}, session, policy)
    assert out["status"] == 200
    assert out["headers"]["content-length"] == "5000"
    assert out["body"] == ""


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ({}, "url must be a non-empty string"),
        ({"url": "http://x", "method": "BREW"}, "method 'BREW'"),
        ({"url": "ftp://example.com/f"}, "scheme 'ftp'"),
        ({"url": "/relative"}, "scheme ''"),
        ({"url": "http://x", "headers": ["a"]}, "headers must be an object"),
        ({"url": "http://x", "headers": {"a": "b\r\nX-Evil: 1"}}, "line break"),
        ({"url": "http://x", "query": {"a": {"b": 1}}}, "query parameter 'a'"),
        ({"url": "http://x", "body": float("nan")}, "body cannot be sent as JSON"),
    ],
)
async def test_a_bad_spec_is_permanent(
    session: aiohttp.ClientSession, spec: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(InvalidSpec) as caught:
        await call(spec, session)
    assert caught.value.permanent is True
    assert fragment in caught.value.message


async def test_an_unreachable_port_is_a_retryable_connection_error(
    session: aiohttp.ClientSession,
) -> None:
    probe = await start("127.0.0.1")
    dead = url(probe, "/")
    await stop(probe)
    with pytest.raises(ExecutionError) as caught:
        await call({"url": dead}, session)
    assert caught.value.code == ErrorCode.CONNECTION_ERROR
    assert caught.value.permanent is False


# --- redirects --------------------------------------------------------------------------


async def test_redirects_are_followed_and_303_becomes_get(
    server: TestServer, session: aiohttp.ClientSession
) -> None:
    out = await call(
        {"method": "POST", "url": url(server, "/redirect?status=303&to=/echo"), "body": {"a": 1}},
        session,
    )
    assert out["body"]["method"] == "GET"
    assert out["body"]["body"] == ""


async def test_a_307_keeps_the_method_and_the_body(
    server: TestServer, session: aiohttp.ClientSession
) -> None:
    out = await call(
        {"method": "POST", "url": url(server, "/redirect?status=307&to=/echo"), "body": {"a": 1}},
        session,
    )
    assert out["body"]["method"] == "POST"
    assert json.loads(out["body"]["body"]) == {"a": 1}


async def test_a_chain_within_the_limit_is_followed_and_a_longer_one_fails(
    server: TestServer, session: aiohttp.ClientSession
) -> None:
    out = await call({"url": url(server, "/chain/5")}, session)
    assert out["body"] == {"arrived": True}
    with pytest.raises(ExecutionError) as caught:
        await call({"url": url(server, "/chain/6")}, session)
    assert caught.value.code == ErrorCode.TOO_MANY_REDIRECTS


async def test_credentials_do_not_follow_a_redirect_to_another_origin(
    server: TestServer, session: aiohttp.ClientSession
) -> None:
    same = await call(
        {"url": url(server, "/redirect?to=/echo"), "headers": {"Authorization": "Bearer s"}},
        session,
    )
    assert same["body"]["headers"]["authorization"] == "Bearer s"

    other = f"http://localhost:{server.port}/echo"  # same server, another origin
    moved = await call(
        {"url": url(server, "/redirect?to=" + other), "headers": {"Authorization": "Bearer s"}},
        session,
    )
    assert "authorization" not in moved["body"]["headers"]


# --- the SSRF guard ---------------------------------------------------------------------

GUARDED = HttpPolicy()


@pytest.mark.parametrize(
    "target",
    [
        "http://127.0.0.1:{port}/echo",
        "http://[::1]:{port}/echo",
        "http://10.1.2.3:{port}/",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::ffff:127.0.0.1]:{port}/echo",
        "http://0.0.0.0:{port}/echo",
        "http://localhost:{port}/echo",
    ],
)
async def test_the_guard_refuses_non_public_targets(server: TestServer, target: str) -> None:
    async with create_http_session(GUARDED) as session:
        with pytest.raises(TargetRefused) as caught:
            await call({"url": target.format(port=server.port)}, session, GUARDED)
    assert caught.value.code == ErrorCode.TARGET_REFUSED
    assert caught.value.permanent is True
    assert "COMPOSER_HTTP_ALLOW_PRIVATE" in caught.value.message


async def test_a_name_is_judged_by_the_address_it_resolves_to(server: TestServer) -> None:
    async with create_http_session(GUARDED) as session:
        with pytest.raises(
            TargetRefused, match=r"localhost: it resolves to 127\.0\.0\.1 \(loopback\)"
        ):
            await call({"url": f"http://localhost:{server.port}/echo"}, session, GUARDED)


async def test_allow_private_lets_loopback_names_and_literals_through(
    server: TestServer, session: aiohttp.ClientSession
) -> None:
    by_ip = await call({"url": url(server, "/echo")}, session)
    by_name = await call({"url": f"http://localhost:{server.port}/echo"}, session)
    assert by_ip["status"] == by_name["status"] == 200


async def test_allow_private_lets_ipv6_loopback_through(session: aiohttp.ClientSession) -> None:
    try:
        v6 = await start("::1")
    except OSError:
        pytest.skip("no IPv6 loopback on this machine")
    try:
        out = await call({"url": f"http://[::1]:{v6.port}/echo"}, session)
        assert out["status"] == 200
    finally:
        await stop(v6)


@pytest.mark.parametrize("target", ["http://10.255.255.1:9/", "http://169.254.169.254:9/"])
async def test_allow_private_lets_private_and_link_local_through(
    session: aiohttp.ClientSession, target: str
) -> None:
    # Whatever answers there (nothing, or a network's egress filter), the attempt must
    # get past the guard.
    try:
        await call({"url": target}, session, timeout=0.3)
    except TargetRefused as exc:
        pytest.fail(f"allow_private=True must not refuse {target}: {exc}")
    except ExecutionError:
        pass


async def test_every_redirect_hop_is_checked_again() -> None:
    # Only 127.0.0.2 is opened, so the first hop passes and each redirect is judged anew.
    try:
        srv = await start("127.0.0.2")
    except OSError:
        pytest.skip("127.0.0.2 is not routed to loopback here")
    policy = HttpPolicy(allow_networks=(ipaddress.ip_network("127.0.0.2/32"),))
    try:
        async with create_http_session(policy) as session:
            out = await call({"url": url(srv, "/redirect?to=/echo")}, session, policy)
            assert out["status"] == 200

            for target in (
                "http://169.254.169.254/latest/meta-data/",  # a literal
                f"http://localhost:{srv.port}/echo",  # a name resolving to 127.0.0.1
            ):
                with pytest.raises(TargetRefused):
                    await call({"url": url(srv, "/redirect?to=" + target)}, session, policy)
    finally:
        await stop(srv)


async def test_run_http_refuses_a_session_without_the_guard(server: TestServer) -> None:
    async with aiohttp.ClientSession() as plain:
        with pytest.raises(TypeError, match="create_http_session"):
            await run_http({"url": url(server, "/echo")}, timeout=1, session=plain, policy=OPEN)


async def test_run_http_refuses_a_session_made_for_another_policy(server: TestServer) -> None:
    async with create_http_session(GUARDED) as session:
        with pytest.raises(ValueError, match="same policy"):
            await run_http({"url": url(server, "/echo")}, timeout=1, session=session, policy=OPEN)


# --- accept_status ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("accept", "code"),
    [([200, 503], 503), (["2xx", "5xx"], 500), (["4XX"], 404), ([404], 404), ([304], 304)],
)
async def test_an_accepted_status_completes_with_status_headers_and_body(
    server: TestServer, session: aiohttp.ClientSession, accept: list[Any], code: int
) -> None:
    out = await call({"url": url(server, f"/status/{code}"), "accept_status": accept}, session)
    assert out["status"] == code
    assert out["headers"]["content-type"].startswith("text/plain")
    if code != 304:  # a 304 carries no body
        assert out["body"].startswith(f"nope {code}: xxx")


@pytest.mark.parametrize(
    ("accept", "code", "permanent"),
    [([503], 200, True), ([200, 503], 500, False), (["2xx"], 404, True), (["4xx"], 503, False)],
)
async def test_a_status_outside_accept_status_fails_as_before_and_names_the_list(
    server: TestServer,
    session: aiohttp.ClientSession,
    accept: list[Any],
    code: int,
    permanent: bool,
) -> None:
    with pytest.raises(HttpStatusError) as caught:
        await call({"url": url(server, f"/status/{code}"), "accept_status": accept}, session)
    err = caught.value
    assert (err.status, err.code, err.permanent) == (code, f"http_{code}", permanent)
    assert f"answered {code}" in err.message
    assert f"(not in accept_status {json.dumps(accept)})" in err.message


async def test_without_accept_status_only_2xx_completes(
    server: TestServer, session: aiohttp.ClientSession
) -> None:
    ok = await call({"url": url(server, "/status/204"), "accept_status": None}, session)
    assert ok["status"] == 204
    with pytest.raises(HttpStatusError) as caught:
        await call({"url": url(server, "/status/304")}, session)
    assert caught.value.permanent is True
    assert "accept_status" not in caught.value.message


async def test_redirects_are_followed_before_accept_status_is_applied(
    server: TestServer, session: aiohttp.ClientSession
) -> None:
    out = await call(
        {"url": url(server, "/redirect?to=/status/503"), "accept_status": [302, 503]}, session
    )
    assert out["status"] == 503


@pytest.mark.parametrize(
    ("accept", "fragment"),
    [
        ([], "accept_status must be a non-empty list"),
        ("2xx", "accept_status must be a non-empty list"),
        ([600], "accept_status: 600 is not a status"),
        ([99], "accept_status: 99 is not a status"),
        ([True], "accept_status: True is not a status"),
        (["200"], "accept_status: '200' is not a status"),
        (["6xx"], "accept_status: '6xx' is not a status"),
        ([200.0], "accept_status: 200.0 is not a status"),
    ],
)
async def test_a_bad_accept_status_is_a_permanent_invalid_spec(
    server: TestServer, session: aiohttp.ClientSession, accept: Any, fragment: str
) -> None:
    with pytest.raises(InvalidSpec) as caught:
        await call({"url": url(server, "/status/200"), "accept_status": accept}, session)
    assert caught.value.permanent is True
    assert fragment in caught.value.message
