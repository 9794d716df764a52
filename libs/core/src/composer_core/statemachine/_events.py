"""Events: what happened to a run. ``Machine.apply`` takes one at a time."""

from __future__ import annotations

from dataclasses import dataclass

from composer_core.templates import Json


@dataclass(frozen=True, slots=True)
class RunStarted:
    """A client started the run; ``start_node`` overrides the definition's start."""

    start_node: str | None = None


@dataclass(frozen=True, slots=True)
class NodeCompleted:
    """A worker finished a task attempt."""

    task_id: str
    node_id: str
    attempt: int
    output: Json = None


@dataclass(frozen=True, slots=True)
class NodeFailed:
    """A task attempt failed. ``permanent`` skips the retry policy (the handler said so,
    or the task was delivered too often); ``error_code`` is the handler's tag."""

    task_id: str
    node_id: str
    attempt: int
    error: str
    error_code: str | None = None
    permanent: bool = False


@dataclass(frozen=True, slots=True)
class TimerFired:
    """A WAIT came due, or a WAIT_FOR_EVENT's timeout passed."""

    task_id: str
    node_id: str


@dataclass(frozen=True, slots=True)
class SignalReceived:
    """An external signal (named event with a JSON payload) was sent to the run."""

    name: str
    payload: Json = None


@dataclass(frozen=True, slots=True)
class RunRetried:
    """Restart the run from ``from_node`` on the machine's definition version.

    ``input``/``config`` replace the run's when given (None keeps them).
    """

    from_node: str
    input: Json = None
    config: Json = None


@dataclass(frozen=True, slots=True)
class RunCancelled:
    reason: str = ""


@dataclass(frozen=True, slots=True)
class RunResumed:
    """A paused run goes on (the engine marked it RUNNING): what was kept while it
    was paused is applied now — the buffered signals its waiting nodes take, and
    its end if nothing is left to do. Its due timers fire through the timer."""


Event = (
    RunStarted
    | NodeCompleted
    | NodeFailed
    | TimerFired
    | SignalReceived
    | RunRetried
    | RunCancelled
    | RunResumed
)
