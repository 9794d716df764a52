"""The events the background loops apply: a WAIT's timer fires (the timer), an
expired lease fails its attempt and a lost dispatch is sent again (the
lease-sweeper). What each loop decides to do is ``_recovery``'s pure policy;
this module applies it.
"""

from __future__ import annotations

import composer_repo as repo
from composer_common.codes import ErrorCode
from composer_core.statemachine import NodeFailed, TimerFired
from composer_engine._persist import write_dispatch
from composer_engine._shell import Shell
from composer_engine._tx import Tx
from composer_engine.errors import BadRequest


class LoopEvents:
    """Timers firing, leases expiring, lost dispatches sent again."""

    def __init__(self, shell: Shell) -> None:
        self._shell = shell

    async def fire_timer(
        self, run_id: str, task_id: str, node_id: str, *, skip_locked: bool = False
    ) -> bool | None:
        """Apply TimerFired; False when the wait no longer needed it (resolved, cancelled).

        ``skip_locked`` (the timer loop) never waits for the run's lock: None means
        another transaction holds it (another timer replica firing it, or a worker's
        report), and the caller comes back on its next pass.
        """
        tr = await self._shell.apply(run_id, TimerFired(task_id, node_id), skip_locked=skip_locked)
        return None if tr is None else tr.ignored is None

    async def expire_lease(
        self, run_id: str, task_id: str, node_id: str, attempt: int, *, owner: str | None
    ) -> bool:
        """Fail a RUNNING attempt whose worker stopped renewing its lease ("lease
        expired"); its retry policy decides what follows. Fenced: False, changing
        nothing, unless ``owner`` still holds the lease and it is still expired by the
        database's clock, under the run lock and a lock on the task row."""
        ref = repo.TaskRef(run_id, task_id, node_id, attempt)

        async def still_expired(tx: Tx) -> str | None:
            if await repo.lock_expired_lease(tx.conn, ref, owner):
                return None
            return f"the lease of {node_id} attempt {attempt} was renewed, taken over or released"

        event = NodeFailed(
            task_id, node_id, attempt, f"lease expired (held by {owner})", ErrorCode.LEASE_EXPIRED
        )
        tr = await self._shell.apply(run_id, event, guard=still_expired)
        return tr is not None and tr.ignored is None

    async def redispatch(self, run_id: str, task_id: str, attempt: int) -> bool:
        """Dispatch a PENDING/QUEUED attempt again whose message was lost (Redis lost
        its streams, say), under the same attempt: the lease makes a duplicate harmless.
        False when the attempt moved on meanwhile. No run lock: one fenced row update
        and an outbox row, like a lease."""

        async def attempt_tx(tx: Tx) -> bool:
            run = await repo.get_run(tx.conn, run_id)
            dag = await self._shell.definitions.get(tx.conn, run.workflow_id, run.version)
            again = await repo.redispatch_task(tx.conn, run_id, task_id, attempt)
            if again is None:
                return False
            queue = again.queue or dag.queue(again.node_id)
            if queue is None:  # pragma: no cover - only worker nodes are dispatched
                raise BadRequest(f"node {again.node_id} of run {run_id} has no queue")
            await write_dispatch(
                tx,
                repo.TaskRef(run_id, task_id, again.node_id, attempt),
                queue=queue,
                not_before=None,
                admit=False,  # admitted when first sent: only sent again
            )
            tx.writes.history.append(
                repo.NewHistory(
                    run_id,
                    "task.dispatched",
                    node_id=again.node_id,
                    task_id=task_id,
                    attempt=attempt,
                    detail={"queue": queue, "again": "its message was lost"},
                )
            )
            return True

        return await self._shell.in_tx(attempt_tx)
