"""Which addresses the SSRF guard refuses, judged address by address."""

from __future__ import annotations

import ipaddress

import pytest

from composer_executors._guard import AddressGuard, HttpPolicy, parse_networks, refusal_reason
from composer_service import ServiceSettings


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.0.9", "loopback"),
        ("::1", "loopback"),
        ("10.0.0.1", "private"),
        ("172.16.5.4", "private"),
        ("192.168.1.1", "private"),
        ("fc00::1", "private"),
        ("fd12:3456::1", "private"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("240.0.0.1", "private"),  # reserved; Python files 240/4 under is_private
        ("100.64.0.1", "not public"),  # carrier-grade NAT
        ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped
        ("::ffff:169.254.169.254", "link-local"),
        ("64:ff9b::a00:1", "private"),  # NAT64 of 10.0.0.1
        ("2002:7f00:1::", "loopback"),  # 6to4 of 127.0.0.1
    ],
)
def test_non_public_addresses_are_refused(address: str, reason: str) -> None:
    assert refusal_reason(ipaddress.ip_address(address)) == reason


@pytest.mark.parametrize(
    "address", ["93.184.215.14", "8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8"]
)
def test_public_addresses_pass(address: str) -> None:
    assert refusal_reason(ipaddress.ip_address(address)) is None


def test_allow_networks_opens_only_those_networks() -> None:
    guard = AddressGuard(False, (ipaddress.ip_network("10.1.0.0/16"),))
    assert guard.reason(ipaddress.ip_address("10.1.2.3")) is None
    assert guard.reason(ipaddress.ip_address("10.2.0.1")) == "private"
    assert guard.reason(ipaddress.ip_address("169.254.169.254")) == "link-local"


def test_allow_private_opens_everything() -> None:
    guard = AddressGuard(True, ())
    assert guard.reason(ipaddress.ip_address("169.254.169.254")) is None
    assert guard.reason(ipaddress.ip_address("fe80::1%2")) is None


def test_parse_networks_reads_a_comma_separated_cidr_list() -> None:
    assert parse_networks(" 10.20.0.0/16, fd00::/8 ,,192.168.7.9") == (
        ipaddress.ip_network("10.20.0.0/16"),
        ipaddress.ip_network("fd00::/8"),
        ipaddress.ip_network("192.168.7.9/32"),
    )
    assert parse_networks("10.20.3.4/16") == (ipaddress.ip_network("10.20.0.0/16"),)
    assert parse_networks("") == ()


def test_an_allowed_network_may_name_one_port() -> None:
    allowed = parse_networks("127.0.0.1:8080, 10.20.0.0/16:443, [::1]:8080, [fd00::/8]:9, fd00::1")
    assert [str(a) for a in allowed] == [
        "127.0.0.1/32:8080",
        "10.20.0.0/16:443",
        "[::1/128]:8080",
        "[fd00::/8]:9",
        "fd00::1/128",
    ]
    guard = AddressGuard(False, allowed)
    loopback = ipaddress.ip_address("127.0.0.1")
    assert guard.reason(loopback, 8080) is None
    assert guard.reason(loopback, 9100) == "loopback"  # an admin port of the same stack
    assert guard.reason(loopback) == "loopback"  # a port nobody named is not guessed
    assert guard.reason(ipaddress.ip_address("10.20.3.4"), 443) is None
    assert guard.reason(ipaddress.ip_address("10.20.3.4"), 5432) == "private"
    assert guard.reason(ipaddress.ip_address("::1"), 8080) is None
    assert guard.reason(ipaddress.ip_address("fd00::1"), 1234) is None  # no port: every port


@pytest.mark.parametrize(
    "text",
    [
        "10.20.0.0/33",
        "internal",
        "10.0.0.0/8;fd00::/8",
        "127.0.0.1:http",
        "[::1]8080",
        "127.0.0.1:70000",
        "[::1]:",
    ],
)
def test_parse_networks_names_the_setting_and_the_bad_entry(text: str) -> None:
    with pytest.raises(ValueError, match=r"COMPOSER_HTTP_ALLOW_NETWORKS: .* is not a network"):
        parse_networks(text)


def test_the_allow_networks_setting_reaches_the_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPOSER_HTTP_ALLOW_NETWORKS", "10.20.0.0/16,fd00::/8")
    settings = ServiceSettings()
    policy = HttpPolicy(allow_networks=parse_networks(settings.http_allow_networks))
    guard = AddressGuard.of(policy)
    assert guard.reason(ipaddress.ip_address("10.20.9.9")) is None
    assert guard.reason(ipaddress.ip_address("fd00::5")) is None
    assert guard.reason(ipaddress.ip_address("10.21.0.1")) == "private"
    assert guard.reason(ipaddress.ip_address("169.254.169.254")) == "link-local"
    assert settings.http_allow_private is False
