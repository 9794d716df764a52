"""Request and response bodies of the REST API (docs/architecture.md §9).

The same models validate requests, serialize answers and become the
OpenAPI document's schemas, so the spec cannot drift from the code.
Requests forbid unknown fields: a misspelt ``idempotency_kye`` must be an
error, not a silently non-idempotent start.

Payloads are redacted for the viewer role (``redacted: true``, each payload
field null) unless the run's workflow sets ``viewers_see_payloads: true``:
``REDACTION`` says which fields, and the OpenAPI document repeats it.
"""

from __future__ import annotations

import datetime as dt
import inspect
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, create_model

from composer_core.kinds import KINDS, Category, NodeKind, NodeType
from composer_core.model import Node, RunStatus, TaskState, WorkflowSpec
from composer_core.schedules import Overlap, ScheduleSpec
from composer_engine import HISTORY_KINDS

#: Any JSON value (inputs, outputs, payloads).
JsonValue = Any

REDACTION = (
    "true: this answer went to a viewer token and the workflow does not set "
    "viewers_see_payloads, so its payload fields ({fields}) are null whatever they hold"
)


def _redacted(fields: str) -> Any:
    return Field(default=False, description=REDACTION.format(fields=fields))


class Request(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class Response(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- definitions ---------------------------------------------------------------


class DefinitionCreated(Response):
    id: str
    version: int
    name: str
    deployed: bool
    unchanged: bool = Field(
        default=False,
        description="true: the newest version already held this definition; no version "
        "was stored and `version` is that one",
    )


class WorkflowSummary(Response):
    id: str
    name: str
    latest_version: int
    deployed_version: int | None
    created_at: dt.datetime
    updated_at: dt.datetime


class WorkflowList(Response):
    workflows: list[WorkflowSummary]


class VersionSummary(Response):
    version: int
    name: str
    webhook_url: str | None = Field(
        description="its user:password@, if any, shown to no one: ***@ stands in its place"
    )
    created_by: str | None = Field(description="the name of the API token that created it")
    deployed: bool
    deployed_at: dt.datetime | None
    created_at: dt.datetime


class WorkflowDetail(Response):
    id: str
    name: str
    latest_version: int
    deployed_version: int | None
    versions: list[VersionSummary]


class VersionDetail(Response):
    id: str
    version: int
    name: str
    webhook_url: str | None = Field(
        description="its user:password@, if any, shown to no one: ***@ stands in its place"
    )
    created_by: str | None = Field(description="the name of the API token that created it")
    deployed: bool
    deployed_at: dt.datetime | None
    created_at: dt.datetime
    spec: JsonValue = Field(
        description="the definition as submitted, as JSON (its webhook_url's "
        "user:password@ as ***@)"
    )


class WorkflowDeleted(Response):
    id: str
    deleted_versions: list[int]


# -- runs ----------------------------------------------------------------------


class StartRun(Request):
    workflow_id: str = Field(min_length=1, max_length=64)
    version: int | None = Field(
        default=None, ge=1, description="a version number; default: the deployed version"
    )
    input: JsonValue = None
    config: JsonValue = None
    run_id: str | None = Field(
        default=None,
        max_length=64,
        description="a client-chosen UUIDv7 from the last 24 h; a run id in use answers 409",
    )
    idempotency_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="a repeated key answers 200 with the run it started, changing nothing; "
        "the same key with a different input, config or version answers 409",
    )
    start_node: str | None = Field(default=None, min_length=1, max_length=64)
    context: dict[str, JsonValue] | None = Field(
        default=None,
        description="request metadata of your choosing (a JSON object, at most "
        "COMPOSER_MAX_CONTEXT_BYTES as JSON), kept with the run beside who started it "
        "and handed to its TASK handlers as ctx.caller.metadata",
    )
    labels: dict[str, str] | None = Field(
        default=None,
        description="labels for finding the run (`GET /v1/runs?label=key:value`): at most "
        "16, keys a letter or digit then letters, digits, `_ . - /` (63 at most), values "
        "text of at most 256 characters. Stored and shown in plain text even when the "
        "run's payloads are sealed: never put secrets in them",
    )


class RunStarted(Response):
    run_id: str
    status: RunStatus
    created: bool = Field(description="false when an earlier start with the key is returned")


class MapProgress(Response):
    """A MAP node's items: how many, how many finished, and how many in each state
    (list them at GET /v1/runs/{run_id}/tasks/{node_id}/items)."""

    total: int = Field(description="the items of its list")
    finished: int = Field(description="items COMPLETED, FAILED or CANCELLED")
    counts: dict[str, int] = Field(
        description="items by state (PENDING: waiting for a place among max_parallel or "
        "for a worker; QUEUED, RUNNING, COMPLETED, FAILED, CANCELLED); a state no item is "
        "in is left out"
    )


class Task(Response):
    task_id: str
    node_id: str
    type: NodeType
    state: TaskState
    attempt: int = Field(
        description="the current attempt, counted from 0 (as workers' leases count it); "
        'people are shown attempt + 1, as in "attempt 2 of 3" (the CLI and the UI)'
    )
    max_attempts: int | None = Field(
        default=None,
        description="the attempts the node's retry policy allows (worker nodes; null for "
        "the others)",
    )
    input: JsonValue = None
    output: JsonValue = None
    error: str | None = None
    error_code: str | None = None
    queue: str | None = None
    branches: list[str] | None = Field(
        default=None, description="SWITCH: the successors its conditions selected"
    )
    wake_at: dt.datetime | None = None
    awaited_signal: str | None = None
    created_at: dt.datetime
    updated_at: dt.datetime
    started_at: dt.datetime | None = None
    finished_at: dt.datetime | None = None
    redacted: bool = _redacted("input, output, error")
    waiting_hint: str | None = Field(
        default=None,
        description="PENDING or QUEUED: why it waits — held by the admission step (its "
        "queue at its COMPOSER_QUEUE_CONCURRENCY limit), or no live worker serves its queue "
        "(none seen within COMPOSER_WORKER_LIVE_SECONDS): since when, and what to do",
    )
    item: int | None = Field(
        default=None, description="a MAP node's item task: its index in the list, from 0"
    )
    items: MapProgress | None = Field(
        default=None, description="a MAP node's own task: its items' progress"
    )


class Signal(Response):
    """A signal sent to the run: buffered until a node took it, or taken as it arrived."""

    signal_id: str
    name: str
    payload: JsonValue = None
    sent_by: str | None = Field(default=None, description="the name of the API token that sent it")
    created_at: dt.datetime
    consumed_at: dt.datetime | None = None
    consumed_by: str | None = Field(
        default=None, description="the WAIT_FOR_EVENT node that took it; null: still buffered"
    )
    redacted: bool = _redacted("payload")


class Caller(Response):
    name: str = Field(description="the name of the API token")
    role: str = Field(description="admin, operator or viewer")


class CallingContext(Response):
    """Who started the run and the request metadata they passed (StartRun.context)."""

    caller: Caller
    metadata: dict[str, JsonValue] = Field(default_factory=dict)


class RunParent(Response):
    """The node attempt of another run that started this one (a SUB_WORKFLOW's)."""

    run_id: str
    node_id: str
    task_id: str
    attempt: int = Field(description="0-based: the parent node's attempt that started it")


class RunChild(Response):
    """A run one of this run's nodes started (a SUB_WORKFLOW's child), oldest first."""

    run_id: str
    workflow_id: str
    version: int
    status: RunStatus
    node_id: str = Field(description="the node that started it")
    attempt: int = Field(description="0-based: that node's attempt (a retry starts a new child)")
    on_parent_cancel: str = Field(description="cancel or abandon (docs/nodes.md SUB_WORKFLOW)")
    created_at: dt.datetime
    completed_at: dt.datetime | None = None


class Run(Response):
    run_id: str
    workflow_id: str
    version: int
    status: RunStatus = Field(
        description="PENDING, RUNNING and PAUSED are not finished; SUCCEEDED, FAILED and "
        "CANCELLED are (terminal). Test for the terminal ones: a run that is not RUNNING "
        "may be PAUSED, and goes on when it is resumed."
    )
    input: JsonValue = None
    config: JsonValue = None
    output: JsonValue = None
    error: str | None = None
    idempotency_key: str | None = None
    created_at: dt.datetime
    updated_at: dt.datetime
    completed_at: dt.datetime | None = None
    started_by: str | None = Field(
        default=None, description="the name of the API token that started the run"
    )
    cancelled_by: str | None = Field(
        default=None, description="the name of the API token that cancelled it"
    )
    retried_by: str | None = Field(
        default=None, description="the name of the API token that last retried it"
    )
    context: CallingContext | None = Field(
        default=None,
        description="the calling context of the start; null when it has none (or redacted)",
    )
    labels: dict[str, str] = Field(
        default_factory=dict,
        description="the labels its start gave it; plain text, never sealed nor redacted",
    )
    redacted: bool = _redacted("input, config, output, error, context")
    waiting_hint: str | None = Field(
        default=None,
        description="why a PENDING run has not started: it waits for a slot of its "
        "workflow's concurrency key (the key, the slots taken, how many runs go before it); "
        "or that a PAUSED run waits for its resume",
    )
    tasks: list[Task]
    signals: list[Signal] = Field(
        default_factory=list, description="every signal sent to the run, oldest first"
    )
    parent: RunParent | None = Field(
        default=None, description="the SUB_WORKFLOW node attempt that started it; null: none"
    )
    children: list[RunChild] = Field(
        default_factory=list,
        description="the runs its SUB_WORKFLOW nodes started, oldest first (at most 1,000)",
    )
    schedule_id: str | None = Field(
        default=None,
        description="the schedule that started it (GET /v1/schedules/{schedule_id}); null: "
        "none. Its started_by is then `schedule <id>`",
    )
    scheduled_for: dt.datetime | None = Field(
        default=None,
        description="the fire time it was started for (a trigger's: when it was triggered; "
        "a backfill's: the past fire time); null when no schedule started it",
    )


class RunSummary(Response):
    run_id: str
    workflow_id: str
    version: int
    status: RunStatus
    error: str | None = None
    idempotency_key: str | None = None
    created_at: dt.datetime
    updated_at: dt.datetime
    completed_at: dt.datetime | None = None
    started_by: str | None = Field(
        default=None, description="the name of the API token that started the run"
    )
    labels: dict[str, str] = Field(
        default_factory=dict,
        description="the labels its start gave it; plain text, never sealed nor redacted",
    )
    schedule_id: str | None = Field(
        default=None, description="the schedule that started it; null: none"
    )
    scheduled_for: dt.datetime | None = Field(
        default=None, description="the fire time a schedule started it for; null: none"
    )
    redacted: bool = _redacted("error")


class RunList(Response):
    runs: list[RunSummary]
    next_cursor: str | None = Field(
        description="pass as ?cursor= for the next page; absent on the last page"
    )


class RunListQuery(Request):
    workflow_id: str | None = Field(default=None, max_length=64)
    status: RunStatus | None = None
    label: list[str] = Field(
        default_factory=list,
        max_length=16,
        description="`key:value`; repeat it for several: a run must carry every one",
    )
    created_after: dt.datetime | None = None
    created_before: dt.datetime | None = None
    schedule_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="only the runs this schedule started (its fires, triggers and "
        "backfills); combines with status, created_after and created_before, not with "
        "workflow_id or label",
    )
    cursor: str | None = Field(default=None, max_length=200)
    limit: int = Field(default=50, ge=1, le=1000)


