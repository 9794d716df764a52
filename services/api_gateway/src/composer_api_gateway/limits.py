"""GET /v1/limits: the keys of the limits that hold work back, as a person reads them
(docs/architecture.md §4.13), so "why does my run wait" has an answer beside the run."""

from __future__ import annotations

from aiohttp import web

from composer_api_gateway.definitions import json_response
from composer_api_gateway.models import Limit, LimitList
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
                )
                for v in views
            ]
        )
    )
