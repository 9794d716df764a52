"""Run commands: start a run, send it a signal, cancel it, retry it from a node —
what a person (through the api-gateway) asks of a run. Each is one event, applied
through the event shell (``_shell``) in one transaction.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

import composer_repo as repo
from composer_common import ids
from composer_common import labels as run_labels
from composer_common.batching import Batcher
from composer_common.caller import Caller
from composer_core.model import DEFAULT_PRIORITY, FlowError, RunFlow, RunStatus, WorkflowDAG
from composer_core.statemachine import (
    BufferSignal,
    ResolveWait,
    Run,
    RunCancelled,
    RunRetried,
    RunStarted,
    SignalReceived,
    Transition,
)
from composer_core.templates import Json
from composer_engine._metrics import instruments
from composer_engine._requests import start_digest
from composer_engine._run_starts import admit_start
from composer_engine._shell import Shell
from composer_engine._tx import Tx
from composer_engine.errors import (
    BadRequest,
    Conflict,
    EngineError,
    IdempotencyKeyReused,
    InputInvalid,
    Unavailable,
    UnknownSignal,
)
from composer_engine.sealing import looks_sealed

log = logging.getLogger("composer.engine")

#: A write that goes in a command's transaction, after its event.
Also = Callable[[Tx], Awaitable[object]]


@dataclass(frozen=True, slots=True)
class _Planned:
    """A start's definition read and its run's row made, not yet inserted."""

    dag: WorkflowDAG
    flow: RunFlow | None
    row: repo.NewRun


@dataclass(frozen=True, slots=True)
class StartInTx:
    """One start, to run inside a transaction (``RunCommands.prepare_start``): called,
    it inserts its run and decides its start. In two halves so that ``start_many``
    can insert several starts' rows in one statement: ``plan`` reads the definition
    and makes the row, ``finish`` takes what inserting it gave."""

    run_id: str
    plan: Callable[[Tx], Awaitable[_Planned]]
    finish: Callable[[Tx, _Planned, repo.StartedRun], Awaitable[Started]]

    async def __call__(self, tx: Tx) -> Started:
        planned = await self.plan(tx)
        row = planned.row
        started = await repo.insert_run(
            tx.conn,
            row.run_id,
            workflow_id=row.workflow_id,
            version=row.version,
            input=row.input,
            config=row.config,
            idempotency_key=row.idempotency_key,
            request_digest=row.request_digest,
            status=row.status,
            data_key=row.data_key,
            started_by=row.started_by,
            context=row.context,
            labels=row.labels,
            priority=row.priority,
            schedule=row.schedule,
        )
        return await self.finish(tx, planned, started)


def _lock_order(planned: _Planned) -> tuple[str, ...]:
    """Where a start comes in its batch: unlimited runs first (they lock nothing of
    another's), then limited ones by (workflow, key), the order ``hand_on`` locks in."""
    limit = None if planned.flow is None else planned.flow.limit
    if limit is None:
        return ()
    return (planned.row.workflow_id, limit.key)


@dataclass(frozen=True, slots=True)
class Started:
    run_id: str
    status: RunStatus
    #: False when an earlier start with the same idempotency key is returned instead.
    created: bool


class RunCommands:
    """Start, signal, cancel and retry runs."""

    def __init__(self, shell: Shell) -> None:
        self._shell = shell
        # Starts that arrive together go in one transaction (a group commit, as the
        # coordinator's reports): a start is a dozen statements and a commit, so
        # clients starting runs at once share the round trips and the WAL flush. A
        # lone start goes at once, alone (no added latency when idle).
        self.start_batches: Batcher[StartInTx, Started] = Batcher(
            self.start_many, max_size=32, max_in_flight=2, name="starts"
        )

    async def settle(self) -> None:
        """Return once no batch of starts is in flight (Engine.aclose)."""
        await self.start_batches.settle()

    async def start(
        self,
        workflow_id: str,
        *,
        version: int | None = None,
        input: Json = None,
        config: Json = None,
        run_id: str | None = None,
        idempotency_key: str | None = None,
        start_node: str | None = None,
        caller: Caller | None = None,
        parent: repo.ParentRef | None = None,
        labels: Mapping[str, str] | None = None,
        schedule: tuple[str, dt.datetime] | None = None,
    ) -> Started:
        """Insert a run and apply RunStarted in one transaction (``prepare_start`` says
        what each argument does), shared with the starts that arrive meanwhile
        (``start_many``)."""
        return await self.start_batches.submit(
            self.prepare_start(
                workflow_id,
                version=version,
                input=input,
                config=config,
                run_id=run_id,
                idempotency_key=idempotency_key,
                start_node=start_node,
                caller=caller,
                parent=parent,
                labels=labels,
                schedule=schedule,
            )
        )

    async def start_many(self, starts: Sequence[StartInTx]) -> list[Started | EngineError]:
        """Several starts (``prepare_start``'s) in one transaction: one commit for all,
        as a timer firing a thousand schedules at once needs. When one is refused (its
        input, its workflow) the transaction is rolled back and each goes alone, so the
        others still start; each item is its Started or the error that refused it.

        The starts of limited keys take their keys' locks in one order, that of
        ``hand_on`` (workflow, key), so two batches never wait on each other."""

        async def together(tx: Tx) -> list[Started | EngineError]:
            planned = [await start.plan(tx) for start in starts]
            # every run's row in one statement: one round trip, not one a start
            inserted = await repo.insert_runs(tx.conn, [p.row for p in planned])
            finished: dict[int, Started] = {}
            for i in sorted(range(len(starts)), key=lambda i: _lock_order(planned[i])):
                finished[i] = await starts[i].finish(tx, planned[i], inserted[i])
            return [finished[i] for i in range(len(starts))]

        # a lone start goes by the one-start statements (and a refused one is not tried
        # twice); two starts naming one run id (a client's) go alone, so the second
        # finds the first
        if len(starts) > 1 and len({start.run_id for start in starts}) == len(starts):
            try:
                return await self._shell.in_tx(together)
            except Unavailable:
                raise
            except EngineError:
                pass
        alone: list[Started | EngineError] = []
        for start in starts:
            try:
                alone.append(await self._shell.in_tx(start))
            except Unavailable:
                raise
            except EngineError as exc:
                alone.append(exc)
        return alone

    def prepare_start(
        self,
        workflow_id: str,
        *,
        version: int | None = None,
        input: Json = None,
        config: Json = None,
        run_id: str | None = None,
        idempotency_key: str | None = None,
        start_node: str | None = None,
        caller: Caller | None = None,
        parent: repo.ParentRef | None = None,
        labels: Mapping[str, str] | None = None,
        schedule: tuple[str, dt.datetime] | None = None,
    ) -> StartInTx:
        """What inserts a run and applies RunStarted inside a transaction.

        ``version`` None (or 0) is the deployed one. A client ``run_id`` must be
        a UUIDv7 from the last 24 h and at most 1 h ahead. A repeated
        ``idempotency_key`` returns the run it started, changing nothing; sent with
        another request (input, config, version or start node: ``start_digest``) it
        is IdempotencyKeyReused, unless the key predates V012 (no digest kept).
        ``caller``, who starts it and the metadata they pass, is recorded
        (``started_by``) and kept as the run's calling context, which every TASK
        node's handler gets with its lease (None: the run has none).
        ``parent``, a node attempt of another run, hears of this run's end: completed
        with its output, or failed (docs/architecture.md §4.10); the parent's cancel
        cancels it. ``schedule`` (its id, the fire time) marks a run a schedule
        started (§6.8). ``labels`` (``composer_common.labels``: at most 16, text) are
        stored in plain text, never sealed, for finding the run; bad ones are a
        BadRequest naming each problem.
        """
        label_problems = run_labels.problems(labels or {})
        if label_problems:
            raise BadRequest(
                "the run's labels are invalid: "
                + "; ".join(f"{path}: {message}" for path, message in label_problems)
            )
        context = None if caller is None else caller.document()
        if run_id is not None:
            try:
                run_id = ids.check_client_run_id(run_id, self._shell.clock())
            except ids.InvalidRunId as exc:
                raise BadRequest(str(exc)) from exc
        new_run_id = run_id or self._shell.new_id()
        _refuse_sealed_looking(input, "the run input")
        _refuse_sealed_looking(config, "the run config")
        data_key = self._shell.sealer.new_data_key(new_run_id)
        seal = self._shell.sealer.for_run(new_run_id, data_key)
        # sealed once: the run's row and its TASK rows' copies hold the same document
        sealed_context = seal.doc(context)
        digest = None
        if idempotency_key is not None:
            digest = start_digest(input, config, version, start_node)

        async def plan(tx: Tx) -> _Planned:
            if version:
                dag = await self._shell.definitions.get(tx.conn, workflow_id, version)
            elif workflow_id in tx.deployed:
                dag = tx.deployed[workflow_id]
            else:
                dag = await self._shell.definitions.deployed(tx.conn, workflow_id)
                tx.deployed[workflow_id] = dag
            flow = None
            if dag.flow is not None:
                try:
                    flow = dag.flow.render(dag.engine, input if input is not None else {}, config)
                except FlowError as exc:
                    raise BadRequest(f"workflow {workflow_id!r} v{dag.version}: {exc}") from exc
            limited = flow is not None and flow.limit is not None
            row = repo.NewRun(
                new_run_id,
                workflow_id=workflow_id,
                version=dag.version,
                # a limited run starts PENDING: its key's slot decides when it goes
                status=RunStatus.PENDING if limited else RunStatus.RUNNING,
                input=seal.doc(input if input is not None else {}),
                config=seal.doc(config),
                idempotency_key=idempotency_key,
                # sealed like the input it digests (the run id is its associated data)
                request_digest=seal.text(digest),
                data_key=data_key,
                started_by=None if caller is None else caller.name,
                context=sealed_context,
                labels=labels,
                # kept on the row: it orders the run's attempts wherever they wait (§4.16)
                priority=None
                if flow is None or flow.priority == DEFAULT_PRIORITY
                else flow.priority,
                schedule=schedule,
            )
            return _Planned(dag, flow, row)

        async def finish(tx: Tx, planned: _Planned, started: repo.StartedRun) -> Started:
            dag, flow = planned.dag, planned.flow
            if not started.created:
                if started.request_digest is not None and digest is not None:
                    first = self._shell.sealer.open_text(started.run_id, started.request_digest)
                    if first != digest:
                        raise IdempotencyKeyReused(
                            f"Idempotency-Key {idempotency_key!r} already started run "
                            f"{started.run_id} of workflow {workflow_id!r} with a different "
                            "request (input, config, version or start node): send the same "
                            "request to get that run back, or use a new key for a new run",
                            idempotency_key=idempotency_key,
                            run_id=started.run_id,
                        )
                return Started(started.run_id, started.status, created=False)
            # after the key's look-up, so that a repeat gets its run back; raising rolls
            # the insert back
            check_input(dag, input if input is not None else {}, workflow_id)
            if parent is not None:
                await repo.set_run_parent(tx.conn, new_run_id, parent)
            # summed over the batch: a batch of 32 starts of a workflow adds once
            tx.count(instruments().runs_started, 1, {"workflow_id": workflow_id})
            by = None if caller is None else caller.name
            run = Run(
                new_run_id,
                workflow_id,
                dag.version,
                RunStatus.RUNNING,
                input if input is not None else {},
                config,
                signals=(),
            )
            if flow is not None and flow.limit is not None:
                pending = repo.LockedRun(
                    dataclasses.replace(run, status=RunStatus.PENDING),
                    started.now,
                    data_key=data_key,
                    context=sealed_context,
                )
                status = await admit_start(
                    self._shell, tx, dag, pending, flow, seal, start_node=start_node, by=by
                )
                if status is not RunStatus.RUNNING:
                    return Started(new_run_id, status, created=True)
            await self._shell.decide(
                tx,
                dag,
                repo.LockedRun(run, started.now, data_key=data_key, context=sealed_context),
                RunStarted(start_node),
                by=by,
            )
            tx.after_hints(
                lambda: log.info("run %s of %s v%d started", new_run_id, workflow_id, dag.version)
            )
            return Started(new_run_id, run.status, created=True)

        return StartInTx(new_run_id, plan, finish)

    async def signal(
        self,
        run_id: str,
        name: str,
        payload: Json = None,
        *,
        idempotency_key: str | None = None,
        sent_by: str | None = None,
    ) -> bool:
        """Send a signal; True if a waiting node took it, False if it was buffered.

        A name no WAIT_FOR_EVENT node of the run's version waits for is refused
        (UnknownSignal) rather than buffered where nothing would ever take it; a
        finished run refuses any signal (Conflict).

        A repeated ``idempotency_key`` (a client sending again a request whose answer
        it lost) changes nothing and answers as the first request did; the same key
        for another signal name is a Conflict. Every signal is kept with ``sent_by``
        (the name of the API token that sent it): one a waiting node took at once
        is kept consumed (``repo.run_signals``)."""
        _refuse_sealed_looking(payload, "the signal payload")

        async def attempt(tx: Tx) -> bool:
            locked = await repo.load_run(tx.conn, run_id)
            if idempotency_key is not None:
                seen = await repo.signal_key(tx.conn, run_id, idempotency_key)
                if seen is not None:
                    first_name, delivered = seen
                    if first_name != name:
                        raise Conflict(
                            f"Idempotency-Key {idempotency_key!r} was used for signal "
                            f"{first_name!r} of this run, not {name!r}: use a new key"
                        )
                    return delivered
            dag = await self._shell.definitions.get(
                tx.conn, locked.run.workflow_id, locked.run.version
            )
            # a finished run takes no signal at all: the machine says so (Conflict)
            running = not locked.run.status.is_terminal
            if running and name.strip() and not dag.waits_for_signal(name):
                raise _unknown_signal(locked.run, dag, name)
            tr = await self._shell.decide(
                tx, dag, locked, SignalReceived(name, payload), by=sent_by
            )
            await self._keep_signal(tx, locked, name, payload, tr, sent_by)
            if idempotency_key is not None:
                await repo.record_signal_key(
                    tx.conn, run_id, idempotency_key, name=name, delivered=tr.signal_delivered
                )
            return tr.signal_delivered

        return await self._shell.in_tx(attempt)

    async def _keep_signal(
        self,
        tx: Tx,
        locked: repo.LockedRun,
        name: str,
        payload: Json,
        transition: Transition,
        sent_by: str | None,
    ) -> None:
        """Record who sent the signal: on its buffered row, or on a row of its own,
        consumed at once (its payload sealed like the run's other documents), when a
        waiting node took it (the first wait it resolved)."""
        run_id = locked.run.run_id
        for action in transition.actions:
            if isinstance(action, BufferSignal):
                if sent_by is not None:
                    await repo.record_signal_sender(tx.conn, run_id, action.signal_id, sent_by)
                return
        taker = next((a.node_id for a in transition.actions if isinstance(a, ResolveWait)), None)
        if transition.signal_delivered and taker is not None:
            seal = await self._shell.run_seal(tx, locked)  # the decision's: its key is stored now
            await repo.record_taken_signal(
                tx.conn,
                run_id,
                self._shell.new_id(),
                name,
                seal.doc(payload),
                node_id=taker,
                sent_by=sent_by,
            )

    async def cancel(
        self,
        run_id: str,
        reason: str = "",
        *,
        cancelled_by: str | None = None,
        then: Also | None = None,
    ) -> None:
        """Cancel a run that is still going (Conflict when it finished otherwise; a
        cancelled run answers as the first cancel did). ``cancelled_by``, the name of
        the API token, is recorded with the cancel that took effect. ``then`` is
        written in the cancel's transaction (a bulk operation's item: §6.7)."""
        if looks_sealed(reason):  # it is stored as the run's and its tasks' error
            raise BadRequest(
                "the cancel reason starts with '$sealed:v1:', which Composer keeps for sealed "
                "documents: word it otherwise"
            )

        async def attempt(tx: Tx) -> Transition:
            locked = await repo.load_run(tx.conn, run_id)
            dag = await self._shell.definitions.get(
                tx.conn, locked.run.workflow_id, locked.run.version
            )
            transition = await self._shell.decide(
                tx, dag, locked, RunCancelled(reason), by=cancelled_by
            )
            if cancelled_by is not None and transition.ignored is None:
                await repo.record_cancelled_by(tx.conn, run_id, cancelled_by)
            if then is not None:
                await then(tx)
            return transition

        await self._shell.in_tx(attempt)

    async def retry(
        self,
        run_id: str,
        from_node: str,
        *,
        version: int | None = None,
        input: Json = None,
        config: Json = None,
        retried_by: str | None = None,
        then: Also | None = None,
    ) -> None:
        """Restart a finished run from a node (refused while tasks are active).

        ``version`` None keeps the run's version, 0 moves it to the deployed
        one, a positive number to that version; ``input``/``config`` replace the run's.
        ``retried_by``, the name of the API token, is recorded as the run's last
        retrier. The run keeps the calling context of its start. ``then`` is written
        in the retry's transaction (a bulk operation's item: §6.7).
        """

        async def attempt(tx: Tx) -> Transition:
            locked = await repo.load_run(tx.conn, run_id)
            run = locked.run
            if version is None:
                dag = await self._shell.definitions.get(tx.conn, run.workflow_id, run.version)
            elif version == 0:
                dag = await self._shell.definitions.deployed(tx.conn, run.workflow_id)
            elif version > 0:
                dag = await self._shell.definitions.get(tx.conn, run.workflow_id, version)
            else:
                raise BadRequest(
                    f"version must be 0 (the deployed one) or a version number, not {version}"
                )
            if input is not None:
                check_input(dag, input, run.workflow_id)
            transition = await self._shell.decide(
                tx, dag, locked, RunRetried(from_node, input, config), by=retried_by
            )
            if retried_by is not None and transition.ignored is None:
                await repo.record_retried_by(tx.conn, run_id, retried_by)
            if then is not None:
                await then(tx)
            return transition

        await self._shell.in_tx(attempt)


def check_input(dag: WorkflowDAG, value: Json, workflow_id: str, what: str = "the input") -> None:
    """Refuse an input the version's ``input_schema`` does not accept, naming every
    problem (InputInvalid: the API's 400 input-invalid); ``what`` names the input."""
    if dag.input_schema is None:
        return
    problems = dag.input_schema.problems(value)
    if not problems:
        return
    listed = "; ".join(str(p) for p in problems[:3])
    more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
    raise InputInvalid(
        f"{what} does not match the input_schema of {workflow_id!r} version "
        f"{dag.version}: {listed}{more}",
        problems=[{"path": p.path, "message": p.message} for p in problems],
    )


def _unknown_signal(run: Run, dag: WorkflowDAG, name: str) -> UnknownSignal:
    declared = list(dag.signal_names)
    waits = (
        f"its WAIT_FOR_EVENT nodes wait for {', '.join(map(repr, declared))}"
        if declared
        else "it has no WAIT_FOR_EVENT node, so it takes no signal"
    )
    return UnknownSignal(
        f"run {run.run_id} (workflow {run.workflow_id!r} version {run.version}) has no node "
        f"that waits for signal {name!r}: {waits}; check the name",
        signal=name,
        declared=declared,
    )


def _refuse_sealed_looking(value: Json, what: str) -> None:
    if looks_sealed(value):
        raise BadRequest(
            f"{what} is a string that starts with '$sealed:v1:', which Composer keeps for "
            "sealed documents: wrap it in an object"
        )
