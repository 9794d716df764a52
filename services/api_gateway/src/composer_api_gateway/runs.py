"""Handlers of /v1/runs: start, list, show, await the result, signal, cancel, retry,
and the attempts' task logs.

Writes go through libs/engine (lock → decide → persist → commit), each with
the name of the token behind it (who started, signalled, cancelled or retried
the run); reads go through its read side (``Engine.reads``). Cursors are opaque to clients: a
versioned, base64url wrapper around the repository's cursor, so its form can
change without breaking anyone who stored one.

What a viewer token reads has its payloads redacted (``redacted: true``, the
payload fields null) unless the run's workflow sets ``viewers_see_payloads``:
inputs, configs, outputs, errors, signal payloads and task logs can hold what a viewer
should not see (an API key in a config, an Authorization header resolved into
a task's input). The engine's read side applies that rule; this module says who
has full access.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping

from aiohttp import web

from composer_api_gateway import bodies, workers
from composer_api_gateway.auth import Caller, Role
from composer_api_gateway.definitions import json_response
from composer_api_gateway.models import (
    AttemptLog,
    CallingContext,
    CancelRun,
    MapItems,
    MapItemsQuery,
    MapProgress,
    PauseRun,
    ResultQuery,
    RetryRun,
    Run,
    RunChild,
    RunList,
    RunListQuery,
    RunLogs,
    RunParent,
    RunStarted,
    RunSummary,
    Signal,
    SignalDelivered,
    StartRun,
    Task,
    TaskLogsQuery,
)
from composer_api_gateway.problems import bad_request
from composer_api_gateway.state import CALLER, CONFIG, ENGINE, WAITERS
from composer_common import caller as calling
from composer_common import labels as run_labels
from composer_core.model import TaskState
from composer_engine.records import TaskRecord

#: The status a long-poll answers when the run is still going: "ask again".
STILL_RUNNING = 202
_CURSOR_PREFIX = "r1:"
BAD_CURSOR = "cursor is not one this API gave out: pass the next_cursor of the previous page"
#: The task states that wait for a worker to take them (a waiting_hint may say none will).
_WAITING = frozenset({TaskState.PENDING, TaskState.QUEUED})
#: A MAP item in one of these is finished (its progress counts it).
_FINISHED = frozenset({TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELLED})


def encode_cursor(value: str | None, prefix: str = _CURSOR_PREFIX) -> str | None:
    """A page cursor as clients see it: ``value`` (the repository's cursor) behind a
    versioned ``prefix`` that names the listing, base64url-wrapped."""
    if value is None:
        return None
    return base64.urlsafe_b64encode((prefix + value).encode()).decode().rstrip("=")


def decode_cursor(cursor: str, prefix: str = _CURSOR_PREFIX) -> str:
    """The repository's cursor inside ``cursor``; 400 for one this listing did not give out."""
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, ValueError):
        text = ""
    if not text.startswith(prefix) or not text[len(prefix) :].strip():
        raise bad_request(BAD_CURSOR)
    return text[len(prefix) :]


def full_access(caller: Caller) -> bool:
    """Whether ``caller`` sees every run's payloads (operators and admins); a viewer
    sees those of a workflow that says ``viewers_see_payloads: true`` (the engine's
    read side applies the rule: composer_engine._reads)."""
    return caller.role >= Role.OPERATOR


def _context(document: object) -> CallingContext | None:
    found = calling.Caller.from_document(document)
    if found is None:
        return None
    return CallingContext.model_validate(
        {"caller": {"name": found.name, "role": found.role}, "metadata": dict(found.metadata)}
    )


async def load(request: web.Request, run_id: str) -> Run:
    """The run with its tasks and signals, read in one transaction (a consistent
    view), its documents opened (composer_engine.sealing) when the caller may see
    them, and redacted, never opened, when not."""
    view = await request.app[ENGINE].reads.run(
        run_id,
        full_access=full_access(request[CALLER]),
        live_seconds=request.app[CONFIG].worker_live_seconds,
    )
    r, tasks, signals, hidden = view.run, view.tasks, view.signals, view.redacted
    hints = {u.queue: workers.hint(u) for u in view.unserved}
    return Run(
        run_id=r.run_id,
        workflow_id=r.workflow_id,
        version=r.version,
        status=r.status,
        input=r.input,
        config=r.config,
        output=r.output,
        error=r.error,
        idempotency_key=r.idempotency_key,
        created_at=r.created_at,
        updated_at=r.updated_at,
        completed_at=r.completed_at,
        started_by=r.started_by,
        cancelled_by=r.cancelled_by,
        labels=dict(r.labels),
        retried_by=r.retried_by,
        context=_context(r.context),
        redacted=hidden,
        waiting_hint=view.waiting,
        parent=None
        if r.parent is None
        else RunParent(
            run_id=r.parent.run_id,
            node_id=r.parent.node_id,
            task_id=r.parent.task_id,
            attempt=r.parent.attempt,
        ),
        schedule_id=r.schedule_id,
        scheduled_for=r.scheduled_for,
        children=[
            RunChild(
                run_id=c.run_id,
                workflow_id=c.workflow_id,
                version=c.version,
                status=c.status,
                node_id=c.node_id,
                attempt=c.attempt,
                on_parent_cancel="abandon" if c.detached else "cancel",
                created_at=c.created_at,
                completed_at=c.completed_at,
            )
            for c in view.children
        ],
        signals=[
            Signal(
                signal_id=s.signal_id,
                name=s.name,
                payload=s.payload,
                sent_by=s.sent_by,
                created_at=s.created_at,
                consumed_at=s.consumed_at,
                consumed_by=s.consumed_by,
                redacted=hidden,
            )
            for s in signals
        ],
        tasks=[_task(t, hidden, hints) for t in tasks],
    )


