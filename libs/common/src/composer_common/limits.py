"""Size limits on what Composer stores and sends, and JSON that JSONB can store.

The limits are settings read at each service's entry point (docs/architecture.md,
"Limits"); the defaults live here so that the services, the engine and the SDK
agree on them. Over a limit, the request or the node fails with an error that
names the limit and its setting (``over_limit``).

PostgreSQL's JSONB refuses NaN and Infinity, the NUL character (``\\u0000``) and
lone surrogates; ``json.loads`` and ``json.dumps`` accept all of them, so what a
handler returns (or an older SDK sends) is checked with ``encode`` before it is
stored, and the error says where the bad value is (``NaN at $.a.b``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MiB = 1024 * 1024

#: COMPOSER_MAX_RUN_INPUT_BYTES: a run's input, and its config (the gateway).
DEFAULT_MAX_RUN_INPUT_BYTES = MiB
#: COMPOSER_MAX_SIGNAL_BYTES: a signal's payload (the gateway).
DEFAULT_MAX_SIGNAL_BYTES = MiB
#: COMPOSER_MAX_NODE_INPUT_BYTES: a worker node's rendered input (the coordinator).
DEFAULT_MAX_NODE_INPUT_BYTES = MiB
#: COMPOSER_MAX_OUTPUT_BYTES: a worker node's output (the coordinator; the SDK's
#: WorkerConfig.max_output_bytes).
DEFAULT_MAX_OUTPUT_BYTES = MiB


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a value cannot be stored: ``too_large`` (over its limit) or not storable."""

    message: str
    too_large: bool


def encode(value: Any, what: str, *, max_bytes: int | None, setting: str) -> str | Refusal:
    """``value`` as compact JSON text (its size counted in UTF-8 bytes), or why it cannot be stored: not storable as
    JSONB (``"<what> is not storable as JSON: NaN at $.a.b"``) or over ``max_bytes``
    (``over_limit``). The common case costs one ``json.dumps``; the walk that finds
    where a bad value is runs only when there is one."""
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        data = text.encode("utf-8")
    except (TypeError, ValueError, RecursionError):  # NaN, Infinity, a lone surrogate, ...
        text, data = "", b""
    # \\u0000 in the text is a NUL in a string, or a backslash followed by "u0000":
    # the walk tells which.
    problem = where_unstorable(value) if not data or "\\u0000" in text else None
    if problem is not None:
        return Refusal(f"{what} is not storable as JSON: {problem}", too_large=False)
    if not data:  # pragma: no cover - dumps failed on something the walk accepts
        return Refusal(f"{what} is not storable as JSON", too_large=False)
    if max_bytes is not None and len(data) > max_bytes:
        return Refusal(over_limit(what, len(data), max_bytes, setting), too_large=True)
    return text


def where_unstorable(value: Any) -> str | None:
    """What in ``value`` JSONB cannot store, and where (a JSONPath), or None (no recursion)."""
    stack: list[tuple[Any, str]] = [(value, "$")]
    while stack:
        current, path = stack.pop()
        if isinstance(current, str):
            problem = _text_problem(current)
            if problem:
                return f"{problem} at {path}"
        elif isinstance(current, float):
            if not math.isfinite(current):
                name = (
                    "NaN" if math.isnan(current) else ("Infinity" if current > 0 else "-Infinity")
                )
                return f"{name} at {path}"
        elif isinstance(current, Mapping):
            for key, child in current.items():
                if isinstance(key, str):
                    problem = _text_problem(key)
                    if problem:
                        return f"{problem} in a key at {path}"
                elif not isinstance(key, int | float | bool | None):  # dumps makes text of those
                    return f"a key that is not text ({key!r}) at {path}"
                stack.append((child, f"{path}.{key}"))
        elif isinstance(current, list | tuple):
            stack.extend((child, f"{path}[{i}]") for i, child in enumerate(current))
        elif current is not None and not isinstance(current, bool | int):
            return f"a {type(current).__name__}, which is not JSON, at {path}"
    return None


def _text_problem(text: str) -> str | None:
    if "\x00" in text:
        return "a NUL character (\\u0000)"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "a lone surrogate (not valid Unicode text)"
    return None


def over_limit(what: str, size: int, limit: int, setting: str, *, at_least: bool = False) -> str:
    """``"node input is 4.7 MB, over the 1 MiB limit (COMPOSER_MAX_NODE_INPUT_BYTES)"``;
    ``at_least``: ``size`` is where measuring stopped, once it was certain to be over
    (``"node input is at least 1.2 MB, …"``)."""
    how = "at least " if at_least else ""
    return f"{what} is {how}{show_size(size)}, over the {show_limit(limit)} limit ({setting})"


def show_size(size: int) -> str:
    """A measured size, as people read them: ``4.7 MB``, ``812 kB``, ``90 bytes``."""
    if size >= 1_000_000:
        return f"{size / 1_000_000:.1f} MB"
    if size >= 10_000:
        return f"{size / 1000:.0f} kB"
    return f"{size} bytes"


def show_limit(limit: int) -> str:
    """A limit as it was most likely set: ``1 MiB``, ``512 KiB``, ``1.5 MiB``, ``1000 bytes``."""
    for unit, name in ((MiB, "MiB"), (1024, "KiB")):
        if limit >= unit and limit % (unit // 16) == 0:
            return f"{limit / unit:g} {name}"
    return f"{limit} bytes"
