"""Errors raised by libs/core.

The hierarchy, so callers can catch at the depth they need::

    CoreError
    ├── DefinitionInvalid      a workflow definition failed validation (every problem listed)
    ├── TemplateError          a template failed to compile or evaluate
    │   ├── TemplateBudgetExceeded  the event's templates did more work than they may
    │   └── InputTooLarge      a node's input rendered past the node input limit
    ├── WorkPaused             a decision passed its budget's pause mark (no failure:
    │                          the caller decides the event again, elsewhere)
    └── EventRejected          the event cannot apply to this run; retrying gives the same answer
        ├── InvalidRequest     malformed event, unknown node, …        (API: 400)
        ├── RunFinished        the run is terminal                     (API: 409)
        └── RunActive          a retry while tasks are still in flight (API: 409)

A workflow-level failure (a task failed, a condition could not be evaluated)
is never an exception: the machine records it as an action.
"""

from __future__ import annotations

from dataclasses import dataclass


class CoreError(Exception):
    """Base of every error libs/core raises."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One validation problem, with a path into the definition (``nodes[2].spec.url``)."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class DefinitionInvalid(CoreError):
    """A definition failed validation; ``problems`` holds every problem found."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(
            f"workflow definition is invalid ({len(self.problems)} problem(s)):\n{lines}"
        )


class TemplateError(CoreError):
    """A template could not be compiled or evaluated; the message says which and why."""


class TemplateBudgetExceeded(TemplateError):
    """The templates of one event took more steps, built more or held more than they may
    (templates/_budget.py).

    The node whose template ran past the budget fails like on any other template
    error, and so does every later one that needs more: the budget keeps one event
    from stalling the service that decides it.
    """


class InputTooLarge(TemplateError):
    """A node's input, as it was rendered, is larger than the node input limit.

    ``size`` is its size in bytes of compact UTF-8 JSON when ``exact``; otherwise
    rendering stopped as soon as it was certain to be over, and the input is at
    least that large.
    """

    def __init__(self, size: int, limit: int, *, exact: bool) -> None:
        self.size, self.limit, self.exact = size, limit, exact
        what = "is" if exact else "is at least"
        super().__init__(f"the input {what} {size} bytes, over the limit of {limit} bytes")


class WorkPaused(CoreError):
    """Templates passed the pause mark of their budget (templates/_budget.py).

    Not a failure and not a TemplateError, so nothing in the machine catches it: it
    unwinds the whole decision, which changed nothing, and the caller decides the
    event again from the start on a budget without a mark (the engine: off its
    event loop).
    """


class EventRejected(CoreError):
    """The event cannot apply; nothing was decided."""


class InvalidRequest(EventRejected):
    """The event is malformed or names something the run or definition does not have."""


class RunFinished(EventRejected):
    """The run is already terminal and cannot take this event."""


class RunActive(EventRejected):
    """A retry was asked for while the run still has active tasks: cancel it first."""
