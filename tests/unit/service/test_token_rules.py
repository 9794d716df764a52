"""The one rule the services apply to the secrets they accept (issue 15, item 6; issue 25,
item 4): outside development mode a well-known, placeholder or guessable token is refused,
guessable judged by its estimated entropy, not its length, and the error names the
variable and how to make a good one."""

from __future__ import annotations

import base64
import os
import secrets
import uuid
from collections.abc import Callable

import pytest

from composer_service import StartupError
from composer_service.tokens import (
    GENERATE_HINT,
    MIN_TOKEN_BITS,
    WeakTokenError,
    check_tokens,
    estimated_bits,
    token_weakness,
)

STRONG = secrets.token_urlsafe(32)


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        ("dev-token", "well-known"),
        ("dev-worker-token", "well-known"),
        ("dev-builtin-worker-token", "well-known"),
        ("CHANGE-ME-admin-token", "placeholder"),
        ("change-me-" + "x" * 40, "placeholder"),  # long, but still the placeholder
        ("CHANGE-ME", "placeholder"),
        ("x" * 31, "guessable"),
        ("", "empty"),
        # long enough for the old length rule, and no secret (issue 25: "a" * 32 got in)
        ("a" * 32, "about 0 bits"),
        ("a" * 200, "about 0 bits"),
        ("ab" * 16, "guessable"),
        ("ab" * 100, "guessable"),
        ("passwordpasswordpasswordpassword", "guessable"),
        ("abcdefghijklmnopqrstuvwxyzabcdefghijkl", "guessable"),
        ("0123456789" * 4, "guessable"),
        ("a" * 31 + "bc0de", "guessable"),
        ("team-a-token", "guessable"),
        ("9f86d081884c7d659a2feaa0c55ad0", "guessable"),  # 30 hex digits: 120 bits
    ],
)
def test_weak_tokens_are_named_with_why(token: str, reason: str) -> None:
    weakness = token_weakness(token)
    assert weakness is not None and reason in weakness
    if reason not in {"well-known", "placeholder"}:  # public: quoting them tells nothing
        assert not token or token not in weakness


GENERATORS: dict[str, Callable[[], str]] = {
    "secrets.token_urlsafe(32)": lambda: secrets.token_urlsafe(32),
    "secrets.token_hex(16)": lambda: secrets.token_hex(16),  # 128 bits: just enough
    "secrets.token_hex(16).upper()": lambda: secrets.token_hex(16).upper(),
    "secrets.token_hex(32)": lambda: secrets.token_hex(32),
    "openssl rand -base64 32": lambda: base64.b64encode(os.urandom(32)).decode(),
    "uuid4": lambda: str(uuid.uuid4()),
}


@pytest.mark.parametrize("generator", GENERATORS)
def test_what_random_generators_make_always_passes(generator: str) -> None:
    """Thousands of draws of each: a rule that refused one in a thousand random tokens
    would fail a deployment now and then, for nothing."""
    make = GENERATORS[generator]
    for _ in range(2000):
        token = make()
        assert token_weakness(token) is None, (generator, token, estimated_bits(token))


def test_the_estimate_counts_what_the_characters_can_hold() -> None:
    assert estimated_bits(secrets.token_hex(16)) == MIN_TOKEN_BITS  # 32 * log2(16)
    assert estimated_bits("a" * 32) == 0
    assert estimated_bits("ab" * 16) == pytest.approx(2 * 4)  # its period: two hex digits
    assert estimated_bits(STRONG) > 200


def test_outside_dev_mode_a_weak_token_stops_the_service_naming_variable_and_fix() -> None:
    with pytest.raises(WeakTokenError) as raised:
        check_tokens(
            [("COMPOSER_API_TOKENS entry 1", STRONG), ("COMPOSER_WORKER_TOKEN", "short-secret")],
            dev_mode=False,
        )
    message = str(raised.value)
    assert isinstance(raised.value, StartupError)  # composer_service.run exits 2 with it
    assert "COMPOSER_WORKER_TOKEN" in message
    assert "COMPOSER_API_TOKENS" not in message  # the good one is not blamed
    assert GENERATE_HINT in message
    assert "short-secret" not in message  # a secret is never printed


def test_every_weak_token_is_listed_at_once() -> None:
    with pytest.raises(WeakTokenError) as raised:
        check_tokens([("A_TOKEN", "dev-token"), ("B_TOKEN", "CHANGE-ME-b")], dev_mode=False)
    assert "A_TOKEN" in str(raised.value) and "B_TOKEN" in str(raised.value)


def test_dev_mode_accepts_weak_tokens_and_says_so() -> None:
    warnings = check_tokens(
        [("COMPOSER_API_TOKENS entry 1", "dev-token"), ("COMPOSER_WORKER_TOKEN", STRONG)],
        dev_mode=True,
    )
    assert len(warnings) == 1
    assert "COMPOSER_API_TOKENS entry 1" in warnings[0] and "COMPOSER_DEV_MODE" in warnings[0]
    assert check_tokens([("COMPOSER_WORKER_TOKEN", STRONG)], dev_mode=False) == []
