"""The bounded cache of built WorkflowDAGs, keyed by (workflow, version).

A version never changes once stored, so a cached DAG never goes stale;
building one (validation and compiling every template) costs milliseconds,
which is why every event must not pay it.
"""

from __future__ import annotations

from cachetools import LRUCache

import composer_repo as repo
from composer_core.errors import DefinitionInvalid
from composer_core.model import WorkflowDAG, build_dag, parse_definition
from composer_engine.errors import BadRequest


class DefinitionCache:
    def __init__(self, maxsize: int = 512) -> None:
        self._dags: LRUCache[tuple[str, int], WorkflowDAG] = LRUCache(maxsize=maxsize)
        self.hits = 0
        self.misses = 0

    async def get(self, conn: repo.Connection, workflow_id: str, version: int) -> WorkflowDAG:
        """The DAG of a stored version (deleted ones too: their runs still finish)."""
        key = (workflow_id, version)
        dag = self._dags.get(key)
        if dag is not None:
            self.hits += 1
            return dag
        self.misses += 1
        definition = await repo.get_definition(conn, workflow_id, version, include_deleted=True)
        dag = build(definition.spec, version)
        self._dags[key] = dag
        return dag

    async def deployed(self, conn: repo.Connection, workflow_id: str) -> WorkflowDAG:
        """The DAG of the version new runs use: its number always read (deploys move
        it), its spec only when that version is not cached yet."""
        version = await repo.deployed_version(conn, workflow_id)
        return await self.get(conn, workflow_id, version)

    def __len__(self) -> int:
        return len(self._dags)


def build(spec: object, version: int) -> WorkflowDAG:
    try:
        # stored: rules added since it was validated are checked at run time instead
        return build_dag(parse_definition(spec), version=version, stored=True)  # type: ignore[arg-type]
    except DefinitionInvalid as exc:  # stored specs were validated: only a rule change gets here
        raise BadRequest(f"stored definition version {version} no longer validates: {exc}") from exc
