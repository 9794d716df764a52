"""composer_engine.sealing: what a sealed document promises, without a database."""

from __future__ import annotations

import base64
import os

import pytest

from composer_engine.sealing import (
    PREFIX,
    Keyring,
    KeyUnavailable,
    Tampered,
    looks_sealed,
    sealer_from,
)


def key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


K1, K2 = key(), key()
RUN, OTHER = "0190aaaa-0000-7000-8000-000000000001", "0190aaaa-0000-7000-8000-000000000002"


def test_no_keys_means_plain_documents() -> None:
    sealer = sealer_from("")
    assert not sealer.enabled
    assert sealer.new_data_key(RUN) is None
    seal = sealer.for_run(RUN, None)
    assert seal.doc({"card": "4111"}) == {"card": "4111"}
    assert seal.text("boom") == "boom"


def test_a_sealed_document_holds_no_plaintext_and_opens_to_the_value() -> None:
    sealer = sealer_from(f"k1:{K1}")
    seal = sealer.for_run(RUN, sealer.new_data_key(RUN))
    value = {"card": "4111-1111", "nested": [1, 2.5, None, "ü"]}
    sealed = seal.doc(value)
    assert isinstance(sealed, str) and sealed.startswith(f"{PREFIX}k1:")
    assert "4111" not in sealed
    assert sealer.open(RUN, sealed) == value
    assert sealer.open_text(RUN, seal.text("card 4111 declined")) == "card 4111 declined"
    assert seal.doc(None) is None  # NULL stays NULL


def test_the_same_value_seals_differently_each_time() -> None:
    sealer = sealer_from(f"k1:{K1}")
    seal = sealer.for_run(RUN, sealer.new_data_key(RUN))
    assert seal.doc({"a": 1}) != seal.doc({"a": 1})  # a fresh nonce each time


def test_plain_documents_still_open_once_sealing_is_on() -> None:
    sealer = sealer_from(f"k1:{K1}")
    assert sealer.open(RUN, {"written": "before"}) == {"written": "before"}
    assert sealer.open_text(RUN, "an old error") == "an old error"


def test_rotation_new_key_seals_old_key_still_opens() -> None:
    old = sealer_from(f"k1:{K1}")
    old_doc = old.for_run(RUN, old.new_data_key(RUN)).doc({"v": "old"})

    rotated = sealer_from(f"k2:{K2},k1:{K1}")
    assert rotated.open(RUN, old_doc) == {"v": "old"}
    new_key = rotated.new_data_key(OTHER)
    assert new_key is not None and new_key.startswith("k2:")

    without_old = sealer_from(f"k2:{K2}")
    with pytest.raises(KeyUnavailable) as raised:
        without_old.open(RUN, old_doc)
    assert raised.value.key_id == "k1"
    assert "'k1'" in str(raised.value) and "COMPOSER_ENCRYPTION_KEYS" in str(raised.value)


def test_a_document_moved_to_another_run_does_not_open() -> None:
    sealer = sealer_from(f"k1:{K1}")
    sealed = sealer.for_run(RUN, sealer.new_data_key(RUN)).doc({"v": 1})
    with pytest.raises(Tampered):
        sealer.open(OTHER, sealed)


def test_an_altered_document_does_not_open() -> None:
    sealer = sealer_from(f"k1:{K1}")
    sealed = sealer.for_run(RUN, sealer.new_data_key(RUN)).doc({"v": 1})
    assert isinstance(sealed, str)
    body = sealed.rsplit(":", 1)[1]
    flipped = body[:-3] + ("A" if body[-3] != "A" else "B") + body[-2:]
    with pytest.raises(Tampered):
        sealer.open(RUN, sealed[: -len(body)] + flipped)
    with pytest.raises(Tampered):
        sealer.open(RUN, PREFIX + "k1:nonsense")


@pytest.mark.parametrize(
    ("setting", "says"),
    [
        ("k1", "not id:base64key"),
        (f"bad id!:{K1}", "not id:base64key"),
        ("k1:not base64!", "not base64"),
        (f"k1:{base64.b64encode(b'short').decode()}", "must be 32"),
        (f"k1:{K1},k1:{K2}", "twice"),
    ],
)
def test_malformed_keys_are_refused_without_echoing_them(setting: str, says: str) -> None:
    with pytest.raises(ValueError, match=says) as raised:
        Keyring.parse(setting)
    assert K1 not in str(raised.value) and K2 not in str(raised.value)


def test_values_that_look_sealed_are_recognised() -> None:
    assert looks_sealed(PREFIX + "k1:x:y")
    assert not looks_sealed({"x": PREFIX})
    assert not looks_sealed("plain")
