"""Bulk actions on runs and their progress: POST /v1/runs/bulk/cancel and
/v1/runs/bulk/retry store an operation and answer its id at once (202); the
lease-sweeper carries it out in the background at a bounded rate, and GET
/v1/operations/{operation_id} shows how far it got (docs/architecture.md §6.7)."""

from __future__ import annotations

import uuid

from aiohttp import web

from composer_api_gateway import bodies
from composer_api_gateway.definitions import json_response
from composer_api_gateway.models import (
    BulkCancel,
    BulkRetry,
    Operation,
    OperationStarted,
    RunFilterFields,
)
from composer_api_gateway.problems import bad_request, not_found
from composer_api_gateway.runs import idempotency_key
from composer_api_gateway.state import CALLER, ENGINE
from composer_common import labels as run_labels
from composer_engine import RunFilter
from composer_engine.records import OperationRecord

ACCEPTED = 202


def run_filter(fields: RunFilterFields) -> RunFilter:
    """The listing's parameters as the engine's filter; 400 for what the listing refuses."""
    for name, value in (
        ("created_after", fields.created_after),
        ("created_before", fields.created_before),
    ):
        if value is not None and value.tzinfo is None:
            raise bad_request(f"filter.{name} needs a time zone, e.g. 2026-01-01T00:00:00Z")
    try:
        labels = run_labels.parse_filter(fields.label)
    except ValueError as exc:
        raise bad_request(f"filter.label: {exc}") from exc
    if labels is None:
        raise bad_request("filter.label asks one key for two values: no run could match")
    return RunFilter(
        workflow_id=fields.workflow_id,
        status=fields.status,
        labels=labels,
        created_after=fields.created_after,
        created_before=fields.created_before,
    )


def _run_ids(given: list[str] | None) -> list[str] | None:
    if given is None:
        return None
    ids = []
    for raw in given:
        try:
            ids.append(str(uuid.UUID(raw)))
        except ValueError:
            shown = raw if len(raw) <= 80 else raw[:80] + "…"
            raise bad_request(f"run_ids: {shown!r} is not a run id (a UUID)") from None
    return ids


async def bulk_cancel(request: web.Request) -> web.Response:
    body = await bodies.read_model(request, BulkCancel)
    operation_id, created = await request.app[ENGINE].operations.start(
        "cancel",
        filter=None if body.filter is None else run_filter(body.filter),
        run_ids=_run_ids(body.run_ids),
        reason=body.reason,
        requested_by=request[CALLER].name,
        idempotency_key=idempotency_key(request),
    )
    return _started(operation_id, created)


async def bulk_retry(request: web.Request) -> web.Response:
    body = await bodies.read_model(request, BulkRetry)
    operation_id, created = await request.app[ENGINE].operations.start(
        "retry",
        filter=None if body.filter is None else run_filter(body.filter),
        run_ids=_run_ids(body.run_ids),
        from_node=body.from_node,
        requested_by=request[CALLER].name,
        idempotency_key=idempotency_key(request),
    )
    return _started(operation_id, created)


def _started(operation_id: str, created: bool) -> web.Response:
    return json_response(
        OperationStarted(operation_id=operation_id, created=created),
        ACCEPTED if created else 200,
        Location=f"/v1/operations/{operation_id}",
    )


async def show(request: web.Request) -> web.Response:
    raw = request.match_info["operation_id"]
    try:
        operation_id = str(uuid.UUID(raw))
    except ValueError:
        raise not_found(f"operation {raw[:80]!r} does not exist") from None
    return json_response(view(await request.app[ENGINE].operations.get(operation_id)))


def view(op: OperationRecord) -> Operation:
    return Operation(
        operation_id=op.operation_id,
        action="retry" if op.action == "retry" else "cancel",
        state="DONE" if op.finished_at is not None else "RUNNING",
        filter=op.filter if isinstance(op.filter, dict) else None,
        collected=op.collected,
        total=op.total,
        done=op.done,
        skipped=op.skipped,
        failed=op.failed,
        last_error=op.last_error,
        requested_by=op.requested_by,
        created_at=op.created_at,
        updated_at=op.updated_at,
        finished_at=op.finished_at,
    )
