"""Metrics of held and released attempts by limit kind and key (docs/architecture.md
§4.12): a process labels at most MAX_KEY_LABELS keys, the rest as ``other``, so a key
rendered per customer cannot grow the series without bound."""

from __future__ import annotations

from typing import Any

from composer_engine._metrics import OTHER, KeyLabels, count_limits, limit_of


class Recorder:
    def __init__(self) -> None:
        self.added: dict[tuple[str, str], int] = {}

    def add(self, n: int, attributes: dict[str, Any]) -> None:
        key = (attributes["kind"], attributes["key"])
        self.added[key] = self.added.get(key, 0) + n


def test_each_limit_name_gives_its_kind_and_key() -> None:
    assert limit_of("payments") == ("queue", "payments")
    assert limit_of("global:partner") == ("node_concurrency", "global:partner")
    assert limit_of("workflow:charge:acme") == ("node_concurrency", "workflow:charge:acme")
    assert limit_of("rate:partner-7") == ("rate_limit", "partner-7")


def test_the_first_keys_met_keep_their_name_and_the_rest_are_other() -> None:
    labels = KeyLabels(cap=3)
    assert [labels(k) for k in ("a", "b", "a", "c", "d", "e", "b")] == [
        "a",
        "b",
        "a",
        "c",
        OTHER,
        OTHER,
        "b",
    ]


def test_counts_are_bounded_by_the_cap_whatever_the_keys() -> None:
    counter = Recorder()
    names = [f"rate:customer-{i}" for i in range(500)] * 2 + ["payments", "global:p"]
    count_limits(counter, names, KeyLabels(cap=100))  # type: ignore[arg-type]
    assert sum(counter.added.values()) == len(names)
    # the cap's keys, and other for each kind met after it
    assert set(counter.added) - {("rate_limit", f"customer-{i}") for i in range(100)} == {
        ("rate_limit", OTHER),
        ("queue", OTHER),
        ("node_concurrency", OTHER),
    }
    assert counter.added[("rate_limit", "customer-0")] == 2
    assert counter.added[("rate_limit", OTHER)] > 0
