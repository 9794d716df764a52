"""Run events: applying an event one run sent another (a child's end, a parent's
cancel), exactly once, under the target run's lock (docs/architecture.md §4.10;
what the events are and how they are written: engine/_run_events.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Sequence

import composer_repo as repo
from composer_common.logs import alert
from composer_core.model import DEFAULT_PRIORITY, FlowError, RunStatus, WorkflowDAG
from composer_core.statemachine import RunCancelled, RunStarted
from composer_engine import _history, _run_events
from composer_engine import opened as _opened
from composer_engine._run_admission import Handed
from composer_engine._run_starts import admit_start
from composer_engine._shell import Shell
from composer_engine._tx import Tx
from composer_engine.errors import EngineError, Unavailable

log = logging.getLogger("composer.engine")


class RunEventDelivery:
    """Delivers events between runs: right after their cause commits, and later
    (``deliver_due``, the outbox-enqueuer's fallback) what that missed."""

    def __init__(self, shell: Shell) -> None:
        self._shell = shell
        #: Deliveries running after their cause's commit.
        self._running: set[asyncio.Task[None]] = set()

    async def aclose(self) -> None:
        """Wait for the deliveries under way (one cut short is the enqueuer's to make)."""
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)

    async def deliver(self, event_id: int) -> bool:
        """Apply the event of outbox row ``event_id`` to its target run, once: the row
        is deleted in the transaction that applies it, under the target's lock. True
        when it changed the target; False when it was applied already or no longer
        applies (a stale attempt, a run finished meanwhile)."""
        shell = self._shell

        async def attempt(tx: Tx) -> bool:
            target = await repo.run_event_target(tx.conn, event_id)
            if target is None:
                return False
            try:
                locked = await repo.load_run(tx.conn, target)
            except repo.NotFound:  # the target run was deleted: nothing to tell it
                await repo.take_run_event(tx.conn, event_id)
                return False
            taken = await repo.take_run_event(tx.conn, event_id)
            if taken is None:
                return False  # another delivery applied it while this one waited
            event = _run_events.decode(taken, shell.sealer)
            if isinstance(event, RunCancelled) and locked.run.status.is_terminal:
                return False  # the child finished before its parent's cancel reached it
            dag = await shell.definitions.get(tx.conn, locked.run.workflow_id, locked.run.version)
            if isinstance(event, RunStarted):
                # handed its key's slot (§4.13), or a child its parent's node wrote
                # (§4.15): PENDING → RUNNING, unless it was cancelled while the start
                # was on its way (its end gave the slot on)
                if locked.run.status is not RunStatus.PENDING:
                    return False
                if await self._start_pending(tx, dag, locked, event) is not RunStatus.RUNNING:
                    return True  # a child over its key's limit: it waits in line, or ended
                locked = dataclasses.replace(
                    locked, run=dataclasses.replace(locked.run, status=RunStatus.RUNNING)
                )
            sender = _run_events.sender(taken)
            by = None if sender is None else f"run {sender}"
            transition = await shell.decide(tx, dag, locked, event, by=by)
            if transition.ignored is None and sender not in (None, target):
                finished = _history.child_finished(target, sender, taken)
                if finished is not None:
                    tx.writes.history.append(finished)
            return transition.ignored is None

        return await shell.in_tx(attempt)

    async def _start_pending(
        self, tx: Tx, dag: WorkflowDAG, locked: repo.LockedRun, event: RunStarted
    ) -> RunStatus:
        """PENDING → RUNNING for a run handed its key's slot, or one without limits; a
        child run of a workflow with run concurrency takes a slot of its key as it
        starts, like any start (§4.13), or waits in its key's line, or ends CANCELLED
        (cancel_newest, or limits its input cannot render; its end tells its parent)."""
        flow = dag.flow
        run = locked.run
        shell = self._shell
        if (
            flow is None
            or (flow.max_runs is None and flow.priority is None)
            # handed its slot: its limit and priority were rendered as it joined the line
            or (flow.max_runs is not None and await repo.holds_run_slot(tx.conn, run.run_id))
        ):
            await repo.start_waiting_run(tx.conn, run.run_id)  # PENDING under its lock
            return RunStatus.RUNNING
        opened = _opened.snapshot(shell.sealer, run)
        try:
            rendered = flow.render(dag.engine, opened.input, opened.config)
        except FlowError as exc:
            await shell.decide(tx, dag, locked, RunCancelled(f"not started: {exc}"))
            return RunStatus.CANCELLED
        if rendered.priority != DEFAULT_PRIORITY:  # its attempts wait by it (§4.16)
            await repo.set_run_priority(tx.conn, run.run_id, rendered.priority)
        if flow.max_runs is None:
            await repo.start_waiting_run(tx.conn, run.run_id)
            return RunStatus.RUNNING
        seal = await shell.run_seal(tx, locked)
        return await admit_start(
            shell, tx, dag, locked, rendered, seal, start_node=event.start_node, by=None
        )

    async def deliver_due(self, *, grace: float, limit: int = 100, retry_after: float = 5.0) -> int:
        """Deliver the events their committer did not, once they are ``grace`` seconds
        old (the outbox-enqueuer's fallback): how many were looked at. One that fails
        is tried again ``retry_after`` seconds later (an ALERT says why), never
        holding up the others."""
        try:
            async with repo.connection(self._shell.pool) as conn:
                due = await repo.due_run_events(conn, limit=limit, grace=grace)
        except repo.RepoError as exc:  # the database is away: the caller backs off
            raise Unavailable(f"looking for undelivered events between runs failed: {exc}") from exc
        for event_id in due:
            try:
                await self.deliver(event_id)
            except (EngineError, _run_events.UnknownRunEvent) as exc:
                alert(
                    log,
                    "event %d for another run could not be applied (%s); trying again in %.0fs",
                    event_id,
                    exc,
                    retry_after,
                )
                try:
                    async with repo.connection(self._shell.pool) as conn:
                        await repo.postpone_run_event(conn, event_id, retry_after, str(exc))
                except repo.RepoError as lost:  # tried again on the next pass, unpostponed
                    raise Unavailable(f"postponing event {event_id} failed: {lost}") from lost
        return len(due)

    def deliver_soon(self, event_ids: Sequence[int]) -> None:
        """Deliver a commit's events in the background: its caller (a worker's report,
        say) does not wait for another run's transaction. A failure leaves the row to
        the outbox-enqueuer."""
        ids = list(event_ids)

        async def deliver() -> None:
            for event_id in ids:
                try:
                    await self.deliver(event_id)
                except Exception as exc:  # the enqueuer's fallback delivers it later
                    log.warning(
                        "delivering event %d to another run failed (%s): the "
                        "outbox-enqueuer delivers it after its grace period",
                        event_id,
                        exc,
                    )

        task = asyncio.get_running_loop().create_task(deliver(), name="run-event-delivery")
        self._running.add(task)
        task.add_done_callback(self._running.discard)


async def start_handed(shell: Shell, tx: Tx, handed: Handed) -> bool:
    """Start, in the group commit whose finished run freed it, the run handed its key's
    slot (§4.13): its first tasks are dispatched in that transaction, where a report's
    worker may take one with its answer (§3.2), and no event, delivery or transaction
    of its own is spent on the start. False, having written nothing, when another
    transaction holds the run's lock (never waited for: the group commit holds many
    runs' locks) or it is no longer PENDING: it is sent the start as an event instead."""
    run_id = handed.waiting.run_id
    locked = await repo.try_load_run(tx.conn, run_id)
    if locked is None or locked.run.status is not RunStatus.PENDING:
        return False
    dag = await shell.definitions.get(tx.conn, locked.run.workflow_id, locked.run.version)
    await repo.start_waiting_run(tx.conn, run_id)
    running = dataclasses.replace(
        locked, run=dataclasses.replace(locked.run, status=RunStatus.RUNNING)
    )
    await shell.decide(
        tx, dag, running, RunStarted(handed.waiting.start_node), by=f"run {handed.from_run}"
    )
    return True
