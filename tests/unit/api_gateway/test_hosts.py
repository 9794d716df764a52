"""COMPOSER_ALLOWED_HOSTS as the gateway reads it: names with or without ports, IPv6
literals, subdomain suffixes, a star; and an empty list refused at start."""

from __future__ import annotations

import secrets

import pytest

from composer_api_gateway.__main__ import check_settings, config_from
from composer_api_gateway.hosts import LOOPBACK_HOSTS, HostAllowList, parse_hosts
from composer_api_gateway.settings import GatewaySettings
from composer_service import StartupError

STRONG = secrets.token_urlsafe(32)


def test_the_default_is_the_loopback_names() -> None:
    settings = GatewaySettings(api_tokens=f"{STRONG}:admin")
    assert config_from(settings).allowed_hosts == LOOPBACK_HOSTS


def test_a_configured_list_is_read_with_spaces_ports_and_case() -> None:
    settings = GatewaySettings(allowed_hosts=" Composer.Example.com:443 , .corp.example,[::1]:80")
    hosts = config_from(settings).allowed_hosts
    assert hosts == ("composer.example.com", ".corp.example", "[::1]")
    allowed = HostAllowList(hosts)
    assert allowed.allows("composer.example.com:8080")
    assert allowed.allows("corp.example") and allowed.allows("a.b.corp.example:1")
    assert allowed.allows("[::1]:8080")
    assert not allowed.allows("xcorp.example")
    assert not allowed.allows("composer.example.com.evil.example")
    assert not allowed.allows(None)
    assert HostAllowList(["::1"]).allows("[::1]:8080")  # a bare IPv6 entry means the same


def test_an_empty_list_stops_the_gateway_naming_the_setting() -> None:
    with pytest.raises(ValueError, match="COMPOSER_ALLOWED_HOSTS"):
        parse_hosts(" , ")
    with pytest.raises(StartupError, match="COMPOSER_ALLOWED_HOSTS"):
        check_settings(GatewaySettings(api_tokens=f"{STRONG}:admin", allowed_hosts=""))


def test_the_gateway_checks_its_tokens_before_it_connects() -> None:
    with pytest.raises(StartupError, match="COMPOSER_API_TOKENS entry 2 \\(viewer\\)"):
        check_settings(GatewaySettings(api_tokens=f"{STRONG}:admin,short:viewer"))
    warnings = check_settings(GatewaySettings(api_tokens="dev-token:admin", dev_mode=True))
    assert len(warnings) == 1 and "COMPOSER_DEV_MODE" in warnings[0]
