"""Run labels: the rules a run's labels keep, and the text of a label filter.

Labels are ``{key: value}`` text a start attaches to its run so that people can
find it again (``GET /v1/runs?label=customer:acme``). They are stored and shown
in plain text even when the run's payloads are sealed (docs/architecture.md
§6.3): they are for finding runs, never for secrets. The api-gateway checks a
start's labels here, and so does the engine before it stores them; the filter's
``key:value`` text is read here too, so the rules and the syntax agree.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

#: Labels one run may carry.
MAX_LABELS = 16
#: Characters of a label value.
MAX_VALUE_CHARS = 256
#: A key: a letter or digit, then letters, digits, ``_ . - /``; 63 characters at
#: most. No ``:`` (it ends the key in a filter) and no ``=`` (the CLI's separator).
KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_./-]{0,62}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def problems(labels: Mapping[str, object]) -> list[tuple[str, str]]:
    """Every problem of a start's ``labels``, as (path, message); empty: they are fine."""
    found: list[tuple[str, str]] = []
    if len(labels) > MAX_LABELS:
        found.append(("labels", f"has {len(labels)} labels; a run carries at most {MAX_LABELS}"))
    for key, value in labels.items():
        path = f"labels.{key}"
        if not isinstance(key, str) or not KEY.fullmatch(key):
            found.append(
                (
                    path,
                    f"key {key!r} is not a label key: a letter or digit, then letters, "
                    "digits, '_', '.', '-' or '/', at most 63 characters",
                )
            )
        if not isinstance(value, str):
            found.append((path, f"value must be text, not {type(value).__name__}"))
        elif len(value) > MAX_VALUE_CHARS:
            found.append((path, f"value has {len(value)} characters; at most {MAX_VALUE_CHARS}"))
        elif _CONTROL.search(value):
            found.append((path, "value contains a control character"))
    return found


def parse_filter(texts: list[str]) -> dict[str, str] | None:
    """The labels a listing's ``label=key:value`` parameters ask for, as one object
    that a run's labels must contain; None when two ask for one key with different
    values (no run can match). Raises ValueError naming a malformed one."""
    wanted: dict[str, str] = {}
    for text in texts:
        key, sep, value = text.partition(":")
        if not sep or not KEY.fullmatch(key):
            raise ValueError(
                f"label filter {text!r} is not key:value (e.g. customer:acme; a key is a "
                "letter or digit, then letters, digits, '_', '.', '-' or '/')"
            )
        if wanted.setdefault(key, value) != value:
            return None
    return wanted
