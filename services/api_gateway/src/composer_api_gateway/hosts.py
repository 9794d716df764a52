"""The Host allow-list on every route of the API (composer_service.hosts says why).

The list itself, shared with every service's admin port, is composer_service's; here
a refused Host is a 421 problem+json, the API's form of an error.
"""

from __future__ import annotations

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from composer_api_gateway.problems import ApiProblem
from composer_service.hosts import LOOPBACK_HOSTS, HostAllowList, parse_hosts

__all__ = ["LOOPBACK_HOSTS", "HostAllowList", "check_host", "host_middleware", "parse_hosts"]


def check_host(allowed: HostAllowList, host: str | None) -> None:
    """Raise a 421 problem when the request's Host header is not on the list."""
    if not allowed.allows(host):
        raise ApiProblem(421, "unknown-host", allowed.refusal(host, "API", "the api-gateway"))


def host_middleware(allowed: HostAllowList) -> Middleware:
    """Every route, the UI and /healthz included, behind the Host check."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        check_host(allowed, request.headers.get("Host"))
        return await handler(request)

    return middleware
