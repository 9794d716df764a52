"""COMPOSER_WORKER_TOKEN(S): which token serves which queues, and clear errors for a bad list."""

from __future__ import annotations

import pytest

from composer_coordinator.tokens import TokenConfigError, WorkerTokens


def test_tokens_cover_their_queues_and_the_plain_token_covers_all() -> None:
    assert WorkerTokens.parse("fleet").queues("fleet") is None
    tokens = WorkerTokens.parse("", "team-a:payments|refunds, builtin:http|python,ops:*")
    assert tokens.queues("team-a") == frozenset({"payments", "refunds"})
    assert tokens.queues("builtin") == frozenset({"http", "python"})
    assert tokens.queues("ops") is None
    assert tokens.match("team-a") == "team-a"
    assert tokens.match("team-b") is None
    assert tokens.of_metadata([("authorization", "Bearer builtin")]) == "builtin"
    assert tokens.of_metadata([("authorization", "builtin")]) is None
    assert tokens.of_metadata(None) is None


@pytest.mark.parametrize(
    ("plain", "scoped", "message"),
    [
        ("", "", "no worker token configured"),
        ("", "justatoken", "is not token:queue1|queue2"),
        ("", "secret-token:pay ments", "a queue name has letters"),
        ("", "tok:a,tok:b", "configured twice"),
        # issue 25: a token for every queue beside scoped ones only where the list says so
        ("fleet", "secret-token:payments", "must be listed among them as <token>:[*]"),
    ],
)
def test_a_bad_token_list_names_the_entry_and_the_fix(
    plain: str, scoped: str, message: str
) -> None:
    with pytest.raises(TokenConfigError, match=message) as raised:
        WorkerTokens.parse(plain, scoped)
    assert "secret-token" not in str(raised.value)  # a token is never printed whole


def test_the_builtin_workers_token_serves_their_queues_only() -> None:
    tokens = WorkerTokens.parse("fleet", "", "builtin")
    assert tokens.queues("builtin") == frozenset({"http", "python"})
    with pytest.raises(TokenConfigError, match="a token of their own"):
        WorkerTokens.parse("same", "", "same")


def test_with_scoped_tokens_every_queue_is_granted_only_by_the_list() -> None:
    tokens = WorkerTokens.parse("", "ops:*,team-a:payments")
    assert tokens.queues("ops") is None
    assert tokens.match("fleet") is None
    assert WorkerTokens.parse("fleet", " , ").queues("fleet") is None  # an empty list is none
