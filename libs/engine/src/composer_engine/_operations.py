"""Bulk operations: cancel or retry every run a filter matches, or the runs named,
in the background at a bounded rate (docs/architecture.md §6.7).

The api-gateway stores an operation (``start``) and answers its id; a loop in the
lease-sweeper (one replica at a time) calls ``advance`` every few seconds with a
budget of runs. An operation first collects the ids of the runs it will touch,
a page of the listing at a time (keyset by id, resumable: the cursor is stored
with each page), then settles each run once: the cancel or retry and the item's
outcome commit in one transaction, so a restart never applies one twice.

Outcomes, counted on the operation: ``done`` (the run is cancelled, by this
operation or before it; or retried), ``skipped`` (nothing to do: a cancel of a run
that finished otherwise, a retry of a run still going or with no failed node) and
``failed`` (the run could not be touched: gone, or an error; ``last_error`` says).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import composer_repo as repo
from composer_core.model import RunStatus, TaskState
from composer_engine._runs import RunCommands
from composer_engine._shell import Shell
from composer_engine._tx import Tx
from composer_engine.errors import BadRequest, Conflict, EngineError, Unavailable

Action = Literal["cancel", "retry"]
#: Run ids one request may name.
MAX_RUN_IDS = 1000
#: Run ids collected per page of the listing.
COLLECT_PAGE = 500
_RETRIED_FROM = (TaskState.FAILED, TaskState.CANCELLED)


@dataclass(frozen=True, slots=True)
class RunFilter:
    """The listing's parameters (GET /v1/runs) an operation applies to."""

    workflow_id: str | None = None
    status: RunStatus | None = None
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    created_after: dt.datetime | None = None
    created_before: dt.datetime | None = None

    def is_empty(self) -> bool:
        return not (
            self.workflow_id
            or self.status
            or self.labels
            or self.created_after
            or self.created_before
        )

    def document(self) -> dict[str, Any]:
        """The stored form (``run_operations.filter``)."""
        return {
            "workflow_id": self.workflow_id,
            "status": None if self.status is None else self.status.value,
            "labels": dict(self.labels),
            "created_after": None if self.created_after is None else self.created_after.isoformat(),
            "created_before": None
            if self.created_before is None
            else self.created_before.isoformat(),
        }

    @classmethod
    def from_document(cls, doc: Mapping[str, Any]) -> RunFilter:
        def when(key: str) -> dt.datetime | None:
            value = doc.get(key)
            return None if value is None else dt.datetime.fromisoformat(value)

        status = doc.get("status")
        return cls(
            workflow_id=doc.get("workflow_id"),
            status=None if status is None else RunStatus(status),
            labels=dict(doc.get("labels") or {}),
            created_after=when("created_after"),
            created_before=when("created_before"),
        )


