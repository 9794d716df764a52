"""Reading request bodies, query strings and path values into checked Python values.

Everything a client sends is checked here before it reaches the engine, so
that a malformed request answers 4xx and never 500: JSON that is invalid,
too deep for the parser, holds NaN/Infinity, a NUL (PostgreSQL's JSONB
cannot store ``\\u0000``) or a lone surrogate (not encodable as UTF-8); a
YAML document whose aliases expand it past a bound (a "billion laughs"
would otherwise keep validation busy for hours); a run input or a signal
payload over its limit (413, naming the limit and its setting:
docs/architecture.md, "Limits").
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Mapping
from typing import Any, TypeVar, get_origin

from aiohttp import web
from pydantic import BaseModel, ValidationError

from composer_api_gateway.problems import ApiProblem, bad_request, not_found
from composer_api_gateway.state import CONFIG
from composer_common import limits

M = TypeVar("M", bound=BaseModel)

#: Lists and maps inside lists and maps in an input, config or payload.
MAX_DEPTH = 64
_WORKFLOW_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_MAX_VERSION = 2**31 - 1


async def read_bytes(request: web.Request) -> bytes:
    """The body, refused early (413) when it declares more than the app accepts."""
    limit = request.app[CONFIG].max_body_bytes
    if request.content_length is not None and request.content_length > limit:
        raise too_large(request.content_length, limit)
    return await request.read()  # raises HTTPRequestEntityTooLarge past the limit


def too_large(size: int, limit: int) -> ApiProblem:
    return ApiProblem(
        413,
        "too-large",
        f"the request body is {size} bytes; this API accepts at most {limit} "
        "(COMPOSER_API_MAX_BODY_BYTES)",
        limit=limit,
        setting="COMPOSER_API_MAX_BODY_BYTES",
    )


def check_size(value: Any, what: str, limit: int, setting: str) -> None:
    """413 when ``value``, as compact JSON, is over ``limit`` bytes; the problem names
    the limit and the setting that raises it (``limit``, ``setting``)."""
    if value is None:
        return
    size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
    if size > limit:
        raise ApiProblem(
            413,
            "too-large",
            limits.over_limit(what, size, limit, setting),
            limit=limit,
            setting=setting,
        )


def decode_json(raw: bytes, what: str = "the request body", max_depth: int = MAX_DEPTH) -> Any:
    """Parse JSON text strictly; raise a 400 problem saying what is wrong."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise bad_request(f"{what} is not UTF-8: {exc.reason} at byte {exc.start}") from exc
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise bad_request(
            f"{what} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from exc
    except RecursionError as exc:
        raise bad_request(f"{what} is nested deeper than {max_depth} levels") from exc
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise bad_request(f"{what} is not acceptable JSON: {exc}") from exc
    problem = storable_problem(value, max_depth)
    if problem is not None:
        raise bad_request(f"{what}: {problem}")
    return value


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def storable_problem(value: Any, max_depth: int = MAX_DEPTH) -> str | None:
    """Why ``value`` cannot be stored as JSONB, or None when it can (no recursion)."""
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        current, path, depth = stack.pop()
        if isinstance(current, str):
            problem = _text_problem(current)
            if problem:
                return f"{path or 'value'} {problem}"
        elif isinstance(current, float):
            if not math.isfinite(current):
                return f"{path or 'value'} is {current}, which JSON cannot hold"
        elif isinstance(current, Mapping | list):
            if depth >= max_depth:
                return f"nested deeper than {max_depth} levels"
            if isinstance(current, Mapping):
                for key, child in current.items():
                    if not isinstance(key, str):
                        return f"{path or 'value'} has a key that is not text: {key!r}"
                    problem = _text_problem(key)
                    if problem:
                        return f"a key under {path or 'the top level'} {problem}"
                    stack.append((child, f"{path}.{key}" if path else key, depth + 1))
            else:
                stack.extend((child, f"{path}[{i}]", depth + 1) for i, child in enumerate(current))
    return None


def _text_problem(text: str) -> str | None:
    if "\x00" in text:
        return "contains a NUL character (\\u0000), which cannot be stored"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "contains a lone surrogate (not valid Unicode text)"
    return None


def validate_model(model: type[M], value: Any, what: str = "the request body") -> M:
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        errors = [
            {"path": ".".join(str(p) for p in e["loc"]) or "(body)", "message": e["msg"]}
            for e in exc.errors(include_url=False, include_input=False)
        ]
        summary = "; ".join(f"{e['path']}: {e['message']}" for e in errors[:5])
        raise bad_request(f"{what} is invalid: {summary}", errors=errors) from exc


async def read_model(request: web.Request, model: type[M]) -> M:
    """A JSON body as ``model``; an empty body is an empty object."""
    raw = await read_bytes(request)
    value = decode_json(raw) if raw.strip() else {}
    if not isinstance(value, dict):
        raise bad_request(f"the request body must be a JSON object, not {type(value).__name__}")
    return validate_model(model, value)


def read_query(request: web.Request, model: type[M]) -> M:
    """The query string as ``model``; a parameter may be repeated only where the model
    takes a list (``?label=a:1&label=b:2``)."""
    values: dict[str, Any] = {}
    for key, value in request.query.items():
        problem = _text_problem(key) or _text_problem(value)
        if problem:
            raise bad_request(f"query parameter {key!r} {problem}")
        field = model.model_fields.get(key)
        if field is not None and get_origin(field.annotation) is list:
            values.setdefault(key, []).append(value)
        elif key in values:
            raise bad_request(f"query parameter {key!r} is given more than once")
        else:
            values[key] = value
    return validate_model(model, values, "the query string")


def run_id_param(request: web.Request) -> str:
    """The ``{run_id}`` path value, canonical; 400 when it is not a UUID."""
    raw = request.match_info["run_id"]
    try:
        return str(uuid.UUID(raw))
    except ValueError:
        shown = raw if len(raw) <= 80 else raw[:80] + "…"
        raise bad_request(f"run id {shown!r} is not a UUID") from None


def workflow_id_param(request: web.Request) -> str:
    """The ``{workflow_id}`` path value; 404 when no workflow could have that id."""
    raw = request.match_info["workflow_id"]
    if not _WORKFLOW_ID.fullmatch(raw):
        shown = raw if len(raw) <= 80 else raw[:80] + "…"
        raise not_found(f"workflow {shown!r} does not exist")
    return raw


def version_param(request: web.Request, workflow_id: str) -> int:
    raw = request.match_info["version"]
    if not raw.isascii() or not raw.isdigit() or not 1 <= int(raw) <= _MAX_VERSION:
        raise not_found(f"workflow {workflow_id!r} has no version {raw[:20]!r}")
    return int(raw)


def text_param(request: web.Request, name: str, max_length: int = 200) -> str:
    raw = request.match_info[name]
    problem = _text_problem(raw)
    if problem or not raw or len(raw) > max_length:
        raise bad_request(
            f"{name} must be 1 to {max_length} characters of text"
            + (f"; it {problem}" if problem else "")
        )
    return raw
