"""WAIT_FOR_EVENT: parks the run until a signal of a name arrives (or a timeout)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ConfigDict, Field

from composer_core.kinds._kind import Decision, SpecChecks, WaitFor, WaitKind
from composer_core.kinds._values import Seconds, SpecModel, Template, parse_seconds
from composer_core.templates import Json

if TYPE_CHECKING:
    from composer_core.model import Node


class WaitForEventSpec(SpecModel):
    """Parks the run until a signal of that name is sent to it (POST
    /v1/runs/{run_id}/signals/{name}); one sent earlier and not yet taken is taken at
    once. The node's output is the signal's payload.

    When the timeout passes first, ``on_timeout`` decides: ``fail`` (the default) fails
    the node; ``continue`` completes it with ``{"timed_out": true}``, so that a SWITCH
    after it can branch: ``{{ has(tasks.<id>.output.timed_out) }}`` is true only when
    it timed out (a signal's payload has no ``timed_out`` unless its sender put one).
    """

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"event": "payment_received", "timeout_seconds": 86400, "on_timeout": "continue"}
            ]
        }
    )

    event: str = Field(description="the signal name to wait for")
    timeout_seconds: Seconds | Template | None = Field(
        default=None,
        description="how long to wait: then `on_timeout` says what happens (by default the "
        "node fails with `timed out waiting for event …`); absent or 0: wait for ever",
    )
    on_timeout: Literal["fail", "continue"] = Field(
        default="fail",
        description="when the timeout passes: `fail` fails the node (and so the run, unless "
        'another branch is still going); `continue` completes it with `{"timed_out": true}`',
    )


class WaitForEvent(WaitKind):
    name = "WAIT_FOR_EVENT"
    spec_model = WaitForEventSpec
    runs_on = "parks until a signal (or its timeout)"
    #: Read as written when the timer fires: a choice, not a value to render.
    verbatim = frozenset({"on_timeout"})
    refuses_secrets = (
        "a WAIT_FOR_EVENT node cannot read a secret: its spec names what the run waits for "
        "and is stored with the task"
    )

    def check_spec(self, checks: SpecChecks, path: str, node: Node) -> None:
        spec = node.spec
        event = spec.get("event")
        if event is None:
            checks.add(f"{path}.event", "required for WAIT_FOR_EVENT: the signal name to wait for")
        elif not isinstance(event, str) or not event.strip():
            checks.add(f"{path}.event", "must be a non-empty string")
        if "timeout_seconds" in spec:
            checks.check_seconds(f"{path}.timeout_seconds", spec["timeout_seconds"])
        on_timeout = spec.get("on_timeout", "fail")
        if on_timeout not in ON_TIMEOUT:
            checks.add(
                f"{path}.on_timeout",
                f"must be one of {', '.join(map(repr, ON_TIMEOUT))}, got {on_timeout!r}",
            )

    def awaited_signal(self, spec: Mapping[str, Any]) -> str | None:
        event = spec.get("event")
        return event if isinstance(event, str) else None

    def read(self, spec: dict[str, Json], now: dt.datetime) -> WaitFor:
        event = spec.get("event")
        if not isinstance(event, str) or not event.strip():
            raise ValueError(f"event must resolve to a non-empty string, got {event!r}")
        raw_timeout = spec.get("timeout_seconds")
        timeout = 0.0 if raw_timeout is None else parse_seconds(raw_timeout)
        if timeout is None:
            raise ValueError(f"timeout_seconds must be a non-negative number, got {raw_timeout!r}")
        return WaitFor(now + dt.timedelta(seconds=timeout) if timeout > 0 else None, event)

    def settle(self, node: Node, resolved: Json, wait: WaitFor, decision: Decision) -> list[Node]:
        assert wait.event is not None
        task_id = decision.new_id()
        signal = decision.buffered(wait.event)
        if signal is not None:
            decision.consume(signal, node)
            output = {} if signal.payload is None else signal.payload
            return decision.complete(node, output, task_id=task_id, input=resolved)
        decision.park(
            node, resolved, task_id=task_id, wake_at=wait.wake_at, awaited_signal=wait.event
        )
        return []

    def on_timer(
        self, node_id: str, task_id: str, awaited_signal: str | None, decision: Decision
    ) -> None:
        node = decision.dag.node(node_id)
        if node is not None and node.spec.get("on_timeout") == "continue":
            decision.wake(node_id, task_id, TIMED_OUT)
            return
        decision.time_out(node_id, task_id, f"timed out waiting for event {awaited_signal!r}")


#: What ``on_timeout`` may say.
ON_TIMEOUT = ("fail", "continue")

#: The output of a node that timed out under ``on_timeout: continue``.
TIMED_OUT: Json = {"timed_out": True}


WAIT_FOR_EVENT = WaitForEvent()
