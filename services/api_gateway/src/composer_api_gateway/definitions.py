"""Handlers of /v1/workflows: create (YAML or JSON), list, show, deploy, delete.

A definition is validated completely (shape, graph, templates) before it is
stored, and a failure answers 422 with every problem and its path, so a user
fixes them all in one go.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from pydantic import BaseModel

import composer_repo as repo
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
from composer_api_gateway.problems import ApiProblem, from_repo
from composer_api_gateway.state import POOL
from composer_core.errors import DefinitionInvalid, Problem
from composer_core.model import DEFAULT_LIMITS, WorkflowSpec, build_dag, parse_definition

JSON_TYPES = frozenset({"application/json"})
YAML_TYPES = frozenset(
    {"application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml", "text/plain", ""}
)
#: Times to try again when a concurrent create took the same version number.
_CREATE_ATTEMPTS = 5


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


async def parse_body(request: web.Request) -> tuple[WorkflowSpec, dict[str, Any]]:
    """The definition in the body, validated completely; and what to store (JSON)."""
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
            spec = parse_definition(data)
        elif media in YAML_TYPES:
            spec = parse_definition(raw)  # which also refuses an alias bomb before building it
        else:
            raise ApiProblem(
                415,
                "unsupported-media-type",
                f"a definition is sent as application/yaml or application/json, not {media}",
            )
        stored = spec.model_dump(mode="json", by_alias=True, exclude_unset=True)
        problem_text = bodies.storable_problem(stored, DEFAULT_LIMITS.max_depth + 4)
        if problem_text:
            raise DefinitionInvalid([Problem("", problem_text)])
        build_dag(spec)
    except DefinitionInvalid as exc:
        raise invalid(exc.problems) from exc
    return spec, stored


async def create(request: web.Request) -> web.Response:
    query = bodies.read_query(request, DeployQuery)
    spec, stored = await parse_body(request)
    last: repo.Conflict | None = None
    for _ in range(_CREATE_ATTEMPTS):
        try:
            async with repo.transaction(request.app[POOL]) as conn:
                definition = await repo.create_definition(
                    conn,
                    spec.id,
                    name=spec.name or spec.id,
                    spec=stored,
                    webhook_url=spec.webhook_url,
                    deploy=query.deploy,
                )
        except repo.Conflict as exc:
            if not exc.retryable:
                raise
            last = exc
            continue
        return json_response(
            DefinitionCreated(
                id=definition.workflow_id,
                version=definition.version,
                name=definition.name,
                deployed=definition.deployed,
            ),
            201,
            Location=f"/v1/workflows/{definition.workflow_id}/versions/{definition.version}",
        )
    assert last is not None
    raise from_repo(last)


async def list_all(request: web.Request) -> web.Response:
    async with repo.transaction(request.app[POOL]) as conn:
        summaries = await repo.list_definitions(conn)
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
    async with repo.transaction(request.app[POOL]) as conn:
        versions = await repo.list_definition_versions(conn, workflow_id)
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
                    webhook_url=v.webhook_url,
                    created_by=v.created_by,
                    deployed=v.deployed,
                    deployed_at=v.deployed_at,
                    created_at=v.created_at,
                )
                for v in versions
            ],
        )
    )


def _detail(d: repo.Definition) -> VersionDetail:
    return VersionDetail(
        id=d.workflow_id,
        version=d.version,
        name=d.name,
        webhook_url=d.webhook_url,
        created_by=d.created_by,
        deployed=d.deployed,
        deployed_at=d.deployed_at,
        created_at=d.created_at,
        spec=d.spec,
    )


async def show_version(request: web.Request) -> web.Response:
    workflow_id = bodies.workflow_id_param(request)
    version = bodies.version_param(request, workflow_id)
    async with repo.transaction(request.app[POOL]) as conn:
        definition = await repo.get_definition(conn, workflow_id, version)
    return json_response(_detail(definition))


async def deploy(request: web.Request) -> web.Response:
    workflow_id = bodies.workflow_id_param(request)
    version = bodies.version_param(request, workflow_id)
    for attempt in range(_CREATE_ATTEMPTS):
        try:
            async with repo.transaction(request.app[POOL]) as conn:
                definition = await repo.deploy_definition(conn, workflow_id, version)
            return json_response(_detail(definition))
        except repo.Conflict as exc:
            if not exc.retryable or attempt == _CREATE_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


async def delete(request: web.Request) -> web.Response:
    workflow_id = bodies.workflow_id_param(request)
    async with repo.transaction(request.app[POOL]) as conn:
        versions = await repo.delete_definition(conn, workflow_id)
    return json_response(WorkflowDeleted(id=workflow_id, deleted_versions=versions))
