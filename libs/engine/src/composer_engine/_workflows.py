"""The definitions use case: validate a workflow, store its next version, deploy, delete.

A definition is validated completely (shape, graph, templates) before it is
stored, so a stored version always builds; every write runs in a transaction
of its own, tried again on a transient failure or a lost race for the next
version number (``in_transaction``). The API gateway and the end-to-end
tests both call this, so there is one way a definition gets stored.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import composer_repo as repo
from composer_core.errors import DefinitionInvalid
from composer_core.model import WorkflowSpec, build_dag, parse_definition
from composer_core.templates import Json
from composer_engine._schedules import sync_schedules
from composer_engine._transaction import DEFAULT_ATTEMPTS, in_transaction
from composer_engine._tx import Tx


@dataclass(frozen=True, slots=True)
class ValidDefinition:
    """A definition that passed every check, and the document stored for it."""

    spec: WorkflowSpec
    #: The spec as JSON (aliases, only the fields the author set): what ``create`` stores.
    document: dict[str, Any]

    def same_as(self, stored: Json) -> bool:
        """Whether a stored spec means the same workflow: both normalized by the model
        (defaults filled in, key order and YAML layout gone), so re-applying a file
        whose only change is a comment or a default spelled out is no new version."""
        if not isinstance(stored, dict):
            return False
        try:
            other = parse_definition(stored)
        except DefinitionInvalid:  # stored under older rules: treat it as different
            return False
        return _normalized(other) == _normalized(self.spec)


@dataclass(frozen=True, slots=True)
class Applied:
    """What ``Workflows.apply`` did: the version that holds the definition, and whether
    it was the newest version already (nothing stored)."""

    definition: repo.Definition
    unchanged: bool


def _normalized(spec: WorkflowSpec) -> str:
    return json.dumps(spec.model_dump(mode="json", by_alias=True), sort_keys=True)


def validate_definition(source: str | bytes | Mapping[str, Any]) -> ValidDefinition:
    """Parse YAML/JSON text or a decoded mapping and build its graph.

    Raises ``composer_core.errors.DefinitionInvalid`` listing every problem
    with its path, so an author can fix them all in one go.
    """
    spec = parse_definition(source)
    document = spec.model_dump(mode="json", by_alias=True, exclude_unset=True)
    build_dag(spec)
    return ValidDefinition(spec, document)


class Workflows:
    """Workflow definitions: create, apply, deploy, delete, and read them."""

    def __init__(self, pool: repo.Pool, *, attempts: int = DEFAULT_ATTEMPTS) -> None:
        self.pool = pool
        self._attempts = attempts

    async def create(
        self, definition: ValidDefinition, *, deploy: bool = False, created_by: str | None = None
    ) -> repo.Definition:
        """Store the next version (1 for a new workflow), deployed in the same transaction
        when ``deploy`` is set, so the version never exists undeployed to others."""
        spec = definition.spec

        async def attempt(tx: Tx) -> repo.Definition:
            created = await repo.create_definition(
                tx.conn,
                spec.id,
                name=spec.name or spec.id,
                spec=definition.document,
                webhook_url=spec.webhook_url,
                created_by=created_by,
                deploy=deploy,
            )
            if deploy:
                await sync_schedules(tx, spec)
            return created

        return await in_transaction(self.pool, attempt, attempts=self._attempts)

    async def apply(
        self, definition: ValidDefinition, *, deploy: bool = False, created_by: str | None = None
    ) -> Applied:
        """``create``, unless the workflow's newest version already holds the same
        definition (compared normalized, ``ValidDefinition.same_as``): then that version
        comes back ``unchanged`` (deployed now when ``deploy`` is set), so applying the
        same file twice, as scripts and CI do, adds no version. Runs in one transaction:
        two identical applies at once give one new version (the loser of the race for
        its number tries again and finds it)."""
        spec = definition.spec

        async def attempt(tx: Tx) -> Applied:
            latest = await repo.latest_definition(tx.conn, spec.id)
            if latest is not None and definition.same_as(latest.spec):
                if deploy and not latest.deployed:
                    latest = await repo.deploy_definition(tx.conn, spec.id, latest.version)
                    await sync_schedules(tx, spec)
                return Applied(latest, unchanged=True)
            created = await repo.create_definition(
                tx.conn,
                spec.id,
                name=spec.name or spec.id,
                spec=definition.document,
                webhook_url=spec.webhook_url,
                created_by=created_by,
                deploy=deploy,
            )
            if deploy:
                await sync_schedules(tx, spec)
            return Applied(created, unchanged=False)

        return await in_transaction(self.pool, attempt, attempts=self._attempts)

    async def deploy(self, workflow_id: str, version: int) -> repo.Definition:
        """Make ``version`` the one new runs start on. NotFound for a missing version,
        BadRequest for a deleted one."""

        async def attempt(tx: Tx) -> repo.Definition:
            deployed = await repo.deploy_definition(tx.conn, workflow_id, version)
            await sync_schedules(tx, parse_definition(deployed.spec))
            return deployed

        return await in_transaction(self.pool, attempt, attempts=self._attempts)

    async def delete(self, workflow_id: str) -> list[int]:
        """Soft-delete every version (runs already started finish) and the workflow's
        schedules; the versions deleted."""

        async def attempt(tx: Tx) -> list[int]:
            for schedule in await repo.list_schedules(tx.conn, workflow_id=workflow_id):
                await repo.delete_schedule(tx.conn, schedule.schedule_id)
            return await repo.delete_definition(tx.conn, workflow_id)

        return await in_transaction(self.pool, attempt, attempts=self._attempts)

    # -- reads -----------------------------------------------------------------------

    async def summaries(self) -> list[repo.WorkflowSummary]:
        """Every workflow: its latest and deployed versions."""

        async def read(tx: Tx) -> list[repo.WorkflowSummary]:
            return await repo.list_definitions(tx.conn)

        return await in_transaction(self.pool, read, attempts=self._attempts)

    async def versions(self, workflow_id: str) -> list[repo.DefinitionVersion]:
        """The workflow's versions, newest first (NotFound: no such workflow)."""

        async def read(tx: Tx) -> list[repo.DefinitionVersion]:
            return await repo.list_definition_versions(tx.conn, workflow_id)

        return await in_transaction(self.pool, read, attempts=self._attempts)

    async def get(self, workflow_id: str, version: int) -> repo.Definition:
        """One version of the workflow, with its spec (NotFound: no such version)."""

        async def read(tx: Tx) -> repo.Definition:
            return await repo.get_definition(tx.conn, workflow_id, version)

        return await in_transaction(self.pool, read, attempts=self._attempts)
