"""GET /v1/limits: the keys of the limits that hold work back, as a person reads them
(docs/architecture.md §4.13), so "why does my run wait" has an answer beside the run."""

from __future__ import annotations

from aiohttp import web

from composer_api_gateway import bodies
from composer_api_gateway.definitions import json_response
from composer_api_gateway.models import Limit, LimitList, SetRateLimit
from composer_api_gateway.runs import full_access
from composer_api_gateway.state import CALLER, ENGINE


async def list_limits(request: web.Request) -> web.Response:
    views = await request.app[ENGINE].reads.run_limits(full_access=full_access(request[CALLER]))
    return json_response(
        LimitList(
            limits=[
                Limit(
                    kind=v.kind,
                    workflow_id=v.workflow_id,
                    key=v.key,
                    in_use=v.in_use,
                    limit=v.limit,
                    waiting=v.waiting,
                    redacted=v.key is None,
                    tokens=v.tokens,
                    per_seconds=v.per_seconds,
                    set_by=v.set_by,
                )
                for v in views
            ]
        )
    )


async def set_rate_limit(request: web.Request) -> web.Response:
    body = await bodies.read_model(request, SetRateLimit)
    key = request.match_info["key"]
    await request.app[ENGINE].set_rate_limit(
        key, limit=body.limit, per_seconds=body.per_seconds, set_by=request[CALLER].name
    )
    views = await request.app[ENGINE].reads.run_limits(full_access=True)
    view = next(v for v in views if v.kind == "rate_limit" and v.key == key)
    return json_response(
        Limit(
            kind="rate_limit",
            workflow_id=None,
            key=key,
            in_use=view.in_use,
            limit=view.limit,
            waiting=view.waiting,
            tokens=view.tokens,
            per_seconds=view.per_seconds,
            set_by=view.set_by,
        )
    )
