"""A workflow's flow control at the run level: how many of its runs of one key go at
once (``concurrency``) and which waiting run goes first (``priority``).

Both are read from the run's input (and config) at start, so they are templates
over ``input`` and ``config`` only: nothing else exists yet when a run starts.
They are compiled once with the version's DAG and rendered by the engine when it
starts a run (docs/architecture.md §4.13); the rendered values are what the
admission of runs stores and counts (slots held, runs waiting).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from composer_core.errors import TemplateError
from composer_core.templates import CompiledValue, ExpressionEngine, Json

#: Priorities go from 1 (first) to 5; a run that names none has the middle one.
HIGHEST_PRIORITY = 1
LOWEST_PRIORITY = 5
DEFAULT_PRIORITY = 3
#: A run key is stored and shown: longer ones are refused at start.
MAX_KEY_LENGTH = 256
#: The roots a run-level template may read: the run has no tasks yet.
FLOW_ROOTS = frozenset({"input", "config"})


class Strategy(StrEnum):
    """What a start over its key's limit does (docs/architecture.md §4.13)."""

    #: It waits (PENDING) and starts when a slot of its key frees.
    QUEUE = "queue"
    #: It ends CANCELLED at once, its error naming the key.
    CANCEL_NEWEST = "cancel_newest"
    #: The oldest running run of the key is cancelled and the new one takes its slot.
    CANCEL_IN_PROGRESS = "cancel_in_progress"


@dataclass(frozen=True, slots=True)
class RunLimit:
    """A started run's key, as rendered from its input, and that key's limit."""

    key: str
    max_runs: int
    strategy: Strategy


@dataclass(frozen=True, slots=True)
class RunFlow:
    """What flow control says of one run: its limit (None: the workflow has none) and
    its priority."""

    limit: RunLimit | None
    priority: int


class FlowError(ValueError):
    """A run's key, limit or priority could not be rendered from its input: the start
    is refused (400) with this message."""


@dataclass(frozen=True, slots=True)
class CompiledFlow:
    """A version's ``concurrency`` and ``priority``, compiled."""

    #: None: one key for the whole workflow.
    key: CompiledValue | None
    #: None: the workflow has no ``concurrency``.
    max_runs: CompiledValue | None
    strategy: Strategy
    #: None: every run has the default priority.
    priority: CompiledValue | None

    def render(self, engine: ExpressionEngine, input: Json, config: Json) -> RunFlow:
        """The run's limit and priority from its input; FlowError naming the field."""
        activation: Mapping[str, object] = {
            "input": engine.to_native(input if input is not None else {}),
            "config": engine.to_native(config if config is not None else {}),
        }
        priority = DEFAULT_PRIORITY
        if self.priority is not None:
            priority = _whole(
                _evaluate(self.priority, activation, "priority"),
                "priority",
                HIGHEST_PRIORITY,
                LOWEST_PRIORITY,
            )
        if self.max_runs is None:
            return RunFlow(None, priority)
        key = ""
        if self.key is not None:
            rendered = _evaluate(self.key, activation, "concurrency.key")
            if isinstance(rendered, bool) or not isinstance(rendered, (str, int, float)):
                raise FlowError(
                    f"concurrency.key must render to a string or a number, not {rendered!r}"
                )
            key = str(rendered)
            if not key:
                raise FlowError("concurrency.key rendered empty: give the run an input it names")
            if len(key) > MAX_KEY_LENGTH:
                raise FlowError(
                    f"concurrency.key rendered {len(key)} characters; the limit is {MAX_KEY_LENGTH}"
                )
        max_runs = _whole(
            _evaluate(self.max_runs, activation, "concurrency.max_runs"),
            "concurrency.max_runs",
            1,
            None,
        )
        return RunFlow(RunLimit(key, max_runs, self.strategy), priority)


def _evaluate(value: CompiledValue, activation: Mapping[str, object], field: str) -> Json:
    try:
        return value.evaluate(activation)
    except TemplateError as exc:
        raise FlowError(f"{field} could not be rendered from the run's input: {exc}") from exc


def _whole(value: Any, field: str, low: int, high: int | None) -> int:
    """``value`` as a whole number in [low, high]; a numeric string counts (templates
    render text)."""
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and value.strip().lstrip("-").isdigit():
        number = int(value.strip())
    bounds = f"from {low} to {high}" if high is not None else f"of at least {low}"
    if number is None or number < low or (high is not None and number > high):
        raise FlowError(f"{field} must be a whole number {bounds}, not {value!r}")
    return number
