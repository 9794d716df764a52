"""The gateway answers only for the host names it serves (COMPOSER_ALLOWED_HOSTS; loopback
names unless configured), so a web page that DNS-rebinds its own name to a developer's
127.0.0.1:8080 gets no answer from the API (issue 15, item 6)."""

from __future__ import annotations

import pytest

from tests.integration.api.conftest import Gateway, open_gateway


async def test_a_foreign_host_is_refused_with_a_problem(gateway: Gateway) -> None:
    for path, role in (("/v1/workflows", "admin"), ("/healthz", None), ("/ui/", None)):
        answer = await gateway.call("GET", path, role=role, headers={"Host": "evil.example"})
        assert answer.status == 421, (path, answer.body)
        assert answer.content_type == "application/problem+json"
        assert answer.body["type"] == "urn:composer:problem:unknown-host"
        assert "evil.example" in answer.body["detail"]
        assert "COMPOSER_ALLOWED_HOSTS" in answer.body["detail"]


@pytest.mark.parametrize(
    "host",
    ["evil.example:8080", "127.0.0.1.evil.example", "localhost.evil.example", "[::2]:8080", ""],
)
async def test_names_that_only_look_local_are_refused(gateway: Gateway, host: str) -> None:
    answer = await gateway.call("GET", "/v1/workflows", headers={"Host": host})
    assert answer.status == 421, answer.body


async def test_loopback_names_with_any_port_are_served_by_default(gateway: Gateway) -> None:
    port = gateway.url.rsplit(":", 1)[1]
    for host in (f"127.0.0.1:{port}", "localhost", f"LOCALHOST:{port}", "[::1]:8080", "localhost."):
        answer = await gateway.call("GET", "/v1/workflows", headers={"Host": host})
        assert answer.status == 200, (host, answer.body)
    # what every client sends by itself: the URL's own host and port
    assert (await gateway.call("GET", "/healthz", role=None)).status == 200


async def test_configured_names_are_served(database_url: str, redis_url: str) -> None:
    async with open_gateway(
        database_url, redis_url, allowed_hosts=("composer.example.com", ".internal.example")
    ) as gw:
        for host, status in (
            ("composer.example.com", 200),
            ("composer.example.com:443", 200),
            ("internal.example", 200),
            ("api.internal.example:8080", 200),
            ("evil.example", 421),
            ("127.0.0.1", 421),  # a configured list replaces the loopback names
        ):
            answer = await gw.call("GET", "/v1/workflows", headers={"Host": host})
            assert answer.status == status, (host, answer.body)


async def test_a_star_serves_any_host(database_url: str, redis_url: str) -> None:
    async with open_gateway(database_url, redis_url, allowed_hosts=("*",)) as gw:
        answer = await gw.call("GET", "/v1/workflows", headers={"Host": "anything.example"})
        assert answer.status == 200
