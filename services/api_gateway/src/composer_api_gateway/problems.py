"""RFC 9457 problem details: every error the API answers, and the mapping from
the engine's errors to them.

Handlers raise ``ApiProblem`` (or let an engine error through); the
middleware in ``app`` turns either into ``application/problem+json``. The
``type`` is a stable URN per kind of problem, so a client can tell "that run
id is taken" from "the run is finished" although both are 409.
"""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

from aiohttp import web

from composer_engine import EngineError

PROBLEM_JSON = "application/problem+json"


class ApiProblem(Exception):
    """An error answer: status, a short kind, a detail that names the thing and the fix."""

    def __init__(self, status: int, kind: str, detail: str, **extensions: Any) -> None:
        super().__init__(detail)
        self.status = status
        self.kind = kind
        self.detail = detail
        self.extensions = extensions

    def body(self, instance: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": f"urn:composer:problem:{self.kind}",
            "title": HTTPStatus(self.status).phrase,
            "status": self.status,
            "detail": self.detail,
        }
        if instance:
            out["instance"] = instance
        out.update(self.extensions)
        return out

    def response(self, instance: str | None = None) -> web.Response:
        headers = {}
        if self.status == 401:
            headers["WWW-Authenticate"] = 'Bearer realm="composer"'
        if self.status == 503:
            headers["Retry-After"] = "1"
        return web.Response(
            status=self.status,
            text=json.dumps(self.body(instance), ensure_ascii=False, default=str),
            content_type=PROBLEM_JSON,
            headers=headers,
        )


def bad_request(detail: str, **extensions: Any) -> ApiProblem:
    return ApiProblem(400, "invalid-request", detail, **extensions)


def not_found(detail: str) -> ApiProblem:
    return ApiProblem(404, "not-found", detail)


#: The HTTP status of each kind of engine error (composer_engine.errors); a kind
#: missing here is answered 500, as the bug it would be.
STATUSES = {
    "invalid-request": 400,
    "input-invalid": 400,
    "forbidden": 403,
    "not-found": 404,
    "conflict": 409,
    "idempotency-key-reused": 409,
    "misrouted": 409,
    "unknown-signal": 422,
    "internal": 500,  # engine.Internal: a bug, logged there as an ALERT
    "unavailable": 503,
}


def from_engine(exc: EngineError) -> ApiProblem:
    status = STATUSES.get(exc.kind)
    if status is None:
        return ApiProblem(500, "internal", exc.message, **exc.extensions)
    return ApiProblem(status, exc.kind, exc.message, **exc.extensions)
