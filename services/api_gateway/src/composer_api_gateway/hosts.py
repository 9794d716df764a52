"""The Host allow-list: the gateway answers only for the names it serves.

A web page can make a browser send requests to the developer's 127.0.0.1:8080 by
DNS-rebinding its own name (``evil.example`` resolving to 127.0.0.1 after the page
loaded): the browser then treats the API as the page's own origin. Such a request
still carries ``Host: evil.example``, so refusing names outside the list
(COMPOSER_ALLOWED_HOSTS; the loopback names unless configured) closes that path
whatever token the browser may have.
"""

from __future__ import annotations

from collections.abc import Iterable

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from composer_api_gateway.problems import ApiProblem

#: What a gateway with no COMPOSER_ALLOWED_HOSTS answers for, on any port.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")


def parse_hosts(text: str) -> tuple[str, ...]:
    """``a,b,…`` as the allow-list; ValueError for an empty one (the API would answer nobody)."""
    hosts = tuple(h for h in (_name(part) for part in text.split(",")) if h)
    if not hosts:
        raise ValueError(
            "COMPOSER_ALLOWED_HOSTS is empty: the API would answer no request; list the "
            "names clients use for it (e.g. localhost,127.0.0.1,composer.example.com) or * for any"
        )
    return hosts


def _name(host: str) -> str:
    """The host name of a Host header or a list entry: lower case, no port, no final dot."""
    host = host.strip().lower()
    if host.startswith("["):  # [v6] or [v6]:port
        end = host.find("]")
        return host[: end + 1] if end > 0 else ""
    if host.count(":") > 1:  # a bare IPv6 address (in the list; a Host header brackets it)
        return f"[{host}]"
    return host.rsplit(":", 1)[0].rstrip(".")


class HostAllowList:
    def __init__(self, hosts: Iterable[str]) -> None:
        names = {_name(h) for h in hosts}
        self._any = "*" in names
        self._exact = frozenset(n for n in names if n and not n.startswith("."))
        self._suffixes = tuple(n for n in names if n.startswith("."))

    def allows(self, host: str | None) -> bool:
        if self._any:
            return True
        name = _name(host or "")
        if not name:
            return False
        if name in self._exact:
            return True
        return any(name == s[1:] or name.endswith(s) for s in self._suffixes)

    def check(self, host: str | None) -> None:
        """Raise a 421 problem when the request's Host header is not on the list."""
        if not self.allows(host):
            raise ApiProblem(
                421,
                "unknown-host",
                f"this API does not answer for host {host or '(none)'!r}; if clients reach it "
                "by that name, add it to COMPOSER_ALLOWED_HOSTS (comma-separated names) "
                "where the api-gateway runs",
            )


def host_middleware(allowed: HostAllowList) -> Middleware:
    """Every route, the UI and /healthz included, behind the Host check."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        allowed.check(request.headers.get("Host"))
        return await handler(request)

    return middleware
