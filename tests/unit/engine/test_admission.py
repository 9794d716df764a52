"""COMPOSER_QUEUE_CONCURRENCY as a person writes it, and the errors that say what is wrong."""

from __future__ import annotations

import pytest

from composer_engine import QueueConcurrency, parse_queue_concurrency


def test_pairs_become_limits_and_empty_means_no_policy() -> None:
    assert parse_queue_concurrency(" payments=2, emails = 10 ,") == QueueConcurrency(
        {"payments": 2, "emails": 10}
    )
    assert parse_queue_concurrency("") is None
    assert parse_queue_concurrency(" , ") is None


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("payments", "'payments' is not queue=N"),
        ("=3", "'=3' is not queue=N"),
        ("payments=0", "the limit of queue 'payments' must be a whole number of at least 1"),
        ("payments=two", "not 'two'"),
        ("a=1,a=2", "names queue 'a' twice"),
    ],
)
def test_a_bad_setting_is_refused_with_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(ValueError, match="COMPOSER_QUEUE_CONCURRENCY") as err:
        parse_queue_concurrency(text)
    assert says in str(err.value)


def test_a_policy_watches_only_its_queues() -> None:
    policy = QueueConcurrency({"payments": 2})
    assert policy.watches("payments")
    assert not policy.watches("emails")
    assert tuple(policy.queues()) == ("payments",)
