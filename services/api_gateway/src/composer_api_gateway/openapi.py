"""The OpenAPI 3.1 document and the docs page, generated from the route table.

A small generator rather than a framework plugin: the route table already
says everything (methods, paths, roles, models), pydantic writes JSON Schema
2020-12 (what OpenAPI 3.1 uses) for the models, and the aiohttp plugins
that do this (aiohttp-apispec, aiohttp-pydantic) are either tied to
marshmallow or little maintained. The docs page is rendered here too, on
the server, with no script or CDN, so it works on a machine with no network.
"""

from __future__ import annotations

import html
import json
import re
from http import HTTPStatus
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from composer_api_gateway.models import Problem, TypedWorkflowSpec
from composer_api_gateway.routes import ROUTES, Route

_REF = "#/components/schemas/{model}"
_PATH_PARAM = re.compile(r"{(\w+)}")
_PARAM_SCHEMAS: dict[str, dict[str, Any]] = {
    "run_id": {"type": "string", "format": "uuid"},
    "workflow_id": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"},
    "version": {"type": "integer", "minimum": 1},
    "name": {"type": "string", "minLength": 1, "maxLength": 200},
    "schedule_id": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"},
}


def _models(routes: tuple[Route, ...]) -> list[tuple[type[BaseModel], JsonSchemaMode]]:
    wanted: list[tuple[type[BaseModel], JsonSchemaMode]] = [
        (Problem, "serialization"),
        # Its nodes are oneOf a model per node type, so each type's spec fields show.
        (TypedWorkflowSpec, "validation"),
    ]
    for route in routes:
        if isinstance(route.body, type):
            wanted.append((route.body, "validation"))
        for answer in route.responses.values():
            if isinstance(answer, type):
                wanted.append((answer, "serialization"))
    return list(dict.fromkeys(wanted))


def build_spec(routes: tuple[Route, ...] = ROUTES, *, version: str = "0.1.0") -> dict[str, Any]:
    refs, top = models_json_schema(_models(routes), ref_template=_REF)

    def ref(model: type[BaseModel], mode: JsonSchemaMode) -> dict[str, Any]:
        return dict(refs[(model, mode)])

    problem = {"application/problem+json": {"schema": ref(Problem, "serialization")}}
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        op: dict[str, Any] = {
            "operationId": route.handler.__module__.rsplit(".", 1)[-1]
            + "_"
            + route.handler.__name__,
            "summary": route.summary,
            "tags": [route.tag],
        }
        description = route.description
        if route.role is not None:
            description = f"Needs the **{route.role.label}** role. {description}".strip()
            op["security"] = [{"bearer": []}]
            op["x-required-role"] = route.role.label
        else:
            op["security"] = []
        if description:
            op["description"] = description
        params = [
            {
                "name": n,
                "in": "path",
                "required": True,
                "schema": _PARAM_SCHEMAS.get(n, {"type": "string"}),
            }
            for n in _PATH_PARAM.findall(route.path)
        ]
        if route.query is not None:
            schema = route.query.model_json_schema(ref_template=_REF)
            for name, field in route.query.model_fields.items():
                params.append(
                    {
                        "name": name,
                        "in": "query",
                        "required": field.is_required(),
                        "schema": schema["properties"][name],
                    }
                )
        if params:
            op["parameters"] = params
        if route.body == "definition":
            spec = ref(TypedWorkflowSpec, "validation")
            op["requestBody"] = {
                "required": True,
                "content": {
                    "application/yaml": {"schema": spec},
                    "application/json": {"schema": spec},
                },
            }
        elif route.body == "payload":
            op["requestBody"] = {
                "required": route.body_required,
                "content": {"application/json": {"schema": {}}},
            }
        elif isinstance(route.body, type):
            op["requestBody"] = {
                "required": route.body_required,
                "content": {"application/json": {"schema": ref(route.body, "validation")}},
            }
        responses: dict[str, Any] = {}
        for status, answer in sorted(route.responses.items()):
            entry: dict[str, Any] = {"description": HTTPStatus(status).phrase}
            if isinstance(answer, type):
                entry["content"] = {"application/json": {"schema": ref(answer, "serialization")}}
            else:
                entry["content"] = {answer: {"schema": {"type": "string"}}}
            responses[str(status)] = entry
        errors = set(route.errors) | ({401, 403} if route.role is not None else set())
        for status in sorted(errors):
            responses[str(status)] = {"description": HTTPStatus(status).phrase, "content": problem}
        op["responses"] = responses
        paths.setdefault(route.path, {})[route.method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Composer API",
            "version": version,
            "description": "Durable workflows: definitions, runs, signals, retry, cancel, "
            "pause and resume. Errors are RFC 9457 problem details "
            "(application/problem+json). A run's status PAUSED is not terminal: a client "
            "that waits for a run's end tests for SUCCEEDED, FAILED or CANCELLED, never "
            "for 'not RUNNING'.",
        },
        "servers": [{"url": "/"}],
        "tags": [
            {"name": "workflows", "description": "Workflow definitions and their versions"},
            {"name": "runs", "description": "Runs of workflows"},
            {
                "name": "schedules",
                "description": "Schedules that start runs at cron or interval fire times",
            },
            {"name": "operations", "description": "Liveness, the caller's role and this document"},
        ],
        "paths": paths,
        "components": {
            "schemas": top.get("$defs", {}),
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "A token from COMPOSER_API_TOKENS (name=token:role); roles "
                    "admin ⊇ operator ⊇ viewer. Its name is what audit fields record; a viewer "
                    "sees payloads redacted unless the workflow sets viewers_see_payloads.",
                }
            },
        },
    }