class RunFilterFields(Request):
    """The listing's filters (GET /v1/runs), as a bulk action's ``filter``."""

    workflow_id: str | None = Field(default=None, max_length=64)
    status: RunStatus | None = None
    label: list[str] = Field(
        default_factory=list,
        max_length=16,
        description="`key:value`; a run must carry every one",
    )
    created_after: dt.datetime | None = None
    created_before: dt.datetime | None = None


class BulkCancel(Request):
    filter: RunFilterFields | None = Field(
        default=None, description="the runs the listing would show with these parameters"
    )
    run_ids: list[str] | None = Field(
        default=None, min_length=1, max_length=1000, description="or the runs, by id"
    )
    reason: str = Field(default="", max_length=2000)


class BulkRetry(Request):
    filter: RunFilterFields | None = Field(
        default=None, description="the runs the listing would show with these parameters"
    )
    run_ids: list[str] | None = Field(
        default=None, min_length=1, max_length=1000, description="or the runs, by id"
    )
    from_node: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="the node to retry each run from; default: each run's first failed or "
        "cancelled node",
    )


class OperationStarted(Response):
    operation_id: str
    created: bool = Field(
        description="false when an earlier request with the Idempotency-Key is returned"
    )


class Operation(Response):
    operation_id: str
    action: Literal["cancel", "retry"]
    state: Literal["RUNNING", "DONE"]
    filter: dict[str, JsonValue] | None = Field(
        description="the filter it applies; null when the request named its runs"
    )
    collected: bool = Field(
        description="every matching run is counted in total (false: still finding them)"
    )
    total: int = Field(description="the runs it applies to (found so far, until collected)")
    done: int = Field(description="runs cancelled (or found cancelled) or retried")
    skipped: int = Field(
        description="runs with nothing to do: a cancel of a run that finished otherwise, a "
        "retry of a run still going or with no failed node"
    )
    failed: int = Field(description="runs it could not touch; last_error says why")
    last_error: str | None = None
    requested_by: str | None = None
    created_at: dt.datetime
    updated_at: dt.datetime
    finished_at: dt.datetime | None = None


