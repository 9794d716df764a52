"""Handlers of /v1/workflows: create (YAML or JSON), list, show, deploy, delete.

Each handler parses the request, calls the engine's definitions use case
(``composer_engine.Workflows``: validation, the writes and the reads, with their
retries) and renders the answer. An invalid definition answers 422
with every problem and its path, so a user fixes them all in one go.

A ``webhook_url``'s ``user:password@`` is shown to no one, admins included, as
``***@`` (here and in the definition's ``spec``): a viewer token must not learn
the receiver's credentials, and nobody needs to read them back to use them.
"""

from __future__ import annotations

from aiohttp import web
from pydantic import BaseModel

from composer_api_gateway import bodies
from composer_api_gateway.models import (
    DefinitionCreated,
    DeployQuery,
    VersionDetail,
    VersionSummary,
    WorkflowDeleted,
    WorkflowDetail,
    WorkflowList,
    WorkflowSummary,
)
from composer_api_gateway.problems import ApiProblem
from composer_api_gateway.state import CALLER, WORKFLOWS
from composer_core.errors import DefinitionInvalid, Problem
from composer_core.model import DEFAULT_LIMITS, hide_credentials
from composer_core.templates import Json
from composer_engine import ValidDefinition, validate_definition
from composer_engine.records import Definition

JSON_TYPES = frozenset({"application/json"})
YAML_TYPES = frozenset(
    {"application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml", "text/plain", ""}
)


def json_response(model: BaseModel, status: int = 200, **headers: str) -> web.Response:
    return web.Response(
        status=status,
        text=model.model_dump_json(),
        content_type="application/json",
        headers=headers,
    )


def invalid(problems: list[Problem]) -> ApiProblem:
    count = len(problems)
    first = str(problems[0]) if problems else "invalid"
    return ApiProblem(
        422,
        "definition-invalid",
        f"the definition has {count} problem(s); the first: {first}",
        problems=[{"path": p.path, "message": p.message} for p in problems],
    )


async def parse_body(request: web.Request) -> ValidDefinition:
    """The definition in the body (YAML or JSON), validated completely by the engine."""
    raw = await bodies.read_bytes(request)
    limit = DEFAULT_LIMITS.max_definition_bytes
    if len(raw) > limit:
        raise bodies.too_large(len(raw), limit)
    media = request.content_type if request.headers.get("Content-Type") else ""
    try:
        if media in JSON_TYPES:
            try:
                data = bodies.decode_json(raw, "the definition", DEFAULT_LIMITS.max_depth + 4)
            except ApiProblem as exc:  # one answer for every broken definition: 422
                raise DefinitionInvalid([Problem("", exc.detail)]) from exc
            if not isinstance(data, dict):
                raise DefinitionInvalid(
                    [
                        Problem(
                            "",
                            f"a definition is a mapping with id and nodes, not {type(data).__name__}",
                        )
                    ]
                )
            definition = validate_definition(data)
        elif media in YAML_TYPES:
            definition = validate_definition(raw)  # which also refuses an alias bomb
        else:
            raise ApiProblem(
                415,
                "unsupported-media-type",
                f"a definition is sent as application/yaml or application/json, not {media}",
            )
        problem_text = bodies.storable_problem(definition.document, DEFAULT_LIMITS.max_depth + 4)
        if problem_text:
            raise DefinitionInvalid([Problem("", problem_text)])
    except DefinitionInvalid as exc:
        raise invalid(exc.problems) from exc
    return definition


async def create(request: web.Request) -> web.Response:
    """201 with a new version; 200 with the newest one when it already holds the
    definition (``Workflows.apply``), so applying an unchanged file adds nothing."""
    query = bodies.read_query(request, DeployQuery)
    applied = await request.app[WORKFLOWS].apply(
        await parse_body(request), deploy=query.deploy, created_by=request[CALLER].name
    )
    definition = applied.definition
    return json_response(
        DefinitionCreated(
            id=definition.workflow_id,
            version=definition.version,
            name=definition.name,
            deployed=definition.deployed,
            unchanged=applied.unchanged,
        ),
        200 if applied.unchanged else 201,
        Location=f"/v1/workflows/{definition.workflow_id}/versions/{definition.version}",
    )


async def list_all(request: web.Request) -> web.Response:
    summaries = await request.app[WORKFLOWS].summaries()
    return json_response(
        WorkflowList(
            workflows=[
                WorkflowSummary(
                    id=s.workflow_id,
                    name=s.name,
                    latest_version=s.latest_version,
                    deployed_version=s.deployed_version,
                    created_at=s.created_at,
                    updated_at=s.updated_at,
                )
                for s in summaries
            ]
        )
    )


async def show(request: web.Request) -> web.Response:
    workflow_id = bodies.workflow_id_param(request)
    versions = await request.app[WORKFLOWS].versions(workflow_id)
    deployed = next((v.version for v in versions if v.deployed), None)
    return json_response(
        WorkflowDetail(
            id=workflow_id,
            name=versions[0].name,
            latest_version=versions[0].version,
            deployed_version=deployed,
            versions=[
                VersionSummary(
                    version=v.version,
                    name=v.name,
                    webhook_url=_shown(v.webhook_url),
                    created_by=v.created_by,
                    deployed=v.deployed,
                    deployed_at=v.deployed_at,
                    created_at=v.created_at,
                )
                for v in versions
            ],
        )
    )


def _detail(d: Definition) -> VersionDetail:
    return VersionDetail(
        id=d.workflow_id,
        version=d.version,
        name=d.name,
        webhook_url=_shown(d.webhook_url),
        created_by=d.created_by,
        deployed=d.deployed,
        deployed_at=d.deployed_at,
        created_at=d.created_at,
        spec=_shown_spec(d.spec),
    )


def _shown(url: str | None) -> str | None:
    return None if url is None else hide_credentials(url)


def _shown_spec(spec: Json) -> Json:
    """The stored definition with its webhook_url's credentials hidden."""
    if isinstance(spec, dict) and isinstance(spec.get("webhook_url"), str):
        return spec | {"webhook_url": hide_credentials(spec["webhook_url"])}
    return spec


async def show_version(request: web.Request) -> web.Response:
    workflow_id = bodies.workflow_id_param(request)
    version = bodies.version_param(request, workflow_id)
    definition = await request.app[WORKFLOWS].get(workflow_id, version)
    return json_response(_detail(definition))


async def deploy(request: web.Request) -> web.Response:
    workflow_id = bodies.workflow_id_param(request)
    version = bodies.version_param(request, workflow_id)
    definition = await request.app[WORKFLOWS].deploy(workflow_id, version)
    return json_response(_detail(definition))


async def delete(request: web.Request) -> web.Response:
    workflow_id = bodies.workflow_id_param(request)
    versions = await request.app[WORKFLOWS].delete(workflow_id)
    return json_response(WorkflowDeleted(id=workflow_id, deleted_versions=versions))
