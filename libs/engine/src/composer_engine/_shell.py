"""The event shell: lock → decide → persist → commit, for one event on one run
(docs/architecture.md §3). Every use case that changes a run applies its event
through here: run commands (``_runs``), reports (``_reports``), leases
(``_leasing``) and the loops' events (``_loop_events``).

The run's row lock (``load_run``) serializes the events of one run, so two
workers finishing two branches at once cannot both miss the join. The lock
query also returns the transaction's clock: the machine decides at that time,
so every time persisted comes from the database. Ids come from here.

Where what comes next goes: an event addressed to another run is written by
``decide``'s persistence (an outbox row) and applied here, under the target
run's lock (``apply``); a step that holds a dispatch before it is published
sits between ``persist``'s ``write_dispatch`` and the publisher (``_publish``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from opentelemetry.trace import INVALID_SPAN, Span

import composer_queue as cq
import composer_repo as repo
from composer_common import limits
from composer_common.codes import ErrorCode
from composer_common.telemetry import recording, tracer
from composer_core import errors as core_errors
from composer_core.kinds.map import DEFAULT_MAX_ITEMS
from composer_core.model import WorkflowDAG
from composer_core.statemachine import (
    Deps,
    Event,
    InputLimit,
    Machine,
    Missing,
    NodeCompleted,
    NodeFailed,
    NodeState,
    Run,
    Transition,
)
from composer_core.templates import Budget, Json
from composer_engine import _history
from composer_engine import opened as _opened
from composer_engine._admission import Gate
from composer_engine._children import DEFAULT_MAX_CHILD_DEPTH
from composer_engine._definitions import DefinitionCache
from composer_engine._leases import Reporter
from composer_engine._metrics import instruments
from composer_engine._persist import announce, persist
from composer_engine._publish import Publisher
from composer_engine._reported import AttemptLog
from composer_engine._transaction import in_transaction
from composer_engine._tx import Tx
from composer_engine.errors import BadRequest, Conflict
from composer_engine.sealing import RunSeal, Sealer

log = logging.getLogger("composer.engine")
T = TypeVar("T")

#: The share of one event's template budget (templates/_budget.py) its decision may
#: spend on the event loop: 2,000 steps, some milliseconds. Past it, the decision is
#: made again on the decision thread, and a group commit's batch yields the loop
#: once its decisions together spent as much (docs/architecture.md §8).
ON_LOOP_SHARE = 0.02


class LeavesTheBatch(Exception):
    """An event of a group commit needs more than its share of the event loop: it is
    applied alone after the batch (decided off the loop), and the batch goes on."""


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Shell:
    """What every use case shares: the pool, the definitions, the sealer, the ids, the
    decision thread and the publisher of each commit's dispatches."""

    def __init__(
        self,
        pool: repo.Pool,
        *,
        redis: cq.Queue | None,
        redis_prefix: str,
        shards: int,
        definitions: DefinitionCache | None,
        clock: Callable[[], dt.datetime],
        new_id: Callable[[], str],
        attempts: int,
        max_node_input_bytes: int | None,
        sealer: Sealer | None,
        max_child_depth: int = DEFAULT_MAX_CHILD_DEPTH,
        map_max_items: int = DEFAULT_MAX_ITEMS,
    ) -> None:
        self.pool = pool
        self.sealer = sealer or Sealer()
        self.redis = redis
        self.prefix = redis_prefix
        self.shards = shards
        self.definitions = definitions or DefinitionCache()
        self.clock = clock
        self.new_id = new_id
        self.attempts = attempts
        #: How deep child runs may nest (engine/_children.py).
        self.max_child_depth = max_child_depth
        #: COMPOSER_MAP_MAX_ITEMS: the most items a MAP node may take.
        self.map_max_items = map_max_items
        #: Checked as each node's input is rendered (the lease checks again).
        self.input_limit = (
            None
            if max_node_input_bytes is None
            else InputLimit(
                max_node_input_bytes,
                ErrorCode.INPUT_TOO_LARGE,
                functools.partial(_input_too_large, max_node_input_bytes),
            )
        )
        #: Where decisions too heavy for the event loop are made (``_transition``).
        self._decider = ThreadPoolExecutor(max_workers=1, thread_name_prefix="composer-decide")
        #: Publishes each transaction's dispatches right after its commit.
        self.publish = None if redis is None else Publisher(pool, redis, redis_prefix, shards)
        #: Delivers each transaction's events for other runs right after its commit
        #: (set by the engine: engine/_run_event_delivery.py).
        self.deliver: Callable[[Sequence[int]], None] | None = None
        #: The admission step every dispatch goes through (None: no policy; set by the
        #: engine: engine/_admission.py).
        self.gate: Gate | None = None

    async def aclose(self) -> None:
        """Delete now the outbox rows of the dispatches published so far (engine/_publish.py)."""
        if self.publish is not None:
            await self.publish.aclose()

    async def handle(
        self, run_id: str, event: Event, *, reporter: Reporter | None = None
    ) -> Transition:
        """Apply one event to a run on the definition version it is pinned to.

        With ``reporter`` (a worker) a NodeCompleted/NodeFailed counts only with
        the attempt's lease token: a worker whose lease expired and was taken over,
        or that never held it, must not finish the attempt.
        """
        transition = await self.apply(run_id, event, reporter=reporter)
        assert transition is not None  # only skip_locked passes a busy run
        return transition

    async def apply(
        self,
        run_id: str,
        event: Event,
        *,
        reporter: Reporter | None = None,
        skip_locked: bool = False,
        guard: Callable[[Tx], Awaitable[str | None]] | None = None,
        attempt_log: AttemptLog | None = None,
    ) -> Transition | None:
        """Lock → decide → persist → commit: ``handle``, plus: ``skip_locked`` returns None at once when another transaction
        holds the run's lock; ``guard`` runs under the lock and names a reason to ignore
        the event (None: apply it); ``attempt_log`` is stored with a report applied."""

        async def attempt(tx: Tx) -> Transition | None:
            if skip_locked:
                locked = await repo.try_load_run(tx.conn, run_id)
                if locked is None:
                    return None
            else:
                locked = await repo.load_run(tx.conn, run_id)
            if reporter is not None and isinstance(event, NodeCompleted | NodeFailed):
                holder = await repo.lease_holder(tx.conn, run_id, event.task_id, event.attempt)
                reason = reporter.refusal(holder, event.node_id, event.attempt)
                if reason is not None:
                    return Transition((), locked.run, ignored=reason)
            if guard is not None:
                refused = await guard(tx)
                if refused is not None:
                    return Transition((), locked.run, ignored=refused)
            dag = await self.definitions.get(tx.conn, locked.run.workflow_id, locked.run.version)
            return await self.decide(tx, dag, locked, event, attempt_log=attempt_log)

        return await self.in_tx(attempt)

    async def decide(
        self,
        tx: Tx,
        dag: WorkflowDAG,
        locked: repo.LockedRun,
        event: Event,
        *,
        by: str | None = None,
        attempt_log: AttemptLog | None = None,
        in_batch: bool = False,
    ) -> Transition:
        """Apply ``event`` to the locked run and persist what it decided, with its
        history rows (``by``: the API token's name behind the event, if any).

        ``in_batch`` (a group commit): an event whose templates need more than their
        share of the event loop is not decided here but raises LeavesTheBatch, having
        written nothing: the batch goes on without it, and it is applied alone."""
        kind = type(event).__name__
        node_id = getattr(event, "node_id", None)
        # names only: an event's and its actions' values may be sealed documents,
        # which are never logged
        about = f"run {locked.run.run_id}, event {kind}" + (f" of {node_id}" if node_id else "")
        tx.deciding = lambda: about
        seal = await self.run_seal(tx, locked)
        run = _opened.snapshot(self.sealer, locked.run)
        if run is not locked.run:
            locked = dataclasses.replace(locked, run=run)
        with _apply_span(run, kind, node_id) as span:
            tx.now = locked.now
            transition = await self._transition(tx, dag, locked, event, in_batch=in_batch)
            if transition is None:
                span.set_attribute("composer.left_the_batch", True)
            else:
                span.set_attribute("composer.actions", len(transition.actions))
                outcome = "applied"
                if transition.ignored is None:
                    actions = transition.actions
                    tx.deciding = lambda: (
                        f"{about}, actions {', '.join(type(a).__name__ for a in actions)}"
                    )
                    effects = await persist(
                        tx,
                        dag,
                        run,
                        transition.actions,
                        seal,
                        context=locked.context,
                        children=self,
                    )
                    tx.writes.history.extend(_history.rows(run, event, actions, seal, by=by))
                    if attempt_log is not None and isinstance(event, NodeCompleted | NodeFailed):
                        tx.writes.keep_log(run.run_id, event, attempt_log, seal)
                    announce(
                        tx,
                        effects,
                        redis=self.redis,
                        prefix=self.prefix,
                        run=run,
                        log_error=not seal.sealing,
                    )
                else:
                    outcome = "ignored"
                    span.set_attribute("composer.ignored", transition.ignored)
                    log.debug("run %s: %s ignored: %s", run.run_id, kind, transition.ignored)
                tx.count(instruments().events, 1, {"event": kind, "outcome": outcome})
        if transition is None:
            raise LeavesTheBatch
        return transition

    async def _transition(
        self, tx: Tx, dag: WorkflowDAG, locked: repo.LockedRun, event: Event, *, in_batch: bool
    ) -> Transition | None:
        """Apply the machine, loading what it asks for (one query per ask) and applying
        again on the extended snapshot until it decides.

        The decision runs on the event loop until its templates pass their share of it
        (ON_LOOP_SHARE of the event's budget); then it is made again from the start on
        the engine's decision thread, on a budget of its own, so the loop goes on
        serving (the GIL passes between the two every few milliseconds). ``in_batch``:
        None instead (a group commit applies such an event alone, not in the batch)."""
        deps = Deps(locked.now, self.new_id, self.input_limit, self.map_max_items)
        budget = Budget(pause_at=ON_LOOP_SHARE)
        machine = Machine(dag, deps, budget=budget)
        on_loop = True
        snapshot = locked.run
        for _ in range(len(snapshot.nodes) + 4):  # every ask loads something new
            try:
                if on_loop:
                    try:
                        result = machine.apply(snapshot, event)
                    except core_errors.WorkPaused:
                        if in_batch:
                            return None
                        on_loop, machine = False, Machine(dag, deps)
                        result = await self._off_loop(machine, snapshot, event)
                else:
                    result = await self._off_loop(machine, snapshot, event)
            except core_errors.InvalidRequest as exc:
                raise BadRequest(str(exc)) from exc
            except (core_errors.RunFinished, core_errors.RunActive) as exc:
                raise Conflict(str(exc)) from exc
            if not isinstance(result, Missing):
                if on_loop:
                    tx.loop_work += budget.used
                return result
            run_id = snapshot.run_id
            snapshot = snapshot.with_data(
                _opened.outputs(
                    self.sealer, run_id, await repo.load_outputs(tx.conn, run_id, result.outputs)
                )
                if result.outputs
                else None,
                _opened.signals(self.sealer, run_id, await repo.pending_signals(tx.conn, run_id))
                if result.signals
                else None,
                items=await self._items(tx, run_id, result.items),
                item_outputs=await self._item_outputs(tx, run_id, result.item_outputs),
            )
        raise AssertionError(f"the machine keeps asking for data it was given: {result}")

    async def _items(
        self, tx: Tx, run_id: str, wanted: frozenset[tuple[str, int]]
    ) -> dict[str, dict[int, NodeState]]:
        """The MAP items a decision asked for (the next to go), by node and index."""
        if not wanted:
            return {}
        await tx.writes.flush(tx)  # the decisions before this one in its transaction
        by_node: dict[str, list[int]] = {}
        for node_id, index in wanted:
            by_node.setdefault(node_id, []).append(index)
        return {
            node_id: await repo.load_items(tx.conn, run_id, node_id, indexes)
            for node_id, indexes in by_node.items()
        }

    async def _item_outputs(
        self, tx: Tx, run_id: str, node_ids: frozenset[str]
    ) -> dict[str, tuple[Json, ...]]:
        """Every item's output of the MAP nodes asked for (once, as each completes)."""
        if not node_ids:
            return {}
        await tx.writes.flush(tx)  # the decisions before this one in its transaction
        return {
            node_id: tuple(
                self.sealer.open(run_id, value)
                for value in await repo.load_item_outputs(tx.conn, run_id, node_id)
            )
            for node_id in node_ids
        }

    async def _off_loop(self, machine: Machine, run: Run, event: Event) -> Transition | Missing:
        """``machine.apply`` on the decision thread: one, so that heavy decisions take
        turns and the event loop competes for the GIL with one thread at most."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._decider, machine.apply, run, event)

    async def run_seal(self, tx: Tx, locked: repo.LockedRun) -> RunSeal:
        """What seals the run's documents; a run started before sealing was turned on
        gets its data key now."""
        data_key = locked.data_key
        run_id = locked.run.run_id
        if data_key is None:
            new_key = self.sealer.new_data_key(run_id)
            if new_key is None:
                return self.sealer.for_run(run_id, None)
            data_key = await repo.set_data_key(tx.conn, run_id, new_key)
        return self.sealer.for_run(run_id, data_key)

    async def in_tx(
        self,
        fn: Callable[[Tx], Awaitable[T]],
        *,
        single_statement: bool = False,
        attempts: int | None = None,
    ) -> T:
        """``fn`` in the one retry loop (``_transaction``); ``attempts`` None: the
        engine's (a loop's read says 1: its own backoff waits out an outage)."""
        return await in_transaction(
            self.pool,
            fn,
            attempts=self.attempts if attempts is None else attempts,
            single_statement=single_statement,
            publish=self.publish,
            deliver=self.deliver,
            gate=self.gate,
        )


def _input_too_large(limit: int, size: int, exact: bool) -> str:
    return limits.over_limit(
        "node input", size, limit, "COMPOSER_MAX_NODE_INPUT_BYTES", at_least=not exact
    )


def _apply_span(
    run: Run, kind: str, node_id: str | None
) -> contextlib.AbstractContextManager[Span]:
    """The span of one event's apply; without a tracer provider none is made (it would be
    no-op: the current context, a caller's trace the dispatches carry on, is the same
    either way)."""
    if not recording():
        return contextlib.nullcontext(INVALID_SPAN)
    attributes = {
        "composer.run_id": run.run_id,
        "composer.workflow_id": run.workflow_id,
        "composer.event": kind,
    }
    if node_id:
        attributes["composer.node_id"] = node_id
    return tracer().start_as_current_span(f"apply {kind}", attributes=attributes)
