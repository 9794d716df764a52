"""The one rule both request-serving services apply to the secrets they accept (issue 15,
item 6): outside development mode a well-known, placeholder or short token is refused,
and the error names the variable and how to make a good one."""

from __future__ import annotations

import secrets

import pytest

from composer_service import StartupError
from composer_service.tokens import (
    GENERATE_HINT,
    MIN_TOKEN_LENGTH,
    WeakTokenError,
    check_tokens,
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
        ("x" * (MIN_TOKEN_LENGTH - 1), f"{MIN_TOKEN_LENGTH - 1} characters"),
        ("", "empty"),
    ],
)
def test_weak_tokens_are_named_with_why(token: str, reason: str) -> None:
    weakness = token_weakness(token)
    assert weakness is not None and reason in weakness


def test_random_tokens_of_32_characters_or_more_pass() -> None:
    assert token_weakness(STRONG) is None
    assert token_weakness("y" * MIN_TOKEN_LENGTH) is None


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
