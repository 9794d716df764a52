"""The writes of a transaction held back to go in one statement per kind.

A group commit applies many events in one transaction (docs/architecture.md
§3.1); written one statement per action, its length would grow with every
event by several round trips. The hot actions are gathered here instead and
flushed before the commit — or before any other write, which keeps the
machine's order wherever it matters — as one statement each: completions,
then new tasks, then resolved waits, then their outbox rows, then finished runs,
then the run history's rows. A write that matches no row is a stale snapshot.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeAlias

import composer_queue as cq
import composer_repo as repo
from composer_common.telemetry import traceparent
from composer_core.model import NodeLine, RenderedKeys, RunStatus
from composer_core.statemachine import FinishRun, NodeCompleted, NodeFailed, Run
from composer_core.templates import Json
from composer_engine import _run_events
from composer_engine._effects import Effects
from composer_engine._metrics import count_limits, instruments
from composer_engine._node_limits import hold_on_lines
from composer_engine._publish import Dispatched
from composer_engine._reported import AttemptLog
from composer_engine._run_admission import Handed, hand_on
from composer_engine.errors import StaleSnapshot
from composer_engine.sealing import RunSeal, looks_sealed

if TYPE_CHECKING:
    from composer_engine._admission import Gate


class Tx(Protocol):
    """What the writes need of their transaction (``_tx.Tx``, which holds them: named
    here by what it offers, so the two modules do not import each other)."""

    conn: repo.Connection
    #: The event's clock, once a run is locked.
    now: dt.datetime | None
    #: The dispatches due at once, published after the commit.
    dispatched: list[Dispatched]
    #: The outbox ids of the events for other runs, delivered after the commit.
    run_events: list[int]
    #: The admission step (None: no policy, every dispatch goes).
    gate: Gate | None
    #: The watched queues where a task finished: a release looks at them after the commit.
    freed: set[str]

    def after_commit(self, fn: Callable[[], Awaitable[None] | None]) -> None: ...


#: A dispatch held for the flush: the row, its attempt, its stream message, due at
#: once, through the admission step.
HeldDispatch: TypeAlias = tuple[repo.NewDispatch, repo.TaskRef, dict[str, str], bool, bool]


@dataclass(slots=True)
class Writes:
    completions: list[tuple[repo.TaskRef, Json, Effects]] = field(default_factory=list)
    tasks: list[repo.NewTask] = field(default_factory=list)
    #: Waits that complete or fail (a timer fired, a signal came, a wait timed out).
    resolved: list[repo.ResolvedWait] = field(default_factory=list)
    dispatches: list[HeldDispatch] = field(default_factory=list)
    finishes: list[tuple[Run, FinishRun, Effects, RunSeal]] = field(default_factory=list)
    #: The run history rows of every event of the transaction, in order (_history.py).
    history: list[repo.NewHistory] = field(default_factory=list)
    #: The log lines of the attempts whose reports were applied (docs/architecture.md,
    #: "Task logs"), sealed as the run's other documents.
    logs: list[repo.NewTaskLog] = field(default_factory=list)
    #: Events for other runs (a finished child's end, a cancelled parent's cancel),
    #: written after the finished runs that cause them (engine/_run_events.py).
    run_events: list[repo.NewRunEvent] = field(default_factory=list)
    #: The finishing runs whose workflow limits its runs per key: each gives up its
    #: slot (or its place in line) as it finishes (docs/architecture.md §4.13).
    slot_holders: set[str] = field(default_factory=set)
    #: The waiting runs handed the slots the transaction's finished runs freed. Each is
    #: sent a start (an event) when flushed, unless ``keep_handed``: a group commit
    #: starts them in its own transaction (engine/_run_event_delivery.py, ``start_handed``).
    handed: list[Handed] = field(default_factory=list)
    keep_handed: bool = False
    #: Runs of the transaction that are paused: their dispatches are held until their
    #: resume, not sent (docs/architecture.md §4.14).
    paused: set[str] = field(default_factory=set)
    #: task id → the node limits its dispatch goes through (§4.12): a task created in
    #: the transaction, with its rendered keys (a MAP item that waits for its place
    #: too, whose row carries them); one dispatched again, with its node's line.
    lines: dict[str, NodeLine] = field(default_factory=dict)
    #: MAP items that waited for a place and go now: (run id, task id).
    starts: list[tuple[str, str]] = field(default_factory=list)
    #: MAP progress to store, the last of the transaction's: (run id, MAP task id) → it.
    progress: dict[tuple[str, str], Json] = field(default_factory=dict)
    #: (run id, queue) → how many tasks the group commit's reports offer to take there
    #: (``Report.take_next``, engine/_reports.py): as many of the run's dispatches due
    #: at once on that queue are set aside in ``offered`` when flushed, with no outbox
    #: row: one leased with its report never needs one (``enqueue_offered``).
    offers: Counter[tuple[str, str]] = field(default_factory=Counter)
    offered: list[HeldDispatch] = field(default_factory=list)
    #: task id → the input of each worker task created in the transaction, as rendered
    #: (``tasks`` holds it sealed when its run is): a group commit's, which may lease a
    #: task as it is inserted (engine/_lease_ahead.py). None: not kept.
    clear_inputs: dict[str, Json] | None = None

    def keep_log(
        self, run_id: str, event: NodeCompleted | NodeFailed, log: AttemptLog, seal: RunSeal
    ) -> None:
        """Hold back the log of a reported attempt (nothing when it logged nothing)."""
        if not log.lines:
            return
        text = "\n".join(log.lines)
        if not seal.sealing and looks_sealed(text):  # never read back as a sealed text
            text = " " + text
        stored = seal.text(text)
        assert stored is not None
        self.logs.append(
            repo.NewTaskLog(
                run_id, event.task_id, event.node_id, event.attempt, stored, log.truncated
            )
        )

    def dispatch(
        self,
        tx: Tx,
        ref: repo.TaskRef,
        *,
        queue: str,
        not_before: dt.datetime | None,
        admit: bool = True,
        line: NodeLine | None = None,
    ) -> bool:
        """Hold back the outbox row of a new task's first dispatch; True when it is
        due at once (published right after the commit). ``admit``: it goes through the
        admission step, which may hold it (False: it was admitted before, and is only
        sent again); ``line``: through its node's concurrency key, not its queue's."""
        if line is not None and admit:
            # a task created in this transaction has its line with its keys rendered
            self.lines.setdefault(ref.task_id, line)
        fields = task_message(ref).fields()
        at_once = not_before is None or (tx.now is not None and not_before <= tx.now)
        self.dispatches.append(
            (
                repo.NewDispatch(ref.run_id, ref.task_id, queue, fields, not_before),
                ref,
                fields,
                at_once,
                admit,
            )
        )
        return at_once

    def free(self, tx: Tx, queues: Collection[str | None]) -> None:
        """Tasks of ``queues`` (or of node concurrency keys, ``global:…`` and
        ``workflow:…``) finished: after the commit, the admission step's release looks
        at the watched queues and at the keys."""
        gate = tx.gate
        if gate is None:
            return
        freed = {q for q in queues if q is not None and ":" in q} | set(gate.freed(queues))
        if not freed:
            return
        if not tx.freed:
            tx.after_commit(lambda: gate.release_soon(tx.freed))
        tx.freed.update(freed)

    async def flush(self, tx: Tx) -> None:
        """Write everything held: the completions, new tasks, history, logs and the
        dispatches no admission step holds, as held so far, in one statement
        (``repo.write_step``), then one statement per kind."""
        conn = tx.conn
        completions, tasks = self.completions, self.tasks
        done: dict[str, repo.FinishedTask] = {}
        inserted: set[str] = set()
        #: The held dispatches went with them (the block below for dispatches did not run).
        dispatched_early = False
        if completions or tasks:
            # one round trip: with them, what else is held so far (what the flush adds
            # below follows in statements of its own)
            self.completions, self.tasks = [], []
            history, self.history = self.history, []
            logs, self.logs = self.logs, []
            plain: list[HeldDispatch] = []
            if self.dispatches and not self.admitting(tx):
                plain, self.dispatches = self.dispatches, []
                dispatched_early = True
                if self.offers:
                    plain = self._set_aside_offered(plain)
            written = await repo.write_step(
                conn,
                completions=[(ref, out) for ref, out, _ in completions],
                tasks=tasks,
                history=history,
                logs=logs,
                dispatches=[row for row, *_ in plain],
            )
            done, inserted = written.completed, written.inserted
            self._dispatched(tx, plain, written.enqueued)
        if completions:
            for ref, _, effects in completions:
                task = done.get(ref.task_id)
                if task is None:
                    raise StaleSnapshot(f"task {ref.task_id} attempt {ref.attempt} is not active")
                effects.completed.append((task.node_type.value, _seconds(task)))
            # a node concurrency key's place, as the row names it; a watched queue's
            self.free(tx, [task.limit_key for task in done.values() if task.limit_key])
            if tx.gate is not None and tx.gate.policy is not None:
                self.free(tx, [task.queue for task in done.values()])
        if tasks:
            for t in tasks:
                if t.task_id not in inserted:
                    raise StaleSnapshot(f"node {t.node_id} of run {t.run_id} already has a task")
            if self.lines:  # tasks of limited nodes carry their keys (V019, V023)
                await repo.set_task_limits(
                    conn,
                    [
                        repo.TaskLimits(
                            repo.TaskRef(t.run_id, t.task_id, t.node_id, 0),
                            line.key,
                            line.max if line.key is not None else None,
                            None if line.rate is None else line.rate.key,
                            None if line.rate is None else line.rate.units,
                        )
                        for t in tasks
                        if (line := self.lines.get(t.task_id)) is not None
                    ],
                )
        if dispatched_early:
            self.lines.clear()  # as the block for dispatches below does, after the limits
        if self.resolved:  # after the new tasks: a wait created and resolved at once
            resolved, self.resolved = self.resolved, []
            waiting = await repo.resolve_waits(conn, resolved)
            for wait in resolved:
                if wait.task_id not in waiting:
                    raise StaleSnapshot(f"task {wait.task_id} is not waiting")
        if self.starts:
            starts, self.starts = self.starts, []
            started = await repo.start_items(conn, starts)
            for run_id, task_id in starts:
                if task_id not in started:
                    raise StaleSnapshot(f"MAP item {task_id} of run {run_id} is not waiting")
        if self.progress:
            progress, self.progress = self.progress, {}
            await repo.set_map_progress(conn, [(r, t, p) for (r, t), p in progress.items()])
        if self.dispatches:
            dispatches, self.dispatches = self.dispatches, []
            if self.paused:
                dispatches = await self._hold_paused(tx, dispatches)
            if tx.gate is not None and (tx.gate.policy is not None or self.lines):
                dispatches = await self._admit(tx, tx.gate, dispatches)
            self.lines.clear()
            if self.offers:
                dispatches = self._set_aside_offered(dispatches)
            await self._enqueue(tx, dispatches)
        if self.finishes:
            finishes, self.finishes = self.finishes, []
            freed: list[tuple[str, str, str]] = []
            ended = await repo.finish_runs(
                conn,
                [
                    repo.RunEnd(
                        run.run_id,
                        action.status,
                        seal.doc(action.output),
                        seal.text(action.error),
                    )
                    for run, action, _, seal in finishes
                ],
            )
            for run, action, effects, seal in finishes:
                finished = ended.get(run.run_id)
                if finished is None:
                    raise StaleSnapshot(f"run {run.run_id} is already finished")
                effects.finished_run = finished
                await _finished(tx, self, run, action, effects, seal)
                if run.run_id in self.slot_holders:
                    slot = await repo.leave_run_slot(conn, run.run_id)
                    if slot is not None:
                        freed.append((*slot, run.run_id))
            if freed:
                await hand_on(conn, self.handed, freed)
        if self.handed and not self.keep_handed:
            handed, self.handed = self.handed, []
            self.run_events.extend(h.event() for h in handed)
        if self.run_events:
            events, self.run_events = self.run_events, []
            event_ids = await repo.enqueue_run_events(conn, events)
            # one due later (a retried child's start) is the outbox-enqueuer's to deliver
            tx.run_events.extend(
                i for i, e in zip(event_ids, events, strict=True) if e.not_before is None
            )
        if self.history:
            history, self.history = self.history, []
            await repo.insert_history(conn, history)
        if self.logs:
            logs, self.logs = self.logs, []
            await repo.insert_task_logs(conn, logs)

    async def _enqueue(
        self,
        tx: Tx,
        dispatches: list[HeldDispatch],
    ) -> None:
        """Write the outbox rows of ``dispatches``; those due at once go to
        ``tx.dispatched``, published after the commit."""
        ids = await repo.enqueue_dispatches(tx.conn, [row for row, *_ in dispatches])
        self._dispatched(tx, dispatches, ids)

    def admitting(self, tx: Tx) -> bool:
        """Whether the held dispatches must wait for the flush's other writes: a paused
        run's are held (``_hold_paused``), and the admission step reads the limited
        tasks' rows (``_admit``), which a statement that inserts them cannot see."""
        return bool(self.paused) or (
            tx.gate is not None and (tx.gate.policy is not None or bool(self.lines))
        )

    @staticmethod
    def _dispatched(
        tx: Tx, dispatches: Sequence[HeldDispatch], ids: Mapping[str, repo.Enqueued]
    ) -> None:
        """Those of ``dispatches`` due at once, whose outbox rows are ``ids``, go to
        ``tx.dispatched``: published after the commit."""
        for row, ref, fields, at_once, _ in dispatches:
            if at_once:
                enqueued = ids[row.task_id]
                with_band(fields, enqueued.priority)
                tx.dispatched.append(Dispatched(enqueued.outbox_id, row.queue, ref, fields))

    def _set_aside_offered(
        self,
        dispatches: list[HeldDispatch],
    ) -> list[HeldDispatch]:
        """The dispatches due at once that a report of the transaction offers to take
        (``offers``) go to ``offered``, with no outbox row yet; the others are returned."""
        kept = []
        for d in dispatches:
            row, _, _, at_once, _ = d
            if at_once and self.offers[(row.run_id, row.queue)] > 0:
                self.offers[(row.run_id, row.queue)] -= 1
                self.offered.append(d)
            else:
                kept.append(d)
        return kept

    async def enqueue_offered(self, tx: Tx, taken: Collection[str]) -> None:
        """The offered dispatches (``offers``) whose tasks were not leased with their
        reports (``taken``: task ids) get their outbox rows now, in the transaction, and
        are published after the commit as any other; a leased one writes none: its
        task is RUNNING under a lease, which the lease sweeper watches."""
        offered, self.offered = self.offered, []
        self.offers.clear()
        left = [d for d in offered if d[1].task_id not in taken]
        if left:
            await self._enqueue(tx, left)

    async def _hold_paused(
        self,
        tx: Tx,
        dispatches: list[HeldDispatch],
    ) -> list[HeldDispatch]:
        """The dispatches of paused runs are held until their resume (no outbox row; a
        retry keeps its backoff's end), with a ``task.held`` row each: the others go on."""
        holding: dict[str, list[str]] = {}
        for _, ref, *_ in dispatches:
            if ref.run_id in self.paused:
                holding.setdefault(ref.run_id, []).append(ref.task_id)
        if not holding:
            return dispatches
        for run_id, task_ids in holding.items():
            for held in await repo.hold_run_tasks(tx.conn, run_id, task_ids):
                self.history.append(
                    repo.NewHistory(
                        run_id,
                        "task.held",
                        node_id=held.node_id,
                        task_id=held.task_id,
                        attempt=held.attempt,
                        detail={"queue": held.queue, "reason": repo.PAUSED_HOLD},
                    )
                )
        return [d for d in dispatches if d[1].run_id not in self.paused]

    async def _admit(
        self,
        tx: Tx,
        gate: Gate,
        dispatches: list[HeldDispatch],
    ) -> list[HeldDispatch]:
        """The admission step (docs/architecture.md §4.12): the dispatches that go; those
        the policy holds stay PENDING with its reason, and their history says so."""
        lines = self.lines
        templated = [
            ref
            for _, ref, _, _, admit in dispatches
            if admit and (line := lines.get(ref.task_id)) is not None and line.templated
        ]
        if templated:  # dispatched again: its keys, rendered at its creation, are on its row
            stored = await repo.task_limit_keys(tx.conn, templated)
            for ref in templated:
                limit_key, rate_key = stored.get(ref.task_id, (None, None))
                lines[ref.task_id] = lines[ref.task_id].with_keys(RenderedKeys(limit_key, rate_key))
        asking = [
            (ref, row.queue)
            for row, ref, _, _, admit in dispatches
            if admit and ref.task_id not in lines
        ]
        held = await gate.admit(tx.conn, asking) if asking else {}
        held_by = {task_id: queue for (ref, queue) in asking if (task_id := ref.task_id) in held}
        limited = [
            (ref, lines[ref.task_id])
            for _, ref, _, _, admit in dispatches
            if admit and ref.task_id in lines
        ]
        if limited:
            decided = await hold_on_lines(tx.conn, limited)
            held |= decided.held
            held_by |= decided.by
            for key, seconds in decided.wake.items():  # tokens come back: look again then
                tx.after_commit(functools.partial(gate.release_later, key, seconds))
        if not held:
            return dispatches
        names = list(held_by.values())
        tx.after_commit(lambda: count_limits(instruments().attempts_held, names))
        holding = [(ref, held[ref.task_id]) for _, ref, *_ in dispatches if ref.task_id in held]
        if len(await repo.hold_tasks(tx.conn, holding)) != len(holding):
            # a held attempt that is not PENDING would have neither an outbox row nor a hold
            raise StaleSnapshot(f"an attempt of {len(holding)} to hold is no longer PENDING")
        for row, ref, *_ in dispatches:
            if ref.task_id in held:
                self.history.append(
                    repo.NewHistory(
                        ref.run_id,
                        "task.held",
                        node_id=ref.node_id,
                        task_id=ref.task_id,
                        attempt=ref.attempt,
                        detail={"queue": row.queue, "reason": held[ref.task_id]},
                    )
                )
        return [d for d in dispatches if d[1].task_id not in held]


