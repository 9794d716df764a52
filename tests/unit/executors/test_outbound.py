"""Outbound calls between origins: what follows a redirect, and what an HTTP node adds.

Real aiohttp servers on loopback; two ports are two origins, and one server speaks
TLS (a throwaway self-signed certificate) so an https → http redirect is real.
"""

from __future__ import annotations

import ssl
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from composer_executors import (
    ErrorCode,
    ExecutionError,
    HttpPolicy,
    TargetRefused,
    create_http_session,
    parse_networks,
    run_http,
)
from composer_sdk import TaskContext
from composer_workers.handlers import http_handler

OPEN = HttpPolicy(allow_private=True)


async def echo(request: web.Request) -> web.Response:
    return web.json_response({"headers": {k.lower(): v for k, v in request.headers.items()}})


async def redirect(request: web.Request) -> web.Response:
    return web.Response(
        status=int(request.query.get("status", "302")), headers={"Location": request.query["to"]}
    )


def make_app() -> web.Application:
    app = web.Application()
    app.router.add_route("*", "/echo", echo)
    app.router.add_route("*", "/redirect", redirect)
    return app


@pytest.fixture
async def origin_a() -> AsyncIterator[TestServer]:
    server = TestServer(make_app(), host="127.0.0.1", port=0)
    await server.start_server()
    yield server
    await server.close()


