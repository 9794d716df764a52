"""Pause and resume a run: a person holds a run while someone looks into it, then lets
it go on (docs/architecture.md §4.14). Each is one transaction under the run's lock.

While a run is PAUSED: its attempts already with a worker finish and are recorded;
whatever it would send to a worker is held (PENDING, ``repo.PAUSED_HOLD``), through
the same hold as the admission step's (§4.12), and a stream entry already published
is refused by the lease; its timers are kept (the timer leaves a paused run's waits
alone); a signal is buffered; and it does not finish by itself. A resume sends the
held attempts (through the admission step; a retry's backoff still ahead is kept),
gives buffered signals to the nodes that wait for them, lets the timer fire what
came due, and finishes the run if nothing is left. A cancel works while paused.
"""

from __future__ import annotations

import dataclasses

import composer_queue as cq
import composer_repo as repo
from composer_core.model import RunStatus
from composer_core.statemachine import RunResumed
from composer_engine._persist import stored_keys
from composer_engine._shell import Shell
from composer_engine._tx import Tx
from composer_engine.errors import BadRequest, Conflict
from composer_engine.sealing import looks_sealed


class RunPauses:
    """Pause and resume runs."""

    def __init__(self, shell: Shell) -> None:
        self._shell = shell

    async def pause(self, run_id: str, reason: str = "", *, paused_by: str | None = None) -> bool:
        """Pause a run still going: True when this call paused it, False when it was
        paused already (a pause sent again changes nothing). A finished run is a
        Conflict. ``paused_by``, the API token's name, is the ``run.paused`` row's actor."""
        if looks_sealed(reason):  # it is stored in the run's history
            raise BadRequest(
                "the pause reason starts with '$sealed:v1:', which Composer keeps for sealed "
                "documents: word it otherwise"
            )

        async def attempt(tx: Tx) -> bool:
            locked = await repo.load_run(tx.conn, run_id)
            status = locked.run.status
            if status is RunStatus.PAUSED:
                return False
            if status.is_terminal:
                raise _finished(run_id, status, "paused")
            if status is RunStatus.PENDING:  # its start waits for a slot of its key (§4.13)
                raise Conflict(
                    f"run {run_id} is PENDING: it waits for a slot of its concurrency key and "
                    "has not started, so there is nothing to pause; cancel it, or pause it "
                    "once it is RUNNING",
                    run_status=status.value,
                )
            tx.now = locked.now
            seal = await self._shell.run_seal(tx, locked)
            await repo.pause_run(tx.conn, run_id)
            held = await repo.hold_run_tasks(tx.conn, run_id)
            history = tx.writes.history
            history.append(
                repo.NewHistory(
                    run_id,
                    "run.paused",
                    actor=paused_by,
                    detail=seal.doc({"reason": reason.strip()}),
                )
            )
            for h in held:
                history.append(
                    repo.NewHistory(
                        run_id,
                        "task.held",
                        node_id=h.node_id,
                        task_id=h.task_id,
                        attempt=h.attempt,
                        detail={"queue": h.queue, "reason": repo.PAUSED_HOLD},
                    )
                )
            # held attempts were on their way to a worker: their queues (and their nodes'
            # concurrency keys) have room now
            tx.writes.free(tx, [h.queue for h in held])
            if held:
                dag = await self._shell.definitions.get(
                    tx.conn, locked.run.workflow_id, locked.run.version
                )
                tx.writes.free(tx, [line.key for line in dag.node_lines])
                if dag.templated_keys:  # keys rendered per task: on their rows
                    tx.writes.free(tx, await stored_keys(tx, run_id, [h.task_id for h in held]))
            return True

        return await self._shell.in_tx(attempt)

    async def resume(self, run_id: str, *, resumed_by: str | None = None) -> bool:
        """Resume a paused run: True when this call resumed it, False when it was not
        paused (running: a resume sent again changes nothing). A finished run is a
        Conflict."""

        async def attempt(tx: Tx) -> bool:
            locked = await repo.load_run(tx.conn, run_id)
            status = locked.run.status
            if status.is_terminal:
                raise _finished(run_id, status, "resumed")
            if status is not RunStatus.PAUSED:
                return False
            tx.now = locked.now
            await repo.resume_run(tx.conn, run_id)
            running = dataclasses.replace(
                locked, run=dataclasses.replace(locked.run, status=RunStatus.RUNNING)
            )
            dag = await self._shell.definitions.get(
                tx.conn, locked.run.workflow_id, locked.run.version
            )
            # buffered signals to their waiting nodes (the held tasks are still active, so
            # the run finishes here only when none was held)
            await self._shell.decide(tx, dag, running, RunResumed(), by=resumed_by)
            # the children its nodes wrote while paused start now
            tx.run_events.extend(await repo.release_child_starts(tx.conn, run_id))
            delayed = False
            for h in await repo.release_run_tasks(tx.conn, run_id):
                ref = repo.TaskRef(run_id, h.task_id, h.node_id, h.attempt)
                # through the admission step, which may hold it again for its queue or key
                delayed |= not tx.writes.dispatch(
                    tx,
                    ref,
                    queue=h.queue,
                    not_before=h.not_before,
                    line=dag.node_line(h.node_id),
                )
                tx.writes.history.append(
                    repo.NewHistory(
                        run_id,
                        "task.released",
                        node_id=h.node_id,
                        task_id=h.task_id,
                        attempt=h.attempt,
                        detail={"queue": h.queue},
                    )
                )
            await tx.writes.flush(tx)
            redis, prefix = self._shell.redis, self._shell.prefix
            if redis is not None:  # timers that came due while it was paused fire now
                tx.hint(redis, prefix, cq.TIMER)
                if delayed:
                    tx.hint(redis, prefix, cq.ENQUEUER)
            return True

        return await self._shell.in_tx(attempt)


def _finished(run_id: str, status: RunStatus, verb: str) -> Conflict:
    return Conflict(
        f"run {run_id} is {status}: only a run still going (RUNNING or PAUSED) can be "
        f"{verb}; to run it again, retry it from a node",
        run_status=status.value,
    )
