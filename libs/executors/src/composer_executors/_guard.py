"""The SSRF guard: which addresses an HTTP node may reach, enforced where it connects.

A workflow author controls the URL, so without a guard an HTTP node could
read the cloud metadata service (169.254.169.254), the database on
loopback, or anything else on the workers' private network. Checking the
URL's host name is not enough: ``internal.example.com`` (or a DNS name that
flips between a public and a private answer) can resolve to such an
address. So the check runs on the *resolved* addresses, inside the aiohttp
connector, and the connector connects only to the addresses that passed:
the address checked is the address connected to, while the Host header and
TLS SNI still carry the name from the URL.

aiohttp never sends an IP literal through the resolver, so
:meth:`AddressGuard.check_host`
checks literals before each request (the first and every redirect hop).

An allowed network may name one port (``127.0.0.1:8080``): ``make run`` opens
its own API that way for the demo, while every other port of the machine — the
services' admin ports with their /metrics, the database — stays refused.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from composer_executors._errors import TargetRefused

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class NetworkPort:
    """One port of a network that the guard lets through (``127.0.0.1:8080``)."""

    network: IPNetwork
    port: int

    def __str__(self) -> str:
        if self.network.version == 6:
            return f"[{self.network}]:{self.port}"
        return f"{self.network}:{self.port}"


#: An entry of COMPOSER_HTTP_ALLOW_NETWORKS: a network (every port) or one port of it.
AllowedNetwork = IPNetwork | NetworkPort

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_ALLOW_HINT = (
    "HTTP nodes may only call public addresses; name the private networks they may call "
    "in COMPOSER_HTTP_ALLOW_NETWORKS (CIDRs, e.g. 10.20.0.0/16, or one port of one, e.g. "
    "10.20.0.5:8443) on the workers and the "
    "outbox-enqueuer, or set COMPOSER_HTTP_ALLOW_PRIVATE=true to allow every loopback, "
    "private and link-local target (development only)"
)


@dataclass(frozen=True, slots=True)
class HttpPolicy:
    """What an HTTP node may do; built once from the workers' settings.

    ``allow_private`` is COMPOSER_HTTP_ALLOW_PRIVATE: it turns the SSRF guard
    off. ``allow_networks`` is COMPOSER_HTTP_ALLOW_NETWORKS (see
    :func:`parse_networks`): it opens only some networks, or one port of one (an
    internal API's subnet, a local service's port) while the guard keeps refusing
    the rest, the metadata service included.
    """

    allow_private: bool = False
    allow_networks: tuple[AllowedNetwork, ...] = ()
    max_response_bytes: int = 1024 * 1024
    max_redirects: int = 5
    allowed_schemes: frozenset[str] = field(default_factory=lambda: frozenset({"http", "https"}))

    def __post_init__(self) -> None:
        if self.max_response_bytes <= 0:
            raise ValueError(f"max_response_bytes must be positive, got {self.max_response_bytes}")
        if self.max_redirects < 0:
            raise ValueError(f"max_redirects must be 0 or more, got {self.max_redirects}")


def parse_networks(
    text: str, *, setting: str = "COMPOSER_HTTP_ALLOW_NETWORKS"
) -> tuple[AllowedNetwork, ...]:
    """The networks of a comma-separated CIDR list ("10.20.0.0/16, fd00::/8"), for
    :attr:`HttpPolicy.allow_networks`.

    An address without a prefix length is that one address (/32 or /128); host
    bits are ignored (10.20.3.4/16 is 10.20.0.0/16). A port after the network
    (``127.0.0.1:8080``, ``10.20.0.0/16:443``, ``[::1]:8080``) opens that port only.
    An empty text opens nothing. Raises ValueError naming ``setting`` and the entry
    that is not a network.
    """
    networks: list[AllowedNetwork] = []
    for entry in text.split(","):
        entry = entry.strip()
        if not entry:
            continue
        try:
            networks.append(_allowed_network(entry))
        except ValueError as exc:
            raise ValueError(
                f"{setting}: {entry!r} is not a network ({exc}); write comma-separated "
                "CIDRs such as 10.20.0.0/16,fd00::/8, each with a port if only that port "
                "may be called (127.0.0.1:8080, [::1]:8080)"
            ) from None
    return tuple(dict.fromkeys(networks))


def _allowed_network(entry: str) -> AllowedNetwork:
    """``network``, ``ipv4-network:port`` or ``[ipv6-network]:port``."""
    network, port = entry, ""
    if entry.startswith("["):
        network, bracket, rest = entry[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ValueError("an IPv6 network with a port is written [network]:port")
        port = rest[1:] if rest else ""
        if rest and not port:
            raise ValueError("no port after the colon")
    elif entry.count(":") == 1:  # IPv4 with a port; an IPv6 network has several colons
        network, _, port = entry.partition(":")
    parsed = ipaddress.ip_network(network, strict=False)
    if not port:
        return parsed
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{port!r} is not a port (1-65535)")
    return NetworkPort(parsed, int(port))


def refusal_reason(ip: IPAddress) -> str | None:
    """Why the guard refuses ``ip`` ("loopback", "private", …), or None for a public address.

    IPv6 forms that carry an IPv4 address (mapped, 6to4, NAT64) are judged by
    that IPv4 address, so ``::ffff:127.0.0.1`` is loopback.
    """
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour
        if embedded is None and ip in _NAT64:
            embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if embedded is None and ip.teredo is not None:
            embedded = ip.teredo[1]
        if embedded is not None:
            return refusal_reason(embedded)
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip.is_multicast:
        return "multicast"
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_private:
        return "private"
    if ip.is_reserved:
        return "reserved"
    if not ip.is_global:
        return "not public"
    return None


@dataclass(frozen=True, slots=True)
class AddressGuard:
    """The guard's decision for one address, from the policy's two settings."""

    allow_private: bool
    allow_networks: tuple[AllowedNetwork, ...]

    @classmethod
    def of(cls, policy: HttpPolicy) -> AddressGuard:
        return cls(policy.allow_private, policy.allow_networks)

    def reason(self, ip: IPAddress, port: int | None = None) -> str | None:
        """Why ``ip`` (on ``port``, when known) is refused, or None when the guard lets it
        through. An allowed network that names a port lets through that port only."""
        if self.allow_private:
            return None
        if isinstance(ip, ipaddress.IPv6Address) and ip.scope_id:
            ip = ipaddress.IPv6Address(int(ip))  # the zone (%eth0) changes no network membership
        for allowed in self.allow_networks:
            if isinstance(allowed, NetworkPort):
                if port == allowed.port and ip in allowed.network:
                    return None
            elif ip in allowed:
                return None
        return refusal_reason(ip)

    def check_host(self, host: str, port: int | None = None) -> None:
        """Refuse an IP-literal host; a name is checked by the resolver when it resolves."""
        try:
            ip = ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            return
        reason = self.reason(ip, port)
        if reason is not None:
            where = host if port is None else f"{host}:{port}"
            raise TargetRefused(f"refused to call {where}: it is a {reason} address. {_ALLOW_HINT}")


class GuardedResolver(AbstractResolver):
    """Resolves with getaddrinfo and drops every address the guard refuses.

    The connector connects only to what this returns, so a DNS answer cannot
    smuggle in a private address. When nothing is left, it raises
    :class:`TargetRefused` (not an OSError, so aiohttp lets it through as is).
    """

    def __init__(self, guard: AddressGuard) -> None:
        self.guard = guard
        self._inner = aiohttp.ThreadedResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        allowed: list[ResolveResult] = []
        refused: list[str] = []
        for result in results:
            reason = self.guard.reason(ipaddress.ip_address(result["host"]), result["port"])
            if reason is None:
                allowed.append(result)
            else:
                refused.append(f"{result['host']} ({reason})")
        if not allowed:
            listed = ", ".join(dict.fromkeys(refused)) or "no address"
            raise TargetRefused(f"refused to call {host}: it resolves to {listed}. {_ALLOW_HINT}")
        return allowed

    async def close(self) -> None:
        await self._inner.close()


class GuardedConnector(aiohttp.TCPConnector):
    """A TCPConnector whose every DNS answer goes through :class:`GuardedResolver`."""

    def __init__(self, guard: AddressGuard, **kwargs: Any) -> None:
        self.guard = guard
        self.resolver = GuardedResolver(guard)
        super().__init__(resolver=self.resolver, **kwargs)

    async def close(self, *, abort_ssl: bool = False) -> None:
        # The connector closes only a resolver it created itself.
        try:
            await super().close(abort_ssl=abort_ssl)
        finally:
            await self.resolver.close()


def create_http_session(
    policy: HttpPolicy, *, limit: int = 100, ssl_context: ssl.SSLContext | None = None
) -> aiohttp.ClientSession:
    """The ClientSession :func:`run_http` needs: guarded, shared by many tasks, safe to share.

    No cookie jar (one workflow's cookies must never reach another's
    requests), no proxies from the environment (a proxy would be the address
    connected to, defeating the guard), and no session-wide timeout (each
    call brings its node's). ``ssl_context`` replaces the default TLS
    verification (the system's CAs), to trust a private CA. Call it inside the
    running loop and close it (``async with``) when the worker stops.
    """
    connector = GuardedConnector(
        AddressGuard.of(policy), limit=limit, ssl=ssl_context if ssl_context is not None else True
    )
    return aiohttp.ClientSession(
        connector=connector,
        cookie_jar=aiohttp.DummyCookieJar(),
        trust_env=False,
        timeout=aiohttp.ClientTimeout(total=None),
        headers={"User-Agent": "composer-http-node"},
    )