class Operations:
    """Store bulk operations, show them, and move them on."""

    def __init__(self, shell: Shell, runs: RunCommands) -> None:
        self._shell = shell
        self._runs = runs

    async def start(
        self,
        action: Action,
        *,
        filter: RunFilter | None = None,
        run_ids: Sequence[str] | None = None,
        reason: str = "",
        from_node: str | None = None,
        requested_by: str | None = None,
        idempotency_key: str | None = None,
    ) -> tuple[str, bool]:
        """Store an operation over the runs ``filter`` matches or the ``run_ids``
        (exactly one of them); returns its id and whether it is new (False: the
        ``idempotency_key`` was used, and that operation's id comes back)."""
        if (filter is None) == (run_ids is None):
            raise BadRequest("give either a filter or run_ids, not both and not neither")
        if filter is not None and filter.is_empty():
            raise BadRequest(
                "the filter is empty, which would match every run: give at least one of "
                "workflow_id, status, label, created_after, created_before"
            )
        if run_ids is not None and not 1 <= len(run_ids) <= MAX_RUN_IDS:
            raise BadRequest(f"run_ids must name 1 to {MAX_RUN_IDS} runs, not {len(run_ids)}")
        operation_id = self._shell.new_id()

        async def write(tx: Tx) -> tuple[str, bool]:
            stored, created = await repo.insert_operation(
                tx.conn,
                operation_id,
                action=action,
                filter=None if filter is None else filter.document(),
                reason=reason,
                from_node=from_node,
                requested_by=requested_by,
                idempotency_key=idempotency_key,
            )
            if created and run_ids is not None:
                await repo.collect_operation_items(
                    tx.conn, stored, sorted(set(run_ids)), cursor="", last=True
                )
            return stored, created

        return await self._shell.in_tx(write)

    async def get(self, operation_id: str) -> repo.OperationRecord:
        """One operation and its progress (NotFound)."""

        async def read(tx: Tx) -> repo.OperationRecord:
            return await repo.get_operation(tx.conn, operation_id)

        return await self._shell.in_tx(read)

    async def advance(self, *, budget: int, collect_pages: int = 20) -> int:
        """Move the going operations on, oldest first: collect up to ``collect_pages``
        pages of run ids each, and settle at most ``budget`` runs in all. Returns the
        runs settled. Call it from one process at a time (the lease-sweeper holds an
        advisory lock around it); Unavailable stops it, and the next call resumes."""

        async def going(tx: Tx) -> list[repo.OperationRecord]:
            return await repo.going_operations(tx.conn, limit=20)

        settled = 0
        for op in await self._shell.in_tx(going):
            if not op.collected:
                await self._collect(op, collect_pages)
            while settled < budget:
                pending = await self._pending(op.operation_id, min(budget - settled, 100))
                if not pending:
                    break
                for run_id in pending:
                    await self._settle(op, run_id)
                    settled += 1
            await self._finish(op.operation_id)
            if settled >= budget:
                break
        return settled

    async def _collect(self, op: repo.OperationRecord, pages: int) -> None:
        flt = RunFilter.from_document(op.filter if isinstance(op.filter, dict) else {})
        cursor = op.cursor
        for _ in range(pages):

            async def page(tx: Tx, cursor: str = cursor) -> str | None:
                found = await repo.list_runs(
                    tx.conn,
                    workflow_id=flt.workflow_id,
                    status=flt.status,
                    labels=flt.labels,
                    created_after=flt.created_after,
                    created_before=flt.created_before,
                    cursor=cursor,
                    limit=COLLECT_PAGE,
                )
                ids = [r.run_id for r in found.runs]
                nxt = found.next_cursor
                await repo.collect_operation_items(
                    tx.conn, op.operation_id, ids, cursor=nxt or "", last=nxt is None
                )
                return nxt

            nxt = await self._shell.in_tx(page)
            if nxt is None:
                return
            cursor = nxt

    async def _pending(self, operation_id: str, limit: int) -> list[str]:
        async def read(tx: Tx) -> list[str]:
            return await repo.pending_operation_items(tx.conn, operation_id, limit=limit)

        return await self._shell.in_tx(read)

    async def _finish(self, operation_id: str) -> None:
        async def write(tx: Tx) -> bool:
            return await repo.finish_operation(tx.conn, operation_id)

        await self._shell.in_tx(write)

    async def _mark(
        self, op: repo.OperationRecord, run_id: str, outcome: repo.Outcome, error: str | None
    ) -> None:
        async def write(tx: Tx) -> bool:
            return await repo.settle_operation_item(
                tx.conn, op.operation_id, run_id, outcome, error
            )

        await self._shell.in_tx(write)

    async def _settle(self, op: repo.OperationRecord, run_id: str) -> None:
        """Cancel or retry one run and record its outcome, once."""

        async def done(tx: Tx) -> bool:
            return await repo.settle_operation_item(tx.conn, op.operation_id, run_id, "done")

        try:
            if op.action == "cancel":
                await self._runs.cancel(run_id, op.reason, cancelled_by=op.requested_by, then=done)
            else:
                node = op.from_node or await self._failed_node(run_id)
                if node is None:
                    await self._mark(op, run_id, "skipped", "no failed or cancelled node")
                    return
                await self._runs.retry(run_id, node, retried_by=op.requested_by, then=done)
        except Unavailable:
            raise
        except Conflict as exc:  # finished otherwise (cancel), still going (retry)
            await self._mark(op, run_id, "skipped", str(exc))
        except EngineError as exc:
            await self._mark(op, run_id, "failed", f"run {run_id}: {exc}")

    async def _failed_node(self, run_id: str) -> str | None:
        """The node a retry without ``from_node`` starts from: the run's first failed
        or cancelled node, in the order its tasks were created."""

        async def read(tx: Tx) -> str | None:
            tasks = await repo.get_run_tasks(tx.conn, run_id)
            return next((t.node_id for t in tasks if t.state in _RETRIED_FROM), None)

        return await self._shell.in_tx(read)