def _task(t: TaskRecord, hidden: bool, hints: Mapping[str, str]) -> Task:
    waiting = t.held_reason or (hints.get(t.queue or "") if t.state in _WAITING else None)
    if (
        waiting is None
        and t.item is not None
        and t.state is TaskState.PENDING
        and t.started_at is None
    ):
        waiting = "waiting for a place: its MAP runs at most max_parallel items at once"
    return Task(
        task_id=t.task_id,
        node_id=t.node_id,
        type=t.node_type,
        state=t.state,
        attempt=t.attempt,
        max_attempts=t.max_attempts,
        input=t.input,
        output=t.output,
        error=t.error,
        error_code=t.error_code,
        queue=t.queue,
        branches=None if t.branches is None else list(t.branches),
        wake_at=t.wake_at,
        awaited_signal=t.awaited_signal,
        created_at=t.created_at,
        updated_at=t.updated_at,
        started_at=t.started_at,
        finished_at=t.finished_at,
        redacted=hidden,
        waiting_hint=waiting,
        item=t.item,
        items=None
        if t.items_total is None
        else MapProgress(
            total=t.items_total,
            finished=sum(n for state, n in (t.item_counts or {}).items() if state in _FINISHED),
            counts=dict(t.item_counts or {}),
        ),
    )


async def map_items(request: web.Request) -> web.Response:
    """A page of a MAP node's items, in item order, redacted as the run's tasks are."""
    run_id = bodies.run_id_param(request)
    node_id = request.match_info["node_id"]
    query = bodies.read_query(request, MapItemsQuery)
    items, hidden = await request.app[ENGINE].reads.map_items(
        run_id,
        node_id,
        full_access=full_access(request[CALLER]),
        start=query.start,
        limit=query.limit + 1,
    )
    more = len(items) > query.limit
    shown = items[: query.limit]
    return json_response(
        MapItems(
            run_id=run_id,
            node_id=node_id,
            items=[_task(t, hidden, {}) for t in shown],
            next_start=(shown[-1].item or 0) + 1 if more and shown else None,
            redacted=hidden,
        )
    )


def check_run_input(request: web.Request, input: object, config: object) -> None:
    """413 for a run input or config over COMPOSER_MAX_RUN_INPUT_BYTES."""
    limit = request.app[CONFIG].max_run_input_bytes
    bodies.check_size(input, "run input", limit, "COMPOSER_MAX_RUN_INPUT_BYTES")
    bodies.check_size(config, "run config", limit, "COMPOSER_MAX_RUN_INPUT_BYTES")


async def start(request: web.Request) -> web.Response:
    body = await bodies.read_model(request, StartRun)
    check_run_input(request, body.input, body.config)
    bodies.check_size(
        body.context,
        "start context",
        request.app[CONFIG].max_context_bytes,
        "COMPOSER_MAX_CONTEXT_BYTES",
    )
    label_problems = run_labels.problems(body.labels or {})
    if label_problems:
        errors = [{"path": path, "message": message} for path, message in label_problems]
        summary = "; ".join(f"{e['path']}: {e['message']}" for e in errors[:5])
        raise bad_request(f"the run's labels are invalid: {summary}", errors=errors)
    who = request[CALLER]
    started = await request.app[ENGINE].start(
        body.workflow_id,
        version=body.version,
        input=body.input,
        config=body.config,
        run_id=body.run_id,
        idempotency_key=body.idempotency_key,
        start_node=body.start_node,
        caller=calling.Caller(who.name, who.role.label, body.context or {}),
        labels=body.labels,
    )
    return json_response(
        RunStarted(run_id=started.run_id, status=started.status, created=started.created),
        201 if started.created else 200,
        Location=f"/v1/runs/{started.run_id}",
    )


