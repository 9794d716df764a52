"""Payloads sealed at rest: envelope encryption with AES-GCM.

Every run gets its own data key (256 random bits). The data key is sealed by a
key-encryption key from settings (``COMPOSER_ENCRYPTION_KEYS="id:base64key,…"``:
the first seals, every one opens) and kept on the run row; each document of the
run — input, config, output, task inputs, outputs and errors, signal payloads,
webhook payloads, task logs — is sealed with the data key and stored as one string::

    $sealed:v1:<key id>:<sealed data key>:<nonce + ciphertext>

The sealed data key travels with every document, so any holder of the
key-encryption keys opens any document alone (the lease, the API, the
outbox-enqueuer), with no lookup of the run row; an opened data key is cached,
so that costs one AES-GCM decryption per run, not per document. Both layers
take the run id as associated data: a document copied into another run does
not open.

Rotation: put a new key first; new runs seal with it, and old documents still
open with the old key as long as it is listed. A run keeps its data key for
life, so its later documents stay under the old key too (they still open).

With no keys configured nothing is sealed and documents stay plain JSON, as
before sealing existed; a plain document opens as itself whether sealing is on
or not, so turning it on needs no rewrite. A sealed document whose key is not
configured raises ``KeyUnavailable`` naming the key id: the caller parks what
needed it instead of failing it (docs/architecture.md §6.3).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from dataclasses import dataclass
from typing import Final

from cachetools import LRUCache
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from composer_core.templates import Json

#: What every sealed document starts with. A plain string value that starts with
#: it is refused where documents enter (the API), so no plain value looks sealed.
PREFIX: Final = "$sealed:v1:"
_KEY_ID = re.compile(r"[A-Za-z0-9_.-]{1,32}")
_NONCE = 12


class SealingError(Exception):
    """A sealed document that cannot be opened."""


class KeyUnavailable(SealingError):
    """The document was sealed under a key id that is not configured here."""

    def __init__(self, key_id: str) -> None:
        super().__init__(
            f"sealed with key {key_id!r}, which is not in COMPOSER_ENCRYPTION_KEYS here: "
            f"add it back (any position after the first) to open it"
        )
        self.key_id = key_id


class Tampered(SealingError):
    """The document does not open with its key: it was altered, truncated, or moved
    from another run."""


@dataclass(frozen=True, slots=True)
class Keyring:
    """The key-encryption keys: ``ids[0]`` seals, every one opens."""

    keys: dict[str, bytes]
    ids: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> Keyring | None:
        """Parse ``COMPOSER_ENCRYPTION_KEYS`` (None: empty, sealing off). Raises
        ValueError naming the entry and the fix; never echoes a key."""
        keys: dict[str, bytes] = {}
        for n, entry in enumerate((e.strip() for e in text.split(",")), start=1):
            if not entry:
                continue
            key_id, sep, encoded = entry.partition(":")
            if not sep or not _KEY_ID.fullmatch(key_id):
                raise ValueError(
                    f"COMPOSER_ENCRYPTION_KEYS entry {n} is not id:base64key "
                    f"(the id is 1-32 of A-Z a-z 0-9 _ . -)"
                )
            try:
                key = base64.b64decode(encoded, validate=True)
            except binascii.Error:
                raise ValueError(
                    f"COMPOSER_ENCRYPTION_KEYS key {key_id!r} is not base64; make one with "
                    f"`python -c 'import os,base64; print(base64.b64encode(os.urandom(32)).decode())'`"
                ) from None
            if len(key) != 32:
                raise ValueError(
                    f"COMPOSER_ENCRYPTION_KEYS key {key_id!r} is {len(key)} bytes; it must be "
                    f"32 (AES-256)"
                )
            if key_id in keys:
                raise ValueError(f"COMPOSER_ENCRYPTION_KEYS names key {key_id!r} twice")
            keys[key_id] = key
        if not keys:
            return None
        return cls(keys, tuple(keys))


def sealer_from(setting: str) -> Sealer:
    """The sealer that ``COMPOSER_ENCRYPTION_KEYS`` describes (ValueError: malformed)."""
    return Sealer(Keyring.parse(setting))


class Sealer:
    """Seals and opens the documents of runs. Safe to share; keeps a bounded cache
    of opened data keys."""

    def __init__(self, keyring: Keyring | None = None, *, cache_size: int = 10_000) -> None:
        self.keyring = keyring
        self._keks = {} if keyring is None else {k: AESGCM(v) for k, v in keyring.keys.items()}
        self._deks: LRUCache[tuple[str, str], AESGCM] = LRUCache(cache_size)

    @property
    def enabled(self) -> bool:
        return self.keyring is not None

    def new_data_key(self, run_id: str) -> str | None:
        """A fresh data key for a new run, sealed by the first key (None: sealing off).
        Store it on the run row; pass it to ``for_run``."""
        if self.keyring is None:
            return None
        key_id = self.keyring.ids[0]
        nonce = os.urandom(_NONCE)
        sealed = self._keks[key_id].encrypt(nonce, AESGCM.generate_key(256), _aad(run_id))
        return f"{key_id}:{_b64(nonce + sealed)}"

    def for_run(self, run_id: str, data_key: str | None) -> RunSeal:
        """What seals the documents of one run. ``data_key`` is the run row's (None: the
        run has none — sealing off, or a run started before it was turned on; then
        ``new_data_key`` first, and store it). Raises KeyUnavailable when the run's
        key is not configured."""
        if data_key is None or self.keyring is None:
            return _PLAIN
        return RunSeal(run_id, data_key, self._dek(run_id, data_key))

    def open(self, run_id: str, value: Json) -> Json:
        """A stored document's value: a sealed one opened, a plain one as it is.
        Raises KeyUnavailable, or Tampered."""
        if not (isinstance(value, str) and value.startswith(PREFIX)):
            return value
        try:
            key_id, sealed_dek, body = value[len(PREFIX) :].split(":")
            data = base64.urlsafe_b64decode(body)
        except (ValueError, binascii.Error):
            raise Tampered(f"a sealed document of run {run_id} is malformed") from None
        dek = self._dek(run_id, f"{key_id}:{sealed_dek}")
        try:
            plain = dek.decrypt(data[:_NONCE], data[_NONCE:], _aad(run_id))
        except InvalidTag:
            raise Tampered(f"a sealed document of run {run_id} does not open") from None
        opened: Json = json.loads(plain)
        return opened

    def open_text(self, run_id: str, value: str | None) -> str | None:
        """A stored text (an error): opened, or as it is."""
        opened = self.open(run_id, value)
        return opened if isinstance(opened, str) or opened is None else json.dumps(opened)

    def _dek(self, run_id: str, data_key: str) -> AESGCM:
        cached = self._deks.get((run_id, data_key))
        if cached is not None:
            return cached
        key_id, _, encoded = data_key.partition(":")
        kek = self._keks.get(key_id)
        if kek is None:
            raise KeyUnavailable(key_id)
        try:
            data = base64.urlsafe_b64decode(encoded)
            dek = AESGCM(kek.decrypt(data[:_NONCE], data[_NONCE:], _aad(run_id)))
        except (ValueError, binascii.Error, InvalidTag):
            raise Tampered(f"the data key of run {run_id} does not open with {key_id!r}") from None
        self._deks[run_id, data_key] = dek
        return dek


class RunSeal:
    """Seals one run's documents with its data key. ``PLAIN`` (sealing off) passes
    them through unchanged."""

    __slots__ = ("_data_key", "_dek", "_run_id")

    def __init__(self, run_id: str, data_key: str, dek: AESGCM | None) -> None:
        self._run_id = run_id
        self._data_key = data_key
        self._dek = dek

    @property
    def sealing(self) -> bool:
        return self._dek is not None

    def doc(self, value: Json) -> Json:
        """``value`` as it is stored: sealed, or itself (NULL stays NULL either way)."""
        if self._dek is None or value is None:
            return value
        nonce = os.urandom(_NONCE)
        plain = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
        sealed = self._dek.encrypt(nonce, plain, _aad(self._run_id))
        return f"{PREFIX}{self._data_key}:{_b64(nonce + sealed)}"

    def text(self, value: str | None) -> str | None:
        """A text column's value (an error) as it is stored."""
        sealed = self.doc(value)
        assert sealed is None or isinstance(sealed, str)
        return sealed


_PLAIN: Final = RunSeal("", "", None)
PLAIN: Final = _PLAIN


def looks_sealed(value: Json) -> bool:
    """True for a value that would be read as a sealed document (refuse it as input)."""
    return isinstance(value, str) and value.startswith(PREFIX)


def _aad(run_id: str) -> bytes:
    return run_id.encode()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode()
