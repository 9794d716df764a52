"""The digest of a start request, kept beside its Idempotency-Key.

A repeat of a start (its answer lost) must get the first run back; the same
key with a different request is a client bug that, answered with the first
run, would look like success for a run that never got the new input. The
digest tells the two apart without keeping a second copy of the input (which
may be sealed at rest): SHA-256 of the request's canonical JSON.
"""

from __future__ import annotations

import hashlib
import json

from composer_core.templates import Json

#: Integral floats up to this are written as integers: 1e2, 100.0 and 100 are one number.
_EXACT = 2**53


def start_digest(input: Json, config: Json, version: int | None, start_node: str | None) -> str:
    """The hex SHA-256 of what a start asks for (``input`` None is the empty input it
    stores; ``version`` None or 0 is "the deployed one"), key order and number
    spelling aside."""
    request = {
        "input": input if input is not None else {},
        "config": config,
        "version": version or None,
        "start_node": start_node,
    }
    text = json.dumps(
        _canonical(request), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return hashlib.sha256(text.encode()).hexdigest()


def _canonical(value: Json) -> Json:
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    if isinstance(value, float) and value.is_integer() and abs(value) <= _EXACT:
        return int(value)
    return value
