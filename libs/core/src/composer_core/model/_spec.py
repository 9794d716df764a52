"""The workflow definition format (docs/architecture.md §8) as pydantic models.

These models check shape only (types, unknown keys). Graph rules, per-type
spec rules and templates are checked by ``_validate`` so that every problem
can be reported at once, with its path.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from composer_core.kinds import NodeType
from composer_core.model._limits import MAX_SECONDS
from composer_core.schedules import ScheduleSpec

#: What the API and the logs show in place of a webhook_url's ``user:password``.
HIDDEN_CREDENTIALS = "***"
#: A URL's scheme and, up to the last '@' before its path, query or fragment, its userinfo.
_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)([^/?#]*)@")


def credentials_of(url: str) -> str | None:
    """The ``user:password`` part of ``url`` (None when it has none), as written."""
    match = _USERINFO.match(url)
    return match.group(2) if match else None


def hide_credentials(url: str) -> str:
    """``url`` as the API and the logs show it: its ``user:password@`` (whatever holds
    a token: the user part alone may) replaced by ``***@``. The stored definition keeps
    them; the outbox-enqueuer sends them."""
    return _USERINFO.sub(lambda m: f"{m.group(1)}{HIDDEN_CREDENTIALS}@", url, count=1)


class _Strict(BaseModel):
    # No inf or NaN: a delay or timeout of inf cannot become a time.
    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, allow_inf_nan=False
    )


class RetryPolicy(_Strict):
    """How a failed worker attempt is retried. Defaults: docs/architecture.md §8."""

    max_attempts: int = Field(
        default=3, ge=1, le=1000, description="attempts in all, the first included"
    )
    initial_seconds: float = Field(
        default=1.0, ge=0, le=MAX_SECONDS, description="the delay before the second attempt"
    )
    multiplier: float = Field(
        default=2.0, ge=1, description="each further delay is the previous one times this"
    )
    max_seconds: float = Field(
        default=300.0,
        ge=0,
        le=MAX_SECONDS,
        description="no delay is longer (at least initial_seconds)",
    )

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


class NodeConcurrency(_Strict):
    """How many attempts of a worker node go at once (docs/architecture.md §4.12)."""

    key: str = Field(
        description="a name: letters, digits, '_', '-' or '.', at most 128 characters; "
        "nodes naming the same key share its limit (within the workflow, or across "
        "workflows with scope global). Or a {{ template }} (over input, config, tasks; "
        "a MAP's inner node: item and index too), rendered when each task is created "
        "to a string or number of at most 128 characters: each rendered key has the "
        "node's max"
    )
    max: int = Field(
        ge=1, description="attempts of the key with a worker or on their way to one, at most"
    )
    scope: Literal["workflow", "global"] = Field(
        default="workflow",
        description="workflow: the key is this workflow's own; global: shared by name by "
        "every workflow that names it (each node's max applies as its tasks ask)",
    )


class NodeRateLimit(_Strict):
    """How many attempts of the nodes naming a key start per period: a token bucket
    (docs/architecture.md §4.12)."""

    key: str = Field(
        description="a name: letters, digits, '_', '-' or '.', at most 128 characters; "
        "shared by every node, of any workflow, that names it. Or a {{ template }} "
        "rendered when each task is created (as concurrency.key): each rendered key "
        "has a bucket of its own, made with the node's limit and per_seconds"
    )
    limit: int = Field(ge=1, description="tokens per period, and the bucket's size (its burst)")
    per_seconds: float = Field(gt=0, le=86400, description="the period, in seconds")
    units: int = Field(default=1, ge=1, description="tokens one attempt takes")


class Node(_Strict):
    """One step of a workflow; what ``spec`` takes depends on ``type`` (docs/nodes.md)."""

    id: str = Field(
        description="unique in the workflow: letters, digits and '_', not starting with a "
        "digit (so that tasks.<id> reads in an expression)"
    )
    type: NodeType = Field(description="what the node does")
    name: str | None = Field(default=None, description="a label for people")
    description: str | None = Field(default=None, description="free text for people")
    spec: dict[str, Any] = Field(
        default_factory=dict,
        description="the type's settings (docs/nodes.md); values may be {{ templates }}",
    )
    queue: str | None = Field(
        default=None,
        description="HTTP, PYTHON, TASK: the queue its task goes to (required for TASK; "
        "HTTP and PYTHON default to http and python, which are reserved for them: a TASK "
        "node names a queue of its own)",
    )
    timeout_seconds: float | None = Field(
        default=None,
        gt=0,
        le=MAX_SECONDS,
        description="HTTP, PYTHON, TASK: how long one attempt may run (default: the "
        "worker's, 300 s for the built-in ones)",
    )
    retry: RetryPolicy | None = Field(
        default=None,
        description="HTTP, PYTHON, TASK: how a failed attempt is retried (default: 3 "
        "attempts, 1 s, times 2, at most 300 s)",
    )
    concurrency: NodeConcurrency | None = Field(
        default=None,
        description="HTTP, PYTHON, TASK: at most `max` attempts of its key with a worker "
        "or on their way to one; the others wait PENDING, oldest first",
    )
    rate_limit: NodeRateLimit | None = Field(
        default=None,
        description="HTTP, PYTHON, TASK: each attempt takes `units` tokens of its key's "
        "bucket (`limit` per `per_seconds`, burst `limit`); without them it waits "
        "PENDING, in order, never dropped, holding no concurrency place",
    )

    @property
    def retry_policy(self) -> RetryPolicy:
        return self.retry or DEFAULT_RETRY


class Edge(_Strict):
    source: str = Field(alias="from", description="the node the edge leaves")
    target: str = Field(alias="to", description="the node it leads to")
    condition: str | None = Field(
        default=None,
        description="only out of a SWITCH: a {{ expression }}; the edge is taken when it "
        "is true (Python truth). No condition: always taken",
    )


class RunConcurrency(_Strict):
    """How many runs of this workflow go at once, per key (docs/architecture.md §4.13)."""

    key: str | None = Field(
        default=None,
        description="a template over input and config naming the run's key, e.g. "
        '"{{input.customer}}"; without it, one key for the whole workflow',
    )
    max_runs: int | str = Field(
        description="how many runs of one key may be started and not finished at once "
        "(waits included): a whole number of at least 1, or a template over input and "
        "config, e.g. \"{{input.tier == 'premium' ? 10 : 1}}\""
    )
    strategy: Literal["queue", "cancel_newest", "cancel_in_progress"] = Field(
        default="queue",
        description="a start over the limit: queue (waits PENDING, starts when a slot "
        "frees: by priority, then first come), cancel_newest (ends CANCELLED at once) or "
        "cancel_in_progress (the oldest running run of the key is cancelled and the new "
        "one takes its slot)",
    )


class WorkflowSpec(_Strict):
    """One version of a workflow as the user wrote it."""

    id: str = Field(
        description="stable across versions: letters, digits, '_', '-' or '.', starting "
        "with a letter or digit, at most 64 characters"
    )
    name: str | None = Field(default=None, description="a label for people")
    description: str | None = Field(default=None, description="free text for people")
    start: str | None = Field(
        default=None, description="the node to start at; default: the one node no edge enters"
    )
    webhook_url: str | None = Field(
        default=None,
        description="an http(s) URL that gets a POST (signed when COMPOSER_WEBHOOK_SECRET is "
        "set) when a run finishes. A user:password@ in it is sent (Basic auth) but never "
        "shown: the API answers and the logs have ***@ in its place",
    )
    output: Any = Field(
        default=None,
        description="the run's output: any JSON value, its {{ templates }} resolved when "
        "the run succeeds",
    )
    viewers_see_payloads: StrictBool = Field(
        default=False,
        description="whether tokens with the viewer role see this workflow's payloads in "
        "the API (run input, config, output and error, task input, output and error, "
        "signal payloads); off: they are redacted for viewers (operators and admins always "
        "see them)",
    )
    input_schema: dict[str, Any] | StrictBool | None = Field(
        default=None,
        description="a JSON Schema (2020-12) the run input must match: checked as a schema "
        "when the definition is published, applied when a run starts (a start whose input "
        "fails it answers 400 input-invalid, listing every problem at its JSON path). "
        "`$ref` points inside the schema only (nothing is fetched); `format` is an "
        "annotation, not checked. None: any input",
    )
    schedules: list[ScheduleSpec] = Field(
        default_factory=list,
        description="schedules that start runs of this workflow (docs/architecture.md §6.8): "
        "written when a version is deployed, removed when a deployed version no longer "
        "lists them",
    )
    concurrency: RunConcurrency | None = Field(
        default=None,
        description="a limit on the runs of this workflow going at once, per key; None: no limit",
    )
    priority: int | str | None = Field(
        default=None,
        description="1 (first) to 5, or a template over input and config: which of this "
        "workflow's waiting runs goes first when a slot frees (a waiting run gains one "
        "level per minute waited). None: 3",
    )
    nodes: list[Node] = Field(description="at least one")
    edges: list[Edge] = Field(
        default_factory=list, description="from one node to another; the graph is acyclic"
    )
