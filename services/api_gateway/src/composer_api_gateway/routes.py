"""The route table: every route once, with what it takes, answers and needs.

The app registers handlers from it, the auth wrapper reads each route's
role from it, and the OpenAPI document and docs page are generated from it:
one place to add a route, and the spec cannot forget one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from aiohttp import web
from pydantic import BaseModel

from composer_api_gateway import (
    definitions,
    history,
    limits,
    operations,
    ops,
    runs,
    schedules,
    workers,
)
from composer_api_gateway.auth import Role
from composer_api_gateway.models import (
    BackfillSchedule,
    BackfillView,
    BulkCancel,
    BulkRetry,
    CancelRun,
    DefinitionCreated,
    DeployQuery,
    Health,
    History,
    HistoryQuery,
    Identity,
    Limit,
    LimitList,
    MapItems,
    MapItemsQuery,
    NewSchedule,
    Operation,
    OperationStarted,
    PauseRun,
    ResultQuery,
    RetryRun,
    Run,
    RunList,
    RunListQuery,
    RunLogs,
    RunStarted,
    Schedule,
    ScheduleDeleted,
    ScheduleList,
    ScheduleListQuery,
    ScheduleTriggered,
    SetRateLimit,
    SignalDelivered,
    StartRun,
    TaskLogsQuery,
    TriggerSchedule,
    VersionDetail,
    WorkerList,
    WorkflowDeleted,
    WorkflowDetail,
    WorkflowList,
)

#: What every answer with a schedule says about its input.
SCHEDULE_INPUT = (
    " A schedule's `input` is never sealed. For a viewer token it is null with "
    "`redacted: true`, unless its workflow's deployed version sets "
    "`viewers_see_payloads: true`."
)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
#: A model for a JSON object body, "definition" for YAML/JSON definitions, "payload" for any JSON.
Body = type[BaseModel] | Literal["definition", "payload"] | None
#: A model for a JSON answer, or a media type for another kind of answer.
Answer = type[BaseModel] | str

#: What every answer with run data says about the viewer role.
REDACTED = (
    " For a viewer token, payloads (run input, config, output, error and context; task "
    "input, output and error; signal payloads) are null with `redacted: true`, unless the "
    "run's workflow sets `viewers_see_payloads: true`."
)


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    path: str
    handler: Handler
    summary: str
    tag: str
    #: None: open to everyone (liveness, the spec, the docs).
    role: Role | None
    responses: Mapping[int, Answer]
    body: Body = None
    query: type[BaseModel] | None = None
    #: Error statuses this route answers besides 401/403 (which auth adds).
    errors: tuple[int, ...] = ()
    description: str = ""
    body_required: bool = field(default=True)
    #: aiohttp's pattern for ``path`` when it differs from the documented one (a
    #: parameter that may hold a '/': ``{key:.+}``).
    pattern: str | None = None


ROUTES: tuple[Route, ...] = (
    Route(
        "POST",
        "/v1/workflows",
        definitions.create,
        "Create the next version of a definition",
        "workflows",
        Role.ADMIN,
        {201: DefinitionCreated, 200: DefinitionCreated},
        body="definition",
        query=DeployQuery,
        errors=(400, 413, 415, 422, 503),
        description="The body is the definition as application/yaml or application/json. "
        "Every validation problem is listed in the 422 answer, each with its path. "
        "`?deploy=true` makes the new version the one new runs use. 201 for a new version; "
        "a definition that means the same as the newest version (compared after parsing, "
        "so layout, comments and spelt-out defaults do not count) stores nothing and "
        "answers 200 with that version and `unchanged: true` (deployed now with "
        "`?deploy=true`).",
    ),
    Route(
        "GET",
        "/v1/workflows",
        definitions.list_all,
        "List workflows",
        "workflows",
        Role.VIEWER,
        {200: WorkflowList},
        errors=(503,),
    ),
    Route(
        "GET",
        "/v1/workflows/{workflow_id}",
        definitions.show,
        "One workflow with its versions",
        "workflows",
        Role.VIEWER,
        {200: WorkflowDetail},
        errors=(404, 503),
    ),
    Route(
        "DELETE",
        "/v1/workflows/{workflow_id}",
        definitions.delete,
        "Soft-delete a workflow: no new runs; running ones finish",
        "workflows",
        Role.ADMIN,
        {200: WorkflowDeleted},
        errors=(404, 503),
    ),
    Route(
        "GET",
        "/v1/workflows/{workflow_id}/versions/{version}",
        definitions.show_version,
        "One version with its definition",
        "workflows",
        Role.VIEWER,
        {200: VersionDetail},
        errors=(404, 503),
    ),
    Route(
        "POST",
        "/v1/workflows/{workflow_id}/versions/{version}/deploy",
        definitions.deploy,
        "Make a version the one new runs use",
        "workflows",
        Role.ADMIN,
        {200: VersionDetail},
        errors=(400, 404, 503),
    ),
    Route(
        "POST",
        "/v1/runs",
        runs.start,
        "Start a run",
        "runs",
        Role.OPERATOR,
        {201: RunStarted, 200: RunStarted},
        body=StartRun,
        errors=(400, 404, 409, 413, 503),
        description="201 for a new run. A repeated idempotency_key answers 200 with the run "
        "it started and changes nothing; the same key with a different request (input, "
        "config or version) answers 409 `idempotency-key-reused`, naming the key and the "
        "run it started. A client run_id already in use answers 409. The "
        "run records the token's name (started_by); with `context`, your request metadata "
        "is kept beside it and handed to the run's TASK handlers (ctx.caller in the SDK). "
        "When the version has an `input_schema`, an input that fails it answers 400 "
        "`input-invalid` and starts nothing: `problems` lists every problem as "
        "`{path, message}`, the path a JSON path into the input (`$` is the input itself).",
    ),
    Route(
        "GET",
        "/v1/runs",
        runs.list_runs,
        "List runs, newest first",
        "runs",
        Role.VIEWER,
        {200: RunList},
        query=RunListQuery,
        errors=(400, 503),
        description="Pass the answer's next_cursor as ?cursor= for the next page. "
        "`?schedule_id=` lists the runs a schedule started (its fires, triggers and "
        "backfills); it combines with status and the creation times, not with workflow_id "
        "or label (400)." + REDACTED,
    ),
    # before /v1/runs/{run_id}/…: "bulk" is no run id
    Route(
        "POST",
        "/v1/runs/bulk/cancel",
        operations.bulk_cancel,
        "Cancel many runs, in the background",
        "runs",
        Role.OPERATOR,
        {202: OperationStarted, 200: OperationStarted},
        body=BulkCancel,
        errors=(400, 413, 503),
        description="Give `filter` (the listing's parameters: workflow_id, status, label, "
        "created_after, created_before; at least one) or `run_ids`. Answers 202 with an "
        "`operation_id` at once; the runs are cancelled in the background at a bounded rate "
        "(COMPOSER_OPERATIONS_RUNS_PER_SECOND), each once, surviving restarts; only runs that "
        "exist when it starts are touched. Progress: GET /v1/operations/{operation_id}. A run "
        "already cancelled counts as done, one that finished otherwise as skipped. With an "
        "Idempotency-Key header, a request sent again answers 200 with the first operation.",
        body_required=True,
    ),
    Route(
        "POST",
        "/v1/runs/bulk/retry",
        operations.bulk_retry,
        "Retry many finished runs, in the background",
        "runs",
        Role.OPERATOR,
        {202: OperationStarted, 200: OperationStarted},
        body=BulkRetry,
        errors=(400, 413, 503),
        description="As bulk cancel; each run is retried from `from_node`, or from its first "
        "failed or cancelled node. A run still going, or with no failed node, is skipped; "
        "a retried run is not retried again when the request is repeated with its "
        "Idempotency-Key.",
        body_required=True,
    ),
    Route(
        "GET",
        "/v1/operations/{operation_id}",
        operations.show,
        "A bulk action's progress",
        "runs",
        Role.VIEWER,
        {200: Operation},
        errors=(404, 503),
        description="`state` is RUNNING until every run is settled, then DONE; "
        "done + skipped + failed counts the runs settled, of `total`.",
    ),
    Route(
        "GET",
        "/v1/runs/{run_id}",
        runs.show,
        "One run with every task and signal",
        "runs",
        Role.VIEWER,
        {200: Run},
        errors=(400, 404, 503),
        description="With who started, cancelled and last retried it (started_by, "
        "cancelled_by, retried_by: the names of their API tokens) and who sent each "
        "signal (sent_by)." + REDACTED,
    ),
    Route(
        "GET",
        "/v1/runs/{run_id}/history",
        history.show,
        "What happened to a run, oldest first",
        "runs",
        Role.VIEWER,
        {200: History},
        query=HistoryQuery,
        errors=(400, 404, 503),
        description="Every applied event and its effects: the start (input, by whom), each "
        "task scheduled, dispatched, leased (by which worker), completed, failed (error, "
        "attempt), retried (when), timers, signals received and consumed, cancels (reason, "
        "by whom), retries from a node (from where, by whom, which version). Each attempt "
        "stays listed with its error and duration. Pass next_cursor as ?cursor= for the "
        "next page." + REDACTED,
    ),
    Route(
        "GET",
        "/v1/runs/{run_id}/result",
        runs.result,
        "Wait for a run to finish",
        "runs",
        Role.VIEWER,
        {200: Run, runs.STILL_RUNNING: Run},
        query=ResultQuery,
        errors=(400, 404, 503),
        description="Long-polls up to ?timeout= seconds. 200 with the run once it is "
        "terminal (SUCCEEDED, FAILED, CANCELLED: a PAUSED run is not); 202 with the run as "
        "it is now when the timeout passes first (ask again)." + REDACTED,
    ),
    Route(
        "POST",
        "/v1/runs/{run_id}/signals/{name}",
        runs.signal,
        "Send a signal to a run",
        "runs",
        Role.OPERATOR,
        {200: SignalDelivered},
        body="payload",
        errors=(400, 404, 409, 413, 422, 503),
        description="The body (any JSON, or empty) is the signal's payload. delivered=false: "
        "no node waits for it yet and it is buffered. A name no WAIT_FOR_EVENT node of the "
        "run's version waits for answers 422 `unknown-signal`, with the names it waits for "
        "(`declared`). A finished run answers 409. With an "
        "Idempotency-Key header, a request sent again (its answer lost) changes nothing and "
        "answers as the first did; the same key for another signal name answers 409.",
        body_required=False,
    ),
    Route(
        "POST",
        "/v1/runs/{run_id}/cancel",
        runs.cancel,
        "Cancel a run",
        "runs",
        Role.OPERATOR,
        {200: Run},
        body=CancelRun,
        errors=(400, 404, 409, 413, 503),
        description="A finished run answers 409.",
        body_required=False,
    ),
    Route(
        "POST",
        "/v1/runs/{run_id}/pause",
        runs.pause,
        "Pause a run",
        "runs",
        Role.OPERATOR,
        {200: Run},
        body=PauseRun,
        errors=(400, 404, 409, 413, 503),
        description="The run is PAUSED, which is not terminal: its attempts already with a "
        "worker finish and are recorded, but nothing new goes to a worker (their tasks stay "
        "PENDING with a `waiting_hint`), no timer fires and signals are kept; it does not "
        "finish by itself. POST /resume lets it go on; a cancel works while paused. A "
        "paused run answers as it is (a pause sent again changes nothing); a finished run "
        "answers 409. A paused run's child runs go on: pause each on its own.",
        body_required=False,
    ),
    Route(
        "POST",
        "/v1/runs/{run_id}/resume",
        runs.resume,
        "Resume a paused run",
        "runs",
        Role.OPERATOR,
        {200: Run},
        errors=(400, 404, 409, 503),
        description="The run is RUNNING again: the tasks held by the pause go to their "
        "workers (a retry's backoff still ahead is kept), timers that came due fire, each "
        "signal kept goes to the node that waits for it, and the run finishes if nothing "
        "is left. A running run answers as it is; a finished run answers 409.",
    ),
    Route(
        "POST",
        "/v1/runs/{run_id}/retry",
        runs.retry,
        "Retry a finished run from a node",
        "runs",
        Role.OPERATOR,
        {200: Run},
        body=RetryRun,
        errors=(400, 404, 409, 413, 503),
        description="The node and everything after it run again. A run with active tasks "
        "answers 409. A new `input` is held to the version's `input_schema` as a start's is "
        "(400 `input-invalid` with `problems`).",
    ),
    Route(
        "GET",
        "/v1/runs/{run_id}/tasks/{node_id}/items",
        runs.map_items,
        "The item tasks of a MAP node",
        "runs",
        Role.VIEWER,
        {200: MapItems},
        query=MapItemsQuery,
        errors=(400, 404, 503),
        description="A page of a MAP node's items in item order, each a task as the run "
        "shows its own (attempts, error, times); the MAP's own task in GET /v1/runs/{run_id} "
        "carries `items` (total, finished, counts by state). Pass next_start as ?start= for "
        "the next page. 404 when the run has no MAP node of that id that started." + REDACTED,
    ),
    Route(
        "GET",
        "/v1/runs/{run_id}/logs",
        runs.logs,
        "What the run's task attempts logged",
        "runs",
        Role.VIEWER,
        {200: RunLogs},
        query=TaskLogsQuery,
        errors=(400, 404, 503),
        description="Per attempt, failed ones included: the lines a PYTHON node printed "
        "and the records an SDK handler wrote through ctx.logger, bounded by the worker "
        "(COMPOSER_TASK_LOG_MAX_BYTES, COMPOSER_TASK_LOG_MAX_LINES; past them, a last "
        "marker line counts what was dropped). `?node=` keeps one node's attempts. For a "
        "viewer token the lines are null with `redacted: true`, unless the run's workflow "
        "sets `viewers_see_payloads: true`.",
    ),
    Route(
        "POST",
        "/v1/schedules",
        schedules.create,
        "Create a schedule",
        "schedules",
        Role.OPERATOR,
        {201: Schedule},
        body=NewSchedule,
        errors=(400, 404, 409, 413, 503),
        description="The fields of a definition's `schedules:` entry (docs/nodes.md, "
        "ScheduleSpec) and `workflow_id`, the workflow whose deployed version each fire "
        "starts (404 when it has none). Every problem (a cron expression or a time zone "
        "that does not parse, both or neither of cron and every_seconds) answers 400 "
        "naming its field. An id in use answers 409. The answer is the schedule with its "
        "next five fire times. The `input` is stored in plain text and never sealed; it is "
        "held to COMPOSER_MAX_RUN_INPUT_BYTES (413), and each fire's start checks it "
        "against the version's input_schema (a refused start is recorded as a `failed` "
        "event). The timer service fires schedules." + SCHEDULE_INPUT,
    ),
    Route(
        "GET",
        "/v1/schedules",
        schedules.list_schedules,
        "List schedules",
        "schedules",
        Role.VIEWER,
        {200: ScheduleList},
        query=ScheduleListQuery,
        errors=(400, 503),
        description="Every schedule, by id, made through the API or by a deployed "
        "definition's `schedules:` (`source`), with its next fire time and counts of fires "
        "started, skipped and missed." + SCHEDULE_INPUT,
    ),
    Route(
        "GET",
        "/v1/schedules/{schedule_id}",
        schedules.show,
        "One schedule with its next fires, events and backfills",
        "schedules",
        Role.VIEWER,
        {200: Schedule},
        errors=(404, 503),
        description="With `next_fires` (the next five fire times, before jitter; empty "
        "while paused), `events` (newest first: fires started, skipped by the overlap "
        "policy, missed while the timer was down, buffered, failed starts, pauses, "
        "triggers, backfills, with who did them) and `backfills`. Its runs: "
        "GET /v1/runs?schedule_id=." + SCHEDULE_INPUT,
    ),
    Route(
        "DELETE",
        "/v1/schedules/{schedule_id}",
        schedules.delete,
        "Delete a schedule",
        "schedules",
        Role.OPERATOR,
        {200: ScheduleDeleted},
        errors=(404, 409, 503),
        description="It fires no more; its runs stay (and keep their schedule_id), its "
        "events and backfills go. A schedule a definition wrote (`source: definition`) "
        "answers 409: deploy a version without it, or pause it.",
    ),
    Route(
        "POST",
        "/v1/schedules/{schedule_id}/pause",
        schedules.pause,
        "Pause a schedule",
        "schedules",
        Role.OPERATOR,
        {200: Schedule},
        errors=(404, 503),
        description="It fires no more until resumed; its runs go on. Pausing a paused "
        "schedule changes nothing. Recorded as a `paused` event with the token's name.",
    ),
    Route(
        "POST",
        "/v1/schedules/{schedule_id}/resume",
        schedules.resume,
        "Resume a paused schedule",
        "schedules",
        Role.OPERATOR,
        {200: Schedule},
        errors=(404, 503),
        description="It fires again from its next fire time after now: the fire times "
        "that fell while it was paused are not made up (a backfill starts them). Resuming "
        "a schedule that is not paused changes nothing.",
    ),
    Route(
        "POST",
        "/v1/schedules/{schedule_id}/trigger",
        schedules.trigger,
        "Fire a schedule now",
        "schedules",
        Role.OPERATOR,
        {200: ScheduleTriggered},
        body=TriggerSchedule,
        errors=(400, 404, 413, 503),
        description="Starts a run now, outside the schedule's fire times (paused or not), "
        "under its overlap policy or the body's `overlap`: while its last run still goes, "
        "skip and buffer_one answer `started: false` (recorded as `skipped`), cancel_other "
        "cancels that run first. The run carries `schedule_id` and `scheduled_for` (now). "
        "With an Idempotency-Key header, a request sent again (its answer lost) starts "
        "no second run.",
        body_required=False,
    ),
    Route(
        "POST",
        "/v1/schedules/{schedule_id}/backfill",
        schedules.backfill,
        "Start a schedule's past fire times",
        "schedules",
        Role.OPERATOR,
        {202: BackfillView},
        body=BackfillSchedule,
        errors=(400, 404, 413, 503),
        description="Answers 202 with the backfill at once; the timer service starts one "
        "run per fire time in [start, end] in the background (at most 10,000; 400 past "
        "that), each with `scheduled_for` that fire time. A fire time that already has "
        "its run is not started again. Progress: the Location it answers "
        "(GET /v1/schedules/{schedule_id}/backfills/{backfill_id}), and the schedule's "
        "`backfills`.",
    ),
    Route(
        "GET",
        "/v1/schedules/{schedule_id}/backfills/{backfill_id}",
        schedules.show_backfill,
        "How far a backfill got",
        "schedules",
        Role.VIEWER,
        {200: BackfillView},
        errors=(404, 503),
        description="`total` fire times in its range, `started` and `skipped` so far; "
        "`finished_at` set once every fire time was handled.",
    ),
    Route(
        "GET",
        "/v1/workers",
        workers.list_workers,
        "The workers and the queues they serve",
        "operations",
        Role.VIEWER,
        {200: WorkerList},
        errors=(503,),
        description="From the heartbeats SDK workers send every few seconds: each worker's "
        "host, queues, concurrency, tasks in flight and when it was last seen. LOST: no "
        "heartbeat within COMPOSER_WORKER_LIVE_SECONDS; STOPPED: it stopped on purpose. A "
        "run's task waiting on a queue no live worker serves carries a `waiting_hint`.",
    ),
    Route(
        "GET",
        "/v1/limits",
        limits.list_limits,
        "The keys of the limits that hold runs back",
        "operations",
        Role.VIEWER,
        {200: LimitList},
        errors=(503,),
        description="Each key of a workflow's run concurrency with runs going or waiting: "
        "how many hold a slot (`in_use`), the limit, and how many wait. A key is "
        "rendered from run inputs, so a viewer token gets it as null with "
        "`redacted: true`, unless the workflow sets `viewers_see_payloads: true`; so "
        "does a node's or rate key a template rendered, unless a deployed definition "
        "names it in plain text (or a person set it: PUT).",
    ),
    Route(
        "PUT",
        "/v1/limits/{key}",
        limits.set_rate_limit,
        "Change a rate limit at run time",
        "operations",
        Role.OPERATOR,
        {200: Limit},
        body=SetRateLimit,
        errors=(400, 503),
        description="The rate limit key's `limit` per `per_seconds` from now on, whatever "
        "the definitions naming it say (until set again); the bucket's tokens are capped "
        "at the new limit, and attempts waiting for tokens are looked at again. The token's "
        "name is recorded (`set_by`). A key a template rendered (one partner's) is set "
        "alone: the template's other keys keep the node's values. A key may hold '/' "
        "(`PUT /v1/limits/partner/eu`, or `partner%2Feu`).",
        pattern="/v1/limits/{key:.+}",  # a key may hold '/' (partner/eu)
    ),
    Route(
        "GET",
        "/v1/whoami",
        ops.whoami,
        "The name and role of this token",
        "operations",
        Role.VIEWER,
        {200: Identity},
        description="The web UI asks it after sign-in to show only the actions the role allows.",
    ),
    Route("GET", "/healthz", ops.healthz, "Liveness", "operations", None, {200: Health}),
    Route(
        "GET",
        "/openapi.json",
        ops.openapi,
        "This API's OpenAPI 3.1 document",
        "operations",
        None,
        {200: "application/json"},
    ),
    Route(
        "GET", "/docs", ops.docs, "This API's documentation", "operations", None, {200: "text/html"}
    ),
)