async def list_runs(request: web.Request) -> web.Response:
    query = bodies.read_query(request, RunListQuery)
    for name, value in (
        ("created_after", query.created_after),
        ("created_before", query.created_before),
    ):
        if value is not None and value.tzinfo is None:
            raise bad_request(f"{name} needs a time zone, e.g. 2026-01-01T00:00:00Z")
    try:
        labels = run_labels.parse_filter(query.label)
    except ValueError as exc:
        raise bad_request(str(exc)) from exc
    if query.schedule_id is not None and (query.workflow_id is not None or labels):
        raise bad_request(
            "schedule_id combines with status, created_after and created_before, not with "
            "workflow_id or label"
        )
    if labels is None:  # one key asked with two values: no run matches
        return json_response(RunList(runs=[], next_cursor=None))
    cursor = decode_cursor(query.cursor) if query.cursor else None
    listing = await request.app[ENGINE].reads.runs(
        full_access=full_access(request[CALLER]),
        workflow_id=query.workflow_id,
        status=query.status,
        labels=labels,
        created_after=query.created_after,
        created_before=query.created_before,
        schedule_id=query.schedule_id,
        cursor=cursor,
        limit=query.limit,
    )
    return json_response(
        RunList(
            runs=[
                RunSummary(
                    run_id=s.run_id,
                    workflow_id=s.workflow_id,
                    version=s.version,
                    status=s.status,
                    error=s.error,
                    idempotency_key=s.idempotency_key,
                    created_at=s.created_at,
                    updated_at=s.updated_at,
                    completed_at=s.completed_at,
                    started_by=s.started_by,
                    labels=dict(s.labels),
                    schedule_id=s.schedule_id,
                    scheduled_for=s.scheduled_for,
                    redacted=redacted,
                )
                for s, redacted in listing.runs
            ],
            next_cursor=encode_cursor(listing.next_cursor),
        )
    )


async def show(request: web.Request) -> web.Response:
    run_id = bodies.run_id_param(request)
    return json_response(await load(request, run_id))


async def result(request: web.Request) -> web.Response:
    """Long-poll: answer when the run is terminal, or with 202 and the run at the timeout."""
    run_id = bodies.run_id_param(request)
    query = bodies.read_query(request, ResultQuery)
    timeout = min(query.timeout, request.app[CONFIG].max_wait_seconds)

    async def read() -> Run:
        return await load(request, run_id)

    run, finished = await request.app[WAITERS].wait(
        run_id, timeout, read, lambda r: r.status.is_terminal
    )
    if finished:
        return json_response(run)
    return json_response(run, STILL_RUNNING, **{"Retry-After": "0"})


async def signal(request: web.Request) -> web.Response:
    run_id = bodies.run_id_param(request)
    name = bodies.text_param(request, "name")
    raw = await bodies.read_bytes(request)
    payload = bodies.decode_json(raw, "the signal payload") if raw.strip() else None
    limit = request.app[CONFIG].max_signal_bytes
    bodies.check_size(payload, "signal payload", limit, "COMPOSER_MAX_SIGNAL_BYTES")
    key = idempotency_key(request)
    delivered = await request.app[ENGINE].signal(
        run_id, name, payload, idempotency_key=key, sent_by=request[CALLER].name
    )
    return json_response(SignalDelivered(delivered=delivered))


def idempotency_key(request: web.Request) -> str | None:
    """The request's ``Idempotency-Key`` header (None: not sent)."""
    key = request.headers.get("Idempotency-Key")
    if key is None:
        return None
    if not key.strip() or len(key) > 200:
        raise bad_request("the Idempotency-Key header must be 1 to 200 characters")
    return key


async def cancel(request: web.Request) -> web.Response:
    run_id = bodies.run_id_param(request)
    body = await bodies.read_model(request, CancelRun)
    await request.app[ENGINE].cancel(run_id, body.reason, cancelled_by=request[CALLER].name)
    return json_response(await load(request, run_id))


async def pause(request: web.Request) -> web.Response:
    run_id = bodies.run_id_param(request)
    body = await bodies.read_model(request, PauseRun)
    await request.app[ENGINE].pause(run_id, body.reason, paused_by=request[CALLER].name)
    return json_response(await load(request, run_id))


async def resume(request: web.Request) -> web.Response:
    run_id = bodies.run_id_param(request)
    await request.app[ENGINE].resume(run_id, resumed_by=request[CALLER].name)
    return json_response(await load(request, run_id))


async def retry(request: web.Request) -> web.Response:
    run_id = bodies.run_id_param(request)
    body = await bodies.read_model(request, RetryRun)
    check_run_input(request, body.input, body.config)
    await request.app[ENGINE].retry(
        run_id,
        body.from_node,
        version=body.version,
        input=body.input,
        config=body.config,
        retried_by=request[CALLER].name,
    )
    return json_response(await load(request, run_id))


async def logs(request: web.Request) -> web.Response:
    """The run's attempt logs (``?node=``: one node's), opened when the caller may see
    payloads, redacted (lines null) when not: a printed line can hold what an input did."""
    run_id = bodies.run_id_param(request)
    query = bodies.read_query(request, TaskLogsQuery)
    view = await request.app[ENGINE].reads.logs(
        run_id, full_access=full_access(request[CALLER]), node_id=query.node
    )
    shown = not view.redacted
    return json_response(
        RunLogs(
            run_id=run_id,
            redacted=view.redacted,
            logs=[
                AttemptLog(
                    task_id=entry.task_id,
                    node_id=entry.node_id,
                    attempt=entry.attempt,
                    lines=entry.lines.split("\n") if shown else None,
                    truncated=entry.truncated,
                    created_at=entry.created_at,
                    redacted=not shown,
                )
                for entry in view.logs
            ],
        )
    )
