"""The Host allow-list: a service answers HTTP only for the names it serves.

A web page can make a browser send requests to a developer's 127.0.0.1 by
DNS-rebinding its own name (``evil.example`` resolving to 127.0.0.1 after the page
loaded): the browser then treats the API, or an admin port's /metrics, as the
page's own origin. Such a request still carries ``Host: evil.example``, so
refusing names outside the list (COMPOSER_ALLOWED_HOSTS; the loopback names unless
configured) closes that path. The api-gateway applies it to every route (a 421
problem), and every service's admin port too (``composer_service.admin``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

#: What a service with no COMPOSER_ALLOWED_HOSTS answers for, on any port.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")


def parse_hosts(text: str) -> tuple[str, ...]:
    """``a,b,…`` as the allow-list; ValueError for an empty one (nobody would be answered)."""
    hosts = tuple(h for h in (host_name(part) for part in text.split(",")) if h)
    if not hosts:
        raise ValueError(
            "COMPOSER_ALLOWED_HOSTS is empty: the API and the admin ports would answer no "
            "request; list the names clients use (e.g. localhost,127.0.0.1,composer.example.com) "
            "or * for any"
        )
    return hosts


def host_name(host: str) -> str:
    """The host name of a Host header or a list entry: lower case, no port, no final dot."""
    host = host.strip().lower()
    if host.startswith("["):  # [v6] or [v6]:port
        end = host.find("]")
        return host[: end + 1] if end > 0 else ""
    if host.count(":") > 1:  # a bare IPv6 address (in the list; a Host header brackets it)
        return f"[{host}]"
    return host.rsplit(":", 1)[0].rstrip(".")


def is_address(host: str | None) -> bool:
    """Whether a Host header names an IP address rather than a DNS name."""
    try:
        ipaddress.ip_address(host_name(host or "").strip("[]"))
    except ValueError:
        return False
    return True


class HostAllowList:
    def __init__(self, hosts: Iterable[str]) -> None:
        names = {host_name(h) for h in hosts}
        self._any = "*" in names
        self._exact = frozenset(n for n in names if n and not n.startswith("."))
        self._suffixes = tuple(n for n in names if n.startswith("."))

    def allows(self, host: str | None) -> bool:
        if self._any:
            return True
        name = host_name(host or "")
        if not name:
            return False
        if name in self._exact:
            return True
        return any(name == s[1:] or name.endswith(s) for s in self._suffixes)

    def refusal(self, host: str | None, what: str, where: str) -> str:
        """What a refused request is told: the name, and where to add it."""
        return (
            f"this {what} does not answer for host {host or '(none)'!r}; if clients reach "
            "it by that name, add it to COMPOSER_ALLOWED_HOSTS (comma-separated names) where "
            f"{where} runs"
        )
