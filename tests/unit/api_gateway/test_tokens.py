"""COMPOSER_API_TOKENS: named entries, the older unnamed form, and clear refusals.

A token's name is what the audit fields record (who started, signalled,
cancelled or retried a run, who created a definition), so it must be unique,
stable and never the token itself.
"""

from __future__ import annotations

import hashlib

import pytest

from composer_api_gateway.auth import Authenticator, Caller, Role, default_name, parse_tokens
from composer_api_gateway.problems import ApiProblem

CI = "ci-token-0123456789abcdefghijklmnopqrstu"
OPS = "ops-token-0123456789abcdefghijklmnopqrst"
OLD = "old-token-0123456789abcdefghijklmnopqrst"


def test_named_entries_give_each_token_its_name_and_role() -> None:
    tokens = parse_tokens(f" ci={CI}:operator , alice@ops.example={OPS}:admin,")
    assert [(t.name, t.secret, t.role, t.derived_name) for t in tokens] == [
        ("ci", CI.encode(), Role.OPERATOR, False),
        ("alice@ops.example", OPS.encode(), Role.ADMIN, False),
    ]


def test_the_old_form_is_named_by_its_role_and_a_hash_of_the_token() -> None:
    [token] = parse_tokens(f"{OLD}:viewer")
    digest = hashlib.sha256(OLD.encode()).hexdigest()
    assert token.name == f"viewer-{digest[:8]}" == default_name(OLD, Role.VIEWER)
    assert token.derived_name and OLD not in token.name
    # stable: the same name wherever the entry is, whatever else the list holds
    moved = parse_tokens(f"ci={CI}:operator,{OPS}:admin,{OLD}:viewer")
    assert moved[2].name == token.name


def test_both_forms_mix_and_tokens_may_hold_colons_and_padding() -> None:
    tokens = parse_tokens(f"ci={CI}:operator,a:b:c:viewer,QUJDRA==:admin,n=x=y:viewer")
    assert [(t.name, t.secret, t.role) for t in tokens] == [
        ("ci", CI.encode(), Role.OPERATOR),
        (default_name("a:b:c", Role.VIEWER), b"a:b:c", Role.VIEWER),
        # base64 padding does not make a name: the token starts the entry
        (default_name("QUJDRA==", Role.ADMIN), b"QUJDRA==", Role.ADMIN),
        ("n", b"x=y", Role.VIEWER),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("just-a-token", "entry 1 .* is not name=token:role"),
        (f"ci={CI}", "entry 1 .* is not name=token:role"),
        (":admin", "entry 1 .* is not name=token:role"),
        (f"ci={CI}:root", "entry 1 .* unknown role 'root'"),
        (f"{OPS}:admin,bad name={CI}:viewer", "entry 2: the text before '=' is not a token name"),
        (f"-x={CI}:viewer", "entry 1: the text before '=' is not a token name"),
        (f"{'n' * 65}={CI}:viewer", "at most 64"),
        (f"ci={CI}:viewer,ci={OPS}:admin", "entry 2 is named 'ci', as entry 1 is: names must be"),
        (f"{OLD}:viewer,{OLD}:viewer", "entry 2 .* as entry 1 is: the same token is listed twice"),
        (f"ci={CI}:viewer,ops={CI}:admin", "entry 2 has the same token as entry 1"),
    ],
)
def test_a_bad_entry_is_refused_with_its_position_and_the_fix(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        parse_tokens(text)
    for secret in (CI, OPS, OLD):
        assert secret not in str(caught.value)  # never the token itself
    assert "x=y" not in str(caught.value)


def test_an_unnamed_token_with_an_inner_equals_sign_asks_for_a_name() -> None:
    # the part before '=' would be read as a name; an invalid one is refused, unquoted
    with pytest.raises(ValueError, match="needs a name: name=token:role") as caught:
        parse_tokens("a b=secretpart:viewer")
    assert "secretpart" not in str(caught.value) and "a b" not in str(caught.value)


def test_the_authenticator_answers_the_callers_name_and_role() -> None:
    auth = Authenticator(parse_tokens(f"ci={CI}:operator,{OLD}:viewer"))
    assert auth.caller_of(f"Bearer {CI}") == Caller("ci", Role.OPERATOR)
    assert auth.caller_of(f"bearer  {OLD} ") == Caller(default_name(OLD, Role.VIEWER), Role.VIEWER)
    with pytest.raises(ApiProblem) as refused:
        auth.caller_of(f"Bearer {OPS}")
    assert refused.value.status == 401
