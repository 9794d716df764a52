"""The workflow definition format (docs/architecture.md §8) as pydantic models.

These models check shape only (types, unknown keys). Graph rules, per-type
spec rules and templates are checked by ``_validate`` so that every problem
can be reported at once, with its path.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from composer_core.model._limits import MAX_SECONDS
from composer_core.model._states import NodeType


class _Strict(BaseModel):
    # No inf or NaN: a delay or timeout of inf cannot become a time.
    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, allow_inf_nan=False
    )


class RetryPolicy(_Strict):
    """How a failed worker attempt is retried. Defaults: docs/architecture.md §8."""

    max_attempts: int = Field(default=3, ge=1, le=1000)
    initial_seconds: float = Field(default=1.0, ge=0, le=MAX_SECONDS)
    multiplier: float = Field(default=2.0, ge=1)
    max_seconds: float = Field(default=300.0, ge=0, le=MAX_SECONDS)

    def delay(self, attempt: int) -> float:
        """Seconds to wait before ``attempt`` (0-based; attempt 0 runs at once).

        Exponential with no jitter: the core has no randomness to draw from,
        and dispatches are spread by the outbox and the workers anyway.
        """
        if attempt <= 0 or self.initial_seconds == 0:
            return 0.0
        try:
            raw = self.initial_seconds * self.multiplier ** (attempt - 1)
        except OverflowError:
            return self.max_seconds
        return float(min(raw, self.max_seconds))


DEFAULT_RETRY = RetryPolicy()


class Node(_Strict):
    id: str
    type: NodeType
    name: str | None = None
    description: str | None = None
    spec: dict[str, Any] = Field(default_factory=dict)
    queue: str | None = None
    timeout_seconds: float | None = Field(default=None, gt=0, le=MAX_SECONDS)
    retry: RetryPolicy | None = None

    @property
    def retry_policy(self) -> RetryPolicy:
        return self.retry or DEFAULT_RETRY


class Edge(_Strict):
    source: str = Field(alias="from")
    target: str = Field(alias="to")
    condition: str | None = None


class WorkflowSpec(_Strict):
    """One version of a workflow as the user wrote it."""

    id: str
    name: str | None = None
    description: str | None = None
    start: str | None = None
    webhook_url: str | None = None
    output: Any = None
    #: Whether tokens with the viewer role see this workflow's payloads in the API:
    #: run input, config, output and error, task input, output and error, signal
    #: payloads. Off by default: they are redacted for viewers (operators and admins
    #: always see them).
    viewers_see_payloads: StrictBool = False
    nodes: list[Node]
    edges: list[Edge] = Field(default_factory=list)