async def _finished(
    tx: Tx, writes: Writes, run: Run, action: FinishRun, effects: Effects, seal: RunSeal
) -> None:
    """What a run's end writes besides its row: its parent's event, its children's
    cancels, its webhook."""
    finished = effects.finished_run
    assert finished is not None  # set from its row
    if finished.parent is not None:
        writes.run_events.append(
            _run_events.child_finished(finished.parent, run.run_id, action, seal)
        )
    if action.status is RunStatus.CANCELLED:
        if run.run_id in writes.paused:  # children it wrote while paused never started
            tx.run_events.extend(await repo.settle_child_starts(tx.conn, run.run_id))
        for child in await repo.active_children(tx.conn, run.run_id):
            writes.run_events.append(
                _run_events.cancel_child(child, run.run_id, action.error or "", seal)
            )
    if finished.webhook_url:
        await repo.enqueue_webhook(
            tx.conn,
            run_id=run.run_id,
            url=finished.webhook_url,
            # sealed whole: the outbox-enqueuer opens it just before the POST
            payload=seal.doc(
                {
                    "run_id": run.run_id,
                    "workflow_id": finished.workflow_id,
                    "version": finished.version,
                    "status": action.status.value,
                    "error": action.error,
                    "output": action.output,
                }
            ),
        )
        effects.wrote_webhook = True


def task_message(ref: repo.TaskRef) -> cq.TaskMessage:
    """The stream message of one task attempt: ids only (docs/architecture.md §6.1)."""
    return cq.TaskMessage(
        task_id=ref.task_id,
        run_id=ref.run_id,
        attempt=ref.attempt,
        # the current span: the decision that dispatched it
        traceparent=traceparent(),
    )


def with_band(fields: dict[str, str], priority: int | None) -> None:
    """Name its run's priority band in a task's stream message, unless it is the
    default one (§4.16)."""
    if priority is not None and priority != cq.DEFAULT_BAND:
        fields[cq.PRIORITY] = str(priority)


def _seconds(task: repo.FinishedTask) -> float | None:
    if task.started_at is None:
        return None
    return (task.finished_at - task.started_at).total_seconds()
