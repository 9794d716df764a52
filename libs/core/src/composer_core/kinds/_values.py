"""Values a node kind's spec is written in, and reads: shared by the kinds and the model.

Nothing here imports ``composer_core.model``: the model reads the kinds, so the
kinds stand below it (a cycle the other way would make every import order matter).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

#: The longest wait, timeout or retry delay, in seconds (100 years): ``now`` plus it
#: stays far inside what a datetime can hold.
MAX_SECONDS = 100 * 365 * 24 * 3600

#: A ``{{ expression }}`` standing for the whole value: it must resolve to the field's type.
Template = Annotated[
    str,
    Field(
        pattern=r"\{\{",
        title="template",
        description="a {{ expression }} that resolves to the field's type",
    ),
]
Seconds = Annotated[float, Field(ge=0, le=MAX_SECONDS)]

#: ``{{ secret.NAME }}`` in text that is never templated (PYTHON code).
SECRET_TEXT = re.compile(r"\{\{\s*secret\s*\.\s*[A-Za-z_][A-Za-z0-9_]*\s*\}\}")


class SpecModel(BaseModel):
    """A kind's spec model: unknown keys refused, frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def templated(value: Any) -> bool:
    return isinstance(value, str) and "{{" in value


def carries_secret(spec: Mapping[str, Any]) -> bool:
    """Whether a string anywhere in ``spec`` (url, method, headers, query, body, …) holds
    a secret reference. It finds every one the template compiler does, and a few more
    in templates that fail to compile (reported on their own)."""
    stack: list[Any] = [spec]
    while stack:  # not recursive: a spec nested too deep is reported, not walked into
        value = stack.pop()
        if isinstance(value, str):
            if SECRET_TEXT.search(value):
                return True
        elif isinstance(value, Mapping):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return False


def parse_seconds(value: Any) -> float | None:
    """A JSON number or numeric string as seconds in [0, MAX_SECONDS]; None if it is not one.

    The bound keeps ``now + timedelta(seconds=…)`` inside what a datetime can hold.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    if isinstance(value, int | float) and 0 <= value <= MAX_SECONDS:  # NaN fails both
        return float(value)
    return None


def parse_time(value: str) -> dt.datetime | None:
    """An RFC 3339 time with a zone, in UTC; None if it is not one."""
    try:
        parsed = dt.datetime.fromisoformat(value.strip())
        return parsed.astimezone(dt.UTC) if parsed.tzinfo is not None else None
    except (ValueError, OverflowError):  # 9999-12-31T23:00:00-05:00 has no UTC form
        return None