def render_docs(spec: dict[str, Any]) -> str:
    """A plain HTML page: every operation, then every schema, from the OpenAPI document."""
    e = html.escape
    rows: list[str] = []
    sections: list[str] = []
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            anchor = op["operationId"]
            role = op.get("x-required-role", "open")
            rows.append(
                f'<tr><td><code>{e(method.upper())}</code></td><td><a href="#{e(anchor)}">'
                f"<code>{e(path)}</code></a></td><td>{e(role)}</td><td>{e(op['summary'])}</td></tr>"
            )
            parts = [f'<h3 id="{e(anchor)}"><code>{e(method.upper())} {e(path)}</code></h3>']
            parts.append(f"<p>{e(op.get('description', op['summary']))}</p>")
            for p in op.get("parameters", []):
                parts.append(
                    f"<p>{e(p['in'])} parameter <code>{e(p['name'])}</code>"
                    f"{' (required)' if p['required'] else ''}: "
                    f"<code>{e(json.dumps(p['schema']))}</code></p>"
                )
            body = op.get("requestBody")
            if body:
                for media, content in body["content"].items():
                    parts.append(f"<p>body ({e(media)}): {_schema_link(content['schema'])}</p>")
            answers = ", ".join(f"{e(code)} {_answer(r)}" for code, r in op["responses"].items())
            parts.append(f"<p>answers: {answers}</p>")
            sections.append("\n".join(parts))
    schemas = [
        f'<h3 id="schema-{e(name)}">{e(name)}</h3><pre>{e(json.dumps(schema, indent=2))}</pre>'
        for name, schema in sorted(spec["components"]["schemas"].items())
    ]
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{e(spec["info"]["title"])}</title>
<style>
body{{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;line-height:1.4}}
table{{border-collapse:collapse}}td,th{{border-bottom:1px solid #ddd;padding:.25rem .6rem;text-align:left}}
pre{{background:#f6f6f6;padding:.6rem;overflow:auto;font-size:.85rem}}code{{font-size:.9rem}}
</style></head><body>
<h1>{e(spec["info"]["title"])} {e(spec["info"]["version"])}</h1>
<p>{e(spec["info"]["description"])} Authenticate with <code>Authorization: Bearer &lt;token&gt;</code>.
The machine-readable document is <a href="/openapi.json">/openapi.json</a>.</p>
<h2>Routes</h2>
<table><tr><th>method</th><th>path</th><th>role</th><th>does</th></tr>
{"".join(rows)}
</table>
<h2>Operations</h2>
{"".join(sections)}
<h2>Schemas</h2>
{"".join(schemas)}
</body></html>
"""


def _schema_link(schema: dict[str, Any]) -> str:
    ref = schema.get("$ref")
    if not ref:
        return "any JSON"
    name = ref.rsplit("/", 1)[-1]
    return f'<a href="#schema-{html.escape(name)}">{html.escape(name)}</a>'


def _answer(response: dict[str, Any]) -> str:
    content = response.get("content", {})
    for media, c in content.items():
        if "$ref" in c.get("schema", {}):
            return f"{_schema_link(c['schema'])} ({html.escape(media)})"
        return html.escape(media)
    return ""