class ResultQuery(Request):
    timeout: float = Field(
        default=30.0,
        ge=0,
        description="seconds to wait for the run to finish (cut to the server's maximum); "
        "202 with the run when it is still running",
    )


class DeployQuery(Request):
    deploy: bool = False


class SignalDelivered(Response):
    delivered: bool = Field(description="false: no node waits for it yet; it is buffered")


class CancelRun(Request):
    reason: str = Field(default="", max_length=2000)


class PauseRun(Request):
    reason: str = Field(
        default="", max_length=2000, description="why, kept in the run's history (run.paused)"
    )


class RetryRun(Request):
    from_node: str = Field(min_length=1, max_length=64)
    version: int | None = Field(
        default=None,
        ge=0,
        description="default: the run's version; 0: the deployed version; N: version N",
    )
    input: JsonValue = None
    config: JsonValue = None


# -- errors and health -----------------------------------------------------------


class DefinitionProblem(Response):
    path: str = Field(
        description="where: in a definition (422) e.g. nodes[3].spec.url; in a run input "
        "(400 input-invalid) a JSON path, e.g. $.lines[0].qty"
    )
    message: str


class Problem(BaseModel):
    """RFC 9457 problem details; more members may appear."""

    model_config = ConfigDict(extra="allow")

    type: str
    title: str
    status: int
    detail: str
    instance: str | None = None
    problems: list[DefinitionProblem] | None = Field(
        default=None,
        description="422 definition-invalid: every problem of the definition; 400 "
        "input-invalid: every problem of the run input against the version's input_schema",
    )