@pytest.fixture
async def origin_b() -> AsyncIterator[TestServer]:
    server = TestServer(make_app(), host="127.0.0.1", port=0)
    await server.start_server()
    yield server
    await server.close()


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1, made by the openssl command line."""
    where = tmp_path_factory.mktemp("tls")
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


@pytest.fixture
async def tls_server(certificate: tuple[Path, Path]) -> AsyncIterator[TestServer]:
    cert, key = certificate
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    server = TestServer(make_app(), host="127.0.0.1", port=0, scheme="https")
    await server.start_server(ssl=context)
    yield server
    await server.close()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with create_http_session(OPEN) as s:
        yield s


def url(server: TestServer, path: str) -> str:
    return str(server.make_url(path))


async def call(
    spec: dict[str, Any], session: aiohttp.ClientSession, **kwargs: Any
) -> dict[str, Any]:
    return await run_http(spec, timeout=5, session=session, policy=OPEN, **kwargs)


# --- redirect targets an HTTP node cannot follow ------------------------------------------


@pytest.mark.parametrize("location", ["mailto:x", "https:x", "file:///etc/passwd", "ftp://h/x"])
async def test_a_redirect_to_a_hostless_or_non_http_target_fails_that_call(
    origin_a: TestServer, session: aiohttp.ClientSession, location: str
) -> None:
    with pytest.raises(ExecutionError) as caught:
        await call({"url": url(origin_a, "/redirect"), "query": {"to": location}}, session)
    assert caught.value.permanent is True
    assert "redirected to" in caught.value.message


async def test_an_https_to_http_redirect_is_refused(
    tls_server: TestServer, origin_b: TestServer, certificate: tuple[Path, Path]
) -> None:
    trusted = ssl.create_default_context(cafile=str(certificate[0]))
    async with create_http_session(OPEN, ssl_context=trusted) as session:
        ok = await call({"url": url(tls_server, "/redirect"), "query": {"to": "/echo"}}, session)
        assert ok["status"] == 200  # the TLS server is reachable and redirects work over it

        with pytest.raises(ExecutionError) as caught:
            await call(
                {"url": url(tls_server, "/redirect"), "query": {"to": url(origin_b, "/echo")}},
                session,
            )
    assert caught.value.code == ErrorCode.TARGET_REFUSED
    assert caught.value.permanent is True
    assert "https" in caught.value.message and "http://" in caught.value.message


# --- headers across origins -----------------------------------------------------------------

SENT = {
    "X-Api-Key": "secret-key",
    "Authorization": "Bearer secret",
    "Cookie": "session=secret",
    "Proxy-Authorization": "Basic c2VjcmV0",
    "Accept": "application/json",
    "Accept-Language": "fr",
    "Idempotency-Key": "k-1",
}


async def test_a_cross_origin_redirect_keeps_only_the_allowed_headers(
    origin_a: TestServer, origin_b: TestServer, session: aiohttp.ClientSession
) -> None:
    moved = await call(
        {
            "url": url(origin_a, "/redirect"),
            "query": {"status": "307", "to": url(origin_b, "/echo")},
            "method": "POST",
            "headers": SENT,
            "body": {"a": 1},
        },
        session,
    )
    headers = moved["body"]["headers"]
    for secret in ("x-api-key", "authorization", "cookie", "proxy-authorization"):
        assert secret not in headers
    assert headers["accept"] == "application/json"
    assert headers["accept-language"] == "fr"
    assert headers["idempotency-key"] == "k-1"
    assert headers["content-type"] == "application/json"


async def test_a_same_origin_redirect_keeps_every_header(
    origin_a: TestServer, session: aiohttp.ClientSession
) -> None:
    same = await call(
        {"url": url(origin_a, "/redirect"), "query": {"to": "/echo"}, "headers": SENT}, session
    )
    headers = same["body"]["headers"]
    assert headers["x-api-key"] == "secret-key"
    assert headers["authorization"] == "Bearer secret"


# --- the idempotency key ----------------------------------------------------------------------


async def test_the_idempotency_key_is_sent_unless_the_node_sets_one(
    origin_a: TestServer, session: aiohttp.ClientSession
) -> None:
    sent = await call({"url": url(origin_a, "/echo")}, session, idempotency_key="run-1:fetch")
    assert sent["body"]["headers"]["idempotency-key"] == "run-1:fetch"

    own = await call(
        {"url": url(origin_a, "/echo"), "headers": {"idempotency-KEY": "mine"}},
        session,
        idempotency_key="run-1:fetch",
    )
    assert own["body"]["headers"]["idempotency-key"] == "mine"

    none = await call({"url": url(origin_a, "/echo")}, session)
    assert "idempotency-key" not in none["body"]["headers"]


# --- COMPOSER_HTTP_ALLOW_NETWORKS -------------------------------------------------------------


async def test_allowed_networks_open_a_private_target_and_nothing_else(
    origin_a: TestServer,
) -> None:
    policy = HttpPolicy(allow_networks=parse_networks("127.0.0.0/8"))
    async with create_http_session(policy) as session:
        out = await run_http(
            {"url": url(origin_a, "/echo")}, timeout=5, session=session, policy=policy
        )
        assert out["status"] == 200
        with pytest.raises(TargetRefused, match="COMPOSER_HTTP_ALLOW_NETWORKS"):
            await run_http(
                {"url": "http://169.254.169.254/latest/meta-data/"},
                timeout=5,
                session=session,
                policy=policy,
            )


async def test_an_allowed_port_opens_that_port_of_the_address_and_no_other(
    origin_a: TestServer, origin_b: TestServer
) -> None:
    """``make run`` opens its own API as 127.0.0.1:<port> for the demo (issue 25): the
    services' admin ports on the same address stay refused, by literal, by name and as a
    redirect's target."""
    policy = HttpPolicy(allow_networks=parse_networks(f"127.0.0.1:{origin_a.port}"))
    async with create_http_session(policy) as session:
        for allowed in (url(origin_a, "/echo"), f"http://localhost:{origin_a.port}/echo"):
            out = await run_http({"url": allowed}, timeout=5, session=session, policy=policy)
            assert out["status"] == 200
        for refused in (
            url(origin_b, "/echo"),
            f"http://localhost:{origin_b.port}/echo",
            url(origin_a, f"/redirect?to=http://127.0.0.1:{origin_b.port}/echo"),
        ):
            with pytest.raises(TargetRefused, match="COMPOSER_HTTP_ALLOW_NETWORKS"):
                await run_http({"url": refused}, timeout=5, session=session, policy=policy)


async def test_the_http_worker_sends_the_same_key_on_every_attempt_of_a_node(
    origin_a: TestServer, session: aiohttp.ClientSession
) -> None:
    handler = http_handler(session, OPEN)
    keys = set()
    for attempt in range(3):
        ctx = TaskContext(
            task_id="t-1",
            run_id="run-1",
            node_id="charge",
            attempt=attempt,
            max_attempts=3,
            workflow_id="wf",
            workflow_version=1,
            timeout=5,
        )
        out = await handler(ctx, {"method": "POST", "url": url(origin_a, "/echo"), "body": {}})
        keys.add(out["body"]["headers"]["idempotency-key"])
    other = TaskContext("t-2", "run-1", "refund", 0, 3, "wf", 1, timeout=5)
    out = await handler(other, {"url": url(origin_a, "/echo")})
    assert len(keys) == 1
    assert out["body"]["headers"]["idempotency-key"] not in keys
