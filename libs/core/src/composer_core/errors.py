"""Errors raised by libs/core.

The hierarchy, so callers can catch at the depth they need::

    CoreError
    ├── DefinitionInvalid      a workflow definition failed validation (every problem listed)
    ├── TemplateError          a template failed to compile or evaluate
    │   └── TemplateBudgetExceeded  its evaluation did more work than a template may
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
    """An evaluation took more steps or built more than a template may (templates/_budget.py).

    Its node fails like any other template error: the budget keeps one template
    from stalling the service that evaluates it.
    """


class EventRejected(CoreError):
    """The event cannot apply; nothing was decided."""


class InvalidRequest(EventRejected):
    """The event is malformed or names something the run or definition does not have."""


class RunFinished(EventRejected):
    """The run is already terminal and cannot take this event."""


class RunActive(EventRejected):
    """A retry was asked for while the run still has active tasks: cancel it first."""