class Identity(Response):
    name: str = Field(description="the token's name (what audit fields record)")
    role: str = Field(description="admin, operator or viewer")


class Health(Response):
    status: str


# -- run history -------------------------------------------------------------------


class HistoryEntry(Response):
    seq: int = Field(description="orders a run's entries; increasing, with gaps")
    at: dt.datetime
    kind: str = Field(description=", ".join(HISTORY_KINDS))
    node_id: str | None = None
    task_id: str | None = None
    attempt: int | None = Field(
        default=None,
        description="the task's attempt, counted from 0 like a task's `attempt` (the CLI and "
        "the UI show it from 1), for attempt-scoped kinds",
    )
    actor: str | None = Field(
        default=None,
        description="who: the API token's name (start, signal, cancel, retry) or the worker "
        "(task.leased)",
    )
    detail: dict[str, JsonValue] | None = Field(
        default=None,
        description="what the kind records: an error and code, a reason, a queue, a start's "
        "input, a retry's version…",
    )
    duration_ms: float | None = Field(
        default=None,
        description="task.completed, task.failed, task.retry_scheduled: from the attempt's "
        "lease to this entry",
    )
    redacted: bool = _redacted("detail's input, config, error and reason")


class History(Response):
    run_id: str
    entries: list[HistoryEntry]
    next_cursor: str | None = Field(
        description="pass as ?cursor= for the next page; absent on the last page"
    )


