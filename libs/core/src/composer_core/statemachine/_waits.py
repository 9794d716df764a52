"""Reading a wait node's resolved spec."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from composer_core.model import NodeType, parse_seconds, parse_time
from composer_core.templates import Json


@dataclass(frozen=True, slots=True)
class WaitInput:
    #: When a WAIT fires, or a WAIT_FOR_EVENT times out (None: no timeout).
    wake_at: dt.datetime | None
    event: str | None = None


def wait_input(node_type: NodeType, spec: Json, now: dt.datetime) -> WaitInput:
    """Raise ValueError with a message for the user when the resolved spec is unusable."""
    if not isinstance(spec, dict):
        raise ValueError(f"spec must resolve to a mapping, got {spec!r}")
    if node_type is NodeType.WAIT:
        if spec.get("until") is not None:
            until = spec["until"]
            wake_at = parse_time(until) if isinstance(until, str) else None
            if wake_at is None:
                raise ValueError(f"until must be an RFC 3339 time with a time zone, got {until!r}")
            return WaitInput(wake_at.astimezone(dt.UTC))
        seconds = parse_seconds(spec.get("duration_seconds"))
        if seconds is None:
            raise ValueError(
                f"duration_seconds must be a non-negative number, got {spec.get('duration_seconds')!r}"
            )
        return WaitInput(now + dt.timedelta(seconds=seconds))
    event = spec.get("event")
    if not isinstance(event, str) or not event.strip():
        raise ValueError(f"event must resolve to a non-empty string, got {event!r}")
    raw_timeout = spec.get("timeout_seconds")
    timeout = 0.0 if raw_timeout is None else parse_seconds(raw_timeout)
    if timeout is None:
        raise ValueError(f"timeout_seconds must be a non-negative number, got {raw_timeout!r}")
    return WaitInput(now + dt.timedelta(seconds=timeout) if timeout > 0 else None, event)


def woke_at(now: dt.datetime) -> Json:
    return {"woke_at": now.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")}
