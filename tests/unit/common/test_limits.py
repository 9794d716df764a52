"""Sizes as people read them, and JSON that JSONB can store (composer_common.limits)."""

from __future__ import annotations

import pytest

from composer_common import limits


@pytest.mark.parametrize(
    ("limit", "shown"),
    [(2**20, "1 MiB"), (512 * 1024, "512 KiB"), (3 * 2**19, "1.5 MiB"), (1000, "1000 bytes")],
)
def test_a_limit_is_shown_as_it_was_likely_set(limit: int, shown: str) -> None:
    assert limits.show_limit(limit) == shown


def test_over_limit_names_the_size_the_limit_and_the_setting() -> None:
    message = limits.over_limit("node input", 4_700_000, 2**20, "COMPOSER_MAX_NODE_INPUT_BYTES")
    assert message == "node input is 4.7 MB, over the 1 MiB limit (COMPOSER_MAX_NODE_INPUT_BYTES)"
    # measuring stopped once the input was certain to be over: its size is a lower bound
    stopped = limits.over_limit("node input", 1_200_000, 2**20, "S", at_least=True)
    assert stopped == "node input is at least 1.2 MB, over the 1 MiB limit (S)"


def test_encode_counts_utf8_bytes_of_compact_json() -> None:
    assert limits.encode({"é": [1, 2]}, "output", max_bytes=12, setting="S") == '{"é":[1,2]}'
    refused = limits.encode({"é": [1, 2]}, "output", max_bytes=11, setting="S")
    assert isinstance(refused, limits.Refusal) and refused.too_large


def test_encode_says_where_a_value_jsonb_refuses_is() -> None:
    refused = limits.encode({"a": [0, {"b": float("-inf")}]}, "output", max_bytes=None, setting="S")
    assert refused == limits.Refusal(
        "output is not storable as JSON: -Infinity at $.a[1].b", too_large=False
    )
    assert limits.encode({"t": "\\u0000"}, "output", max_bytes=None, setting="S") == (
        '{"t":"\\\\u0000"}'
    )