class HistoryQuery(Request):
    cursor: str | None = Field(default=None, max_length=200)
    limit: int = Field(default=200, ge=1, le=1000)


# -- task logs -------------------------------------------------------------------


class MapItemsQuery(Request):
    start: int = Field(default=0, ge=0, description="the first item's index")
    limit: int = Field(default=100, ge=1, le=1000, description="at most this many items")


class MapItems(Response):
    """A page of a MAP node's item tasks, in item order."""

    run_id: str
    node_id: str
    items: list[Task]
    next_start: int | None = Field(
        default=None, description="pass as ?start= for the next page; null: no more"
    )
    redacted: bool = _redacted("input, output, error")


class TaskLogsQuery(Request):
    node: str | None = Field(
        default=None, min_length=1, max_length=200, description="only this node's attempts"
    )


class AttemptLog(Response):
    """What one worker attempt logged: a PYTHON node's printed lines, the records an SDK
    handler wrote through ctx.logger."""

    task_id: str
    node_id: str
    attempt: int
    lines: list[str] | None = Field(
        default=None,
        description="in the order written; when the worker's bound was reached, the last "
        'line is a marker ("… 123 lines truncated")',
    )
    truncated: int = Field(default=0, description="lines dropped past the worker's bound")
    created_at: dt.datetime = Field(description="when the attempt's report was stored")
    redacted: bool = _redacted("lines")


class RunLogs(Response):
    run_id: str
    logs: list[AttemptLog] = Field(
        description="one per reported attempt that logged anything, oldest report first; "
        "an attempt whose lease expired reported nothing and has none"
    )
    redacted: bool = _redacted("lines")


# -- the definition, typed per node type (the OpenAPI document) ------------------------


#: The types whose nodes take queue, timeout_seconds and retry ("HTTP, PYTHON and TASK").
_WORKERS = [t.value for t, k in KINDS.items() if k.category is Category.WORKER]
_WORKER_TYPES = " and ".join(filter(None, (", ".join(_WORKERS[:-1]), _WORKERS[-1])))


def _typed_node(node_type: NodeType, kind: NodeKind) -> type[Node]:
    """``Node`` with ``type`` fixed and ``spec`` as its kind's model (composer_core.kinds);
    ``queue`` required for a kind whose node names its own, and the worker-node fields
    null for the kinds no worker runs, as validation has them."""
    spec = kind.spec_model
    required = any(field.is_required() for field in spec.model_fields.values())
    fixed: Any = Literal[node_type]
    fields: dict[str, Any] = {
        "type": (fixed, Field()),
        "spec": (spec, Field() if required else Field(default_factory=spec)),
    }
    if kind.own_queue:
        queue = Node.model_fields["queue"]
        fields["queue"] = (str, Field(min_length=1, description=queue.description))
    elif kind.category is not Category.WORKER:
        for name in ("queue", "timeout_seconds", "retry"):
            if name == "retry" and kind.takes_retry:
                continue
            fields[name] = (
                None,
                Field(default=None, description=f"only {_WORKER_TYPES} take it, not {node_type}"),
            )
    return create_model(
        f"{node_type.title().replace('_', '')}Node",
        __base__=Node,
        __doc__=inspect.cleandoc(spec.__doc__ or f"A {node_type} node."),
        **fields,
    )


#: One model per node kind, for the document only: a definition is validated by
#: composer_core (every problem with its path), whose spec values may be templates.
TYPED_NODES: tuple[type[Node], ...] = tuple(
    _typed_node(node_type, kind) for node_type, kind in KINDS.items()
)

#: ``WorkflowSpec`` whose nodes are ``oneOf`` the typed nodes, discriminated by ``type``:
#: what the OpenAPI document shows for a definition.
TypedWorkflowSpec: type[WorkflowSpec] = create_model(
    "WorkflowSpec",
    __base__=WorkflowSpec,
    __doc__=WorkflowSpec.__doc__,
    nodes=(list[Annotated[Union[TYPED_NODES], Field(discriminator="type")]], Field()),  # type: ignore[valid-type]  # noqa: UP007
)
WorkerStatus = Literal["SERVING", "DRAINING", "STOPPED", "LOST"]


