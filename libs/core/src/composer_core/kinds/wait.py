"""WAIT: parks the run until a time; the timer service wakes it."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from pydantic import ConfigDict, Field

from composer_core.kinds._kind import Decision, SpecChecks, WaitFor, WaitKind
from composer_core.kinds._values import (
    Seconds,
    SpecModel,
    Template,
    parse_seconds,
    parse_time,
    templated,
)
from composer_core.templates import Json

if TYPE_CHECKING:
    from composer_core.model import Node


class WaitSpec(SpecModel):
    """Parks the run until a time; the timer service wakes it.

    Exactly one of ``duration_seconds`` or ``until``. The node's output is
    ``{woke_at}`` (RFC 3339, UTC).
    """

    model_config = ConfigDict(json_schema_extra={"examples": [{"duration_seconds": 3600}]})

    duration_seconds: Seconds | Template | None = Field(
        default=None, description="how long to wait from when the node is reached"
    )
    until: str | None = Field(
        default=None,
        description="an RFC 3339 time with a time zone (2026-12-01T09:00:00Z); a time in "
        "the past wakes at once",
    )


class Wait(WaitKind):
    name = "WAIT"
    spec_model = WaitSpec
    runs_on = "parks; the timer wakes it"
    refuses_secrets = (
        "a WAIT node cannot read a secret: its spec decides when the run wakes and is "
        "stored with the task"
    )

    def check_spec(self, checks: SpecChecks, path: str, node: Node) -> None:
        spec = node.spec
        has_duration, has_until = "duration_seconds" in spec, "until" in spec
        if has_duration == has_until:
            checks.add(path, "WAIT needs exactly one of duration_seconds or until")
        if has_duration:
            checks.check_seconds(f"{path}.duration_seconds", spec["duration_seconds"])
        if has_until:
            until = spec["until"]
            if not isinstance(until, str):
                checks.add(f"{path}.until", "must be an RFC 3339 time string")
            elif not templated(until) and parse_time(until) is None:
                checks.add(f"{path}.until", f"{until!r} is not an RFC 3339 time with a time zone")

    def read(self, spec: dict[str, Json], now: dt.datetime) -> WaitFor:
        if spec.get("until") is not None:
            until = spec["until"]
            wake_at = parse_time(until) if isinstance(until, str) else None
            if wake_at is None:
                raise ValueError(f"until must be an RFC 3339 time with a time zone, got {until!r}")
            return WaitFor(wake_at.astimezone(dt.UTC))
        seconds = parse_seconds(spec.get("duration_seconds"))
        if seconds is None:
            raise ValueError(
                f"duration_seconds must be a non-negative number, got {spec.get('duration_seconds')!r}"
            )
        return WaitFor(now + dt.timedelta(seconds=seconds))

    def settle(self, node: Node, resolved: Json, wait: WaitFor, decision: Decision) -> list[Node]:
        task_id = decision.new_id()
        if wait.wake_at is None or wait.wake_at <= decision.now:
            return decision.complete(node, woke_at(decision.now), task_id=task_id, input=resolved)
        decision.park(node, resolved, task_id=task_id, wake_at=wait.wake_at)
        return []

    def on_timer(
        self, node_id: str, task_id: str, awaited_signal: str | None, decision: Decision
    ) -> None:
        decision.wake(node_id, task_id, woke_at(decision.now))


def woke_at(now: dt.datetime) -> Json:
    """A WAIT's output: when it woke, RFC 3339 in UTC."""
    return {"woke_at": now.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")}


WAIT = Wait()
