"""Starting a PENDING run of a limited key, the one step a new run and a child run
its parent's node wrote share (docs/architecture.md §4.13). Apart from
``_run_admission`` because it decides through the shell, which the writes that
hand slots on (``_writes``) must not import."""

from __future__ import annotations

import logging

import composer_repo as repo
from composer_core.model import RunFlow, RunStatus, WorkflowDAG
from composer_core.statemachine import RunCancelled
from composer_engine._run_admission import Outcome, admit_run
from composer_engine._shell import Shell
from composer_engine._tx import Tx
from composer_engine.sealing import RunSeal

log = logging.getLogger("composer.engine")


async def admit_start(
    shell: Shell,
    tx: Tx,
    dag: WorkflowDAG,
    locked: repo.LockedRun,
    flow: RunFlow,
    seal: RunSeal,
    *,
    start_node: str | None,
    by: str | None,
) -> RunStatus:
    """Start a PENDING run of a limited key as its admission says — a new run, or a
    child its parent's node wrote — and say where it is now: RUNNING (it holds a
    slot; the caller decides its start), PENDING (it waits in its key's line, a
    ``run.queued`` history row says why) or CANCELLED (``cancel_newest``; its end
    tells a parent)."""
    run = locked.run
    admission = await admit_run(
        tx.conn,
        tx.writes.run_events,
        run.workflow_id,
        run.run_id,
        flow,
        seal,
        start_node=start_node,
    )
    if admission.outcome is Outcome.GO:
        await repo.start_waiting_run(tx.conn, run.run_id)
        return RunStatus.RUNNING
    if admission.outcome is Outcome.WAIT:
        tx.writes.history.append(
            repo.NewHistory(
                run.run_id, "run.queued", actor=by, detail=seal.doc({"reason": admission.reason})
            )
        )
        await tx.writes.flush(tx)
        tx.after_commit(
            lambda: log.info(
                "run %s of %s v%d is waiting for a slot of its key",
                run.run_id,
                run.workflow_id,
                run.version,
            )
        )
        return RunStatus.PENDING
    await shell.decide(tx, dag, locked, RunCancelled(admission.reason or ""), by=by)
    return RunStatus.CANCELLED