class Worker(Response):
    """A worker process as its last heartbeat left it (GET /v1/workers)."""

    worker_id: str = Field(description="its lease owner and consumer name (WorkerConfig.owner)")
    host: str
    queues: list[str] = Field(description="the queues it has handlers for (and may serve)")
    status: WorkerStatus = Field(
        description="SERVING or DRAINING (stopping, finishing its tasks) while it beats; "
        "STOPPED: it stopped on purpose; LOST: no beat within COMPOSER_WORKER_LIVE_SECONDS"
    )
    live: bool = Field(description="SERVING or DRAINING: it beat within the threshold")
    concurrency: int = Field(description="tasks it runs at once, at most")
    in_flight: int = Field(description="tasks it held at its last beat")
    sdk_version: str
    started_at: dt.datetime
    last_seen_at: dt.datetime
    last_seen_seconds_ago: float
    stopped_at: dt.datetime | None = None


class Limit(Response):
    kind: Literal["run_concurrency", "node_concurrency", "rate_limit"] = Field(
        description="what it limits: run_concurrency, a workflow's runs per key (its "
        "`concurrency`); node_concurrency, the attempts of the worker nodes naming the "
        "key (a node's `concurrency`); rate_limit, the attempts started per period (a "
        "node's `rate_limit`, a token bucket)"
    )
    workflow_id: str | None = Field(
        description="the workflow whose key it is; null for a global node key and a rate limit"
    )
    key: str | None = Field(
        description='the key: for runs, rendered from run inputs ("" for a workflow '
        "with one key; null when redacted); for nodes and rate limits, the name they give, "
        "or what a templated key rendered for a task (shown to every caller)"
    )
    in_use: int = Field(
        description="runs of the key started and not finished; for a node key, attempts "
        "with a worker or on their way to one; for a rate limit, the tokens taken (the "
        "limit less those left)"
    )
    limit: int | None = Field(
        description="the deployed definition's max_runs, the nodes' max, or the rate "
        "limit's tokens per period; null when max_runs is a template and no run waits"
    )
    waiting: int = Field(description="runs (or attempts) of the key waiting for a place")
    redacted: bool = _redacted("key")
    tokens: float | None = Field(
        default=None, description="a rate limit's tokens in its bucket now; null for the others"
    )
    per_seconds: float | None = Field(default=None, description="a rate limit's period")
    set_by: str | None = Field(
        default=None,
        description="who set a rate limit through PUT /v1/limits/{key} (null: the "
        "definitions' values apply)",
    )


class SetRateLimit(Request):
    limit: int = Field(ge=1, description="tokens per period, and the bucket's size")
    per_seconds: float = Field(gt=0, le=86400, description="the period, in seconds")


class LimitList(Response):
    limits: list[Limit] = Field(
        description="every key with runs going or waiting, by workflow then key"
    )


class WorkerList(Response):
    workers: list[Worker] = Field(
        description="the live ones first, then the rest, each most recently seen first; "
        "workers unseen for a day are forgotten"
    )
    live_seconds: float = Field(
        description="COMPOSER_WORKER_LIVE_SECONDS: a worker not seen for longer is LOST"
    )


# -- schedules -----------------------------------------------------------------------

_SCHEDULE_INPUT = (
    "the input of every run it starts; stored in plain text, never sealed (whatever "
    "COMPOSER_ENCRYPTION_KEYS says): put no secrets in it"
)


class NewSchedule(ScheduleSpec):
    """A schedule to store: the fields of a definition's ``schedules:`` entry
    (docs/nodes.md, ScheduleSpec), and the workflow whose runs it starts."""

    workflow_id: str = Field(
        min_length=1,
        max_length=64,
        description="the workflow it starts runs of (its deployed version at each fire)",
    )


class ScheduleEventView(Response):
    """One thing that happened to a schedule."""

    kind: str = Field(
        description="created, deployed (written by a definition), paused, resumed, fired "
        "(a fire started its run), triggered, skipped (the overlap policy held a fire back), "
        "buffered (kept for the last run's end), missed (fires older than the catch-up "
        "window, not started), failed (the run could not start), backfill"
    )
    at: dt.datetime = Field(description="when it was recorded")
    scheduled_for: dt.datetime | None = Field(
        default=None, description="the fire time it concerns (missed: the first one)"
    )
    run_id: str | None = Field(default=None, description="the run it started, if any")
    detail: str | None = None
    actor: str | None = Field(
        default=None, description="the API token that did it (pause, resume, trigger…)"
    )


