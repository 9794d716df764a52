"""Handlers of /v1/runs: start, list, show, await the result, signal, cancel, retry.

Writes go through libs/engine (lock → decide → persist → commit); reads call
libs/repo directly. Cursors are opaque to clients: a versioned, base64url
wrapper around the repository's cursor, so its form can change without
breaking anyone who stored one.
"""

from __future__ import annotations

import base64
import binascii

from aiohttp import web

import composer_repo as repo
from composer_api_gateway import bodies
from composer_api_gateway.definitions import json_response
from composer_api_gateway.models import (
    CancelRun,
    ResultQuery,
    RetryRun,
    Run,
    RunList,
    RunListQuery,
    RunStarted,
    RunSummary,
    SignalDelivered,
    StartRun,
    Task,
)
from composer_api_gateway.problems import bad_request
from composer_api_gateway.state import CONFIG, ENGINE, POOL, WAITERS
from composer_engine import opened

#: The status a long-poll answers when the run is still going: "ask again".
STILL_RUNNING = 202
_CURSOR_PREFIX = "r1:"


def encode_cursor(run_id: str | None) -> str | None:
    if run_id is None:
        return None
    return base64.urlsafe_b64encode((_CURSOR_PREFIX + run_id).encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> str:
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, ValueError):
        text = ""
    if not text.startswith(_CURSOR_PREFIX) or not text[len(_CURSOR_PREFIX) :].strip():
        raise bad_request(
            "cursor is not one this API gave out: pass the next_cursor of the previous page"
        )
    return text[len(_CURSOR_PREFIX) :]


async def load(app: web.Application, run_id: str) -> Run:
    """The run with its tasks, read in one transaction (a consistent pair), its
    documents opened (composer_engine.sealing)."""
    sealer = app[ENGINE].sealer
    async with repo.transaction(app[POOL]) as conn:
        r = opened.run_record(sealer, await repo.get_run(conn, run_id))
        tasks = [
            opened.task_record(sealer, run_id, t) for t in await repo.get_run_tasks(conn, run_id)
        ]
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
        tasks=[
            Task(
                task_id=t.task_id,
                node_id=t.node_id,
                type=t.node_type,
                state=t.state,
                attempt=t.attempt,
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
            )
            for t in tasks
        ],
    )


def check_run_input(request: web.Request, input: object, config: object) -> None:
    """413 for a run input or config over COMPOSER_MAX_RUN_INPUT_BYTES."""
    limit = request.app[CONFIG].max_run_input_bytes
    bodies.check_size(input, "run input", limit, "COMPOSER_MAX_RUN_INPUT_BYTES")
    bodies.check_size(config, "run config", limit, "COMPOSER_MAX_RUN_INPUT_BYTES")


async def start(request: web.Request) -> web.Response:
    body = await bodies.read_model(request, StartRun)
    check_run_input(request, body.input, body.config)
    started = await request.app[ENGINE].start(
        body.workflow_id,
        version=body.version,
        input=body.input,
        config=body.config,
        run_id=body.run_id,
        idempotency_key=body.idempotency_key,
        start_node=body.start_node,
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
    cursor = decode_cursor(query.cursor) if query.cursor else None
    sealer = request.app[ENGINE].sealer
    async with repo.transaction(request.app[POOL]) as conn:
        page = await repo.list_runs(
            conn,
            workflow_id=query.workflow_id,
            status=query.status,
            created_after=query.created_after,
            created_before=query.created_before,
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
                    error=opened.shown_text(sealer, s.run_id, s.error),
                    idempotency_key=s.idempotency_key,
                    created_at=s.created_at,
                    updated_at=s.updated_at,
                    completed_at=s.completed_at,
                )
                for s in page.runs
            ],
            next_cursor=encode_cursor(page.next_cursor),
        )
    )


async def show(request: web.Request) -> web.Response:
    run_id = bodies.run_id_param(request)
    return json_response(await load(request.app, run_id))


async def result(request: web.Request) -> web.Response:
    """Long-poll: answer when the run is terminal, or with 202 and the run at the timeout."""
    run_id = bodies.run_id_param(request)
    query = bodies.read_query(request, ResultQuery)
    timeout = min(query.timeout, request.app[CONFIG].max_wait_seconds)

    async def read() -> Run:
        return await load(request.app, run_id)

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
    delivered = await request.app[ENGINE].signal(run_id, name, payload, idempotency_key=key)
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
    await request.app[ENGINE].cancel(run_id, body.reason)
    return json_response(await load(request.app, run_id))


async def retry(request: web.Request) -> web.Response:
    run_id = bodies.run_id_param(request)
    body = await bodies.read_model(request, RetryRun)
    check_run_input(request, body.input, body.config)
    await request.app[ENGINE].retry(
        run_id, body.from_node, version=body.version, input=body.input, config=body.config
    )
    return json_response(await load(request.app, run_id))