class BackfillView(Response):
    """A backfill: the schedule's fire times over [start, end], started in the background."""

    id: str
    start: dt.datetime
    end: dt.datetime
    overlap: Literal["allow_all", "skip", "buffer_all"]
    total: int = Field(description="the fire times in the range")
    started: int = Field(description="runs started (or found started) so far")
    skipped: int = Field(description="fire times skipped (overlap skip, or a refused start)")
    done: bool = Field(description="every fire time of the range is handled")
    last_run_id: str | None = None
    requested_by: str | None = None
    created_at: dt.datetime
    finished_at: dt.datetime | None = None


class Schedule(Response):
    """A schedule: its spec, where it came from, when it fires next and what it did."""

    id: str
    workflow_id: str
    source: Literal["definition", "api"] = Field(
        description="definition: a deployed version's `schedules:` wrote it (deploy a "
        "version without it to remove it); api: POST /v1/schedules"
    )
    paused: bool
    cron: str | None = None
    every_seconds: int | None = None
    timezone: str
    input: dict[str, JsonValue] | None = Field(
        default=None, description=_SCHEDULE_INPUT + "; null when redacted"
    )
    overlap: Overlap
    catchup_window_seconds: int
    jitter_seconds: int
    next_fire_at: dt.datetime | None = Field(
        description="its next fire time (before jitter); null while paused"
    )
    next_fires: list[dt.datetime] | None = Field(
        default=None,
        description="GET /v1/schedules/{schedule_id}: its next five fire times (empty "
        "while paused); absent from the listing",
    )
    last_run_id: str | None = Field(description="the run its last fire or trigger started")
    last_fired_for: dt.datetime | None = Field(description="the last fire time it handled")
    buffered_for: dt.datetime | None = Field(
        description="overlap buffer_one: the fire time that waits for the last run's end"
    )
    fired: int = Field(description="fires that started a run")
    skipped: int = Field(description="fires the overlap policy skipped (or whose start failed)")
    missed: int = Field(description="fires older than the catch-up window, not started")
    created_by: str | None = Field(
        description="the API token that created it; null for one a definition wrote"
    )
    created_at: dt.datetime
    updated_at: dt.datetime
    redacted: bool = _redacted("input")
    events: list[ScheduleEventView] | None = Field(
        default=None,
        description="GET /v1/schedules/{schedule_id}: its last 50 events, newest first",
    )
    backfills: list[BackfillView] | None = Field(
        default=None,
        description="GET /v1/schedules/{schedule_id}: its last 20 backfills, newest first",
    )


class ScheduleList(Response):
    schedules: list[Schedule] = Field(description="by id")


class ScheduleListQuery(Request):
    workflow_id: str | None = Field(
        default=None, max_length=64, description="only the schedules of this workflow"
    )


class ScheduleDeleted(Response):
    id: str
    deleted: bool = True


class TriggerSchedule(Request):
    overlap: Overlap | None = Field(
        default=None,
        description="the overlap policy for this fire; default: the schedule's own",
    )


class ScheduleTriggered(Response):
    schedule_id: str
    started: bool = Field(
        description="true: a run was started (or, with a repeated Idempotency-Key, found); "
        "false: the overlap policy held it back (its last run still goes)"
    )
    run_id: str | None = Field(description="the run; null when not started")
    detail: str = Field(description="what the overlap policy did, for a person")


class BackfillSchedule(Request):
    start: dt.datetime = Field(description="the first fire time to consider (with a time zone)")
    end: dt.datetime = Field(description="the last (with a time zone); at most 10,000 fires")
    overlap: Literal["allow_all", "skip", "buffer_all"] = Field(
        default="allow_all",
        description="allow_all: every fire time starts its run at once; skip: a fire time "
        "while the backfill's last run still goes is skipped; buffer_all: each waits for "
        "the one before to end",
    )
