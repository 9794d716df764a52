"""The engine: every input becomes an event, and every event goes through
lock → decide → persist → commit in one transaction (seed 000).

The run's row lock (``load_run``) serializes the events of one run, so two
workers finishing two branches at once cannot both miss the join. Clock and
ids come from here (the core takes them injected); a transient database
failure rolls the transaction back and the whole event is applied again on a
fresh snapshot, with backoff.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import composer_repo as repo
from composer_common import ids
from composer_core import errors as core_errors
from composer_core.model import RunStatus, WorkflowDAG
from composer_core.statemachine import (
    Deps,
    Event,
    Machine,
    NodeCompleted,
    NodeFailed,
    Run,
    RunCancelled,
    RunRetried,
    RunStarted,
    SignalReceived,
    TimerFired,
    Transition,
)
from composer_core.templates import Json
from composer_engine._definitions import DefinitionCache
from composer_engine._persist import announce, persist
from composer_engine._tx import Tx
from composer_engine.errors import (
    BadRequest,
    Conflict,
    EngineError,
    NotFound,
    StaleSnapshot,
    Unavailable,
)

log = logging.getLogger("composer.engine")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Started:
    run_id: str
    status: RunStatus
    #: False when an earlier start with the same idempotency key is returned instead.
    created: bool


@dataclass(frozen=True, slots=True)
class LeaseGrant:
    granted: bool
    reason: str = ""
    input: Json = None
    expires_at: dt.datetime | None = None


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Engine:
    """Applies events to runs. Safe to share between tasks and to run in many processes."""

    def __init__(
        self,
        pool: repo.Pool,
        *,
        redis: Any = None,
        redis_prefix: str = "composer",
        definitions: DefinitionCache | None = None,
        clock: Callable[[], dt.datetime] = utcnow,
        new_id: Callable[[], str] = ids.new_id,
        attempts: int = 6,
    ) -> None:
        self.pool = pool
        self.redis = redis
        self.prefix = redis_prefix
        self.definitions = definitions or DefinitionCache()
        self._clock = clock
        self._new_id = new_id
        self._attempts = attempts

    # -- public inputs ---------------------------------------------------------

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
    ) -> Started:
        """Insert a run and apply RunStarted in one transaction.

        ``version`` None (or 0) is the deployed one. A client ``run_id`` must be
        a UUIDv7 from the last 24 h and at most 1 h ahead. A repeated
        ``idempotency_key`` returns the run it started, changing nothing.
        """
        if run_id is not None:
            try:
                run_id = ids.check_client_run_id(run_id, self._clock())
            except ids.InvalidRunId as exc:
                raise BadRequest(str(exc)) from exc
        new_run_id = run_id or self._new_id()

        async def attempt(tx: Tx) -> Started:
            if version:
                dag = await self.definitions.get(tx.conn, workflow_id, version)
            else:
                dag = await self.definitions.deployed(tx.conn, workflow_id)
            started = await repo.insert_run(
                tx.conn,
                new_run_id,
                workflow_id=workflow_id,
                version=dag.version,
                input=input if input is not None else {},
                config=config,
                idempotency_key=idempotency_key,
            )
            if not started.created:
                return Started(started.run_id, started.status, created=False)
            run = Run(
                new_run_id,
                workflow_id,
                dag.version,
                RunStatus.RUNNING,
                input if input is not None else {},
                config,
            )
            await self._decide(tx, dag, run, RunStarted(start_node))
            tx.after_commit(
                lambda: log.info("run %s of %s v%d started", new_run_id, workflow_id, dag.version)
            )
            return Started(new_run_id, run.status, created=True)

        return await self._in_tx(attempt)

    async def handle(self, run_id: str, event: Event, *, reporter: str | None = None) -> Transition:
        """Apply one event to a run on the definition version it is pinned to.

        With ``reporter`` (a worker's lease owner) a NodeCompleted/NodeFailed
        counts only if that worker holds the attempt's lease: a worker whose
        lease expired and was taken over must not finish the attempt.
        """

        async def attempt(tx: Tx) -> Transition:
            run = await repo.load_run(tx.conn, run_id)
            if reporter is not None and isinstance(event, NodeCompleted | NodeFailed):
                holder = await repo.lease_owner(tx.conn, run_id, event.task_id, event.attempt)
                if holder != reporter:
                    reason = f"{reporter} does not hold the lease of {event.node_id} attempt {event.attempt}"
                    return Transition([], ignored=reason)
            dag = await self.definitions.get(tx.conn, run.workflow_id, run.version)
            return await self._decide(tx, dag, run, event)

        return await self._in_tx(attempt)

    async def report_completed(
        self,
        run_id: str,
        task_id: str,
        node_id: str,
        attempt: int,
        output: Json,
        *,
        owner: str | None = None,
    ) -> bool:
        """A worker's success; False when the report was stale (acknowledged, nothing changed)."""
        tr = await self.handle(
            run_id, NodeCompleted(task_id, node_id, attempt, output), reporter=owner
        )
        return tr.ignored is None

    async def report_failed(
        self,
        run_id: str,
        task_id: str,
        node_id: str,
        attempt: int,
        error: str,
        *,
        code: str | None = None,
        permanent: bool = False,
        owner: str | None = None,
    ) -> bool:
        event = NodeFailed(task_id, node_id, attempt, error, code, permanent)
        tr = await self.handle(run_id, event, reporter=owner)
        return tr.ignored is None

    async def fire_timer(self, run_id: str, task_id: str, node_id: str) -> bool:
        tr = await self.handle(run_id, TimerFired(task_id, node_id))
        return tr.ignored is None

    async def signal(self, run_id: str, name: str, payload: Json = None) -> bool:
        """Send a signal; True if a waiting node took it, False if it was buffered."""
        tr = await self.handle(run_id, SignalReceived(name, payload))
        return tr.signal_delivered

    async def cancel(self, run_id: str, reason: str = "") -> None:
        await self.handle(run_id, RunCancelled(reason))

    async def retry(
        self,
        run_id: str,
        from_node: str,
        *,
        version: int | None = None,
        input: Json = None,
        config: Json = None,
    ) -> None:
        """Restart a finished run from a node (refused while tasks are active).

        ``version`` None keeps the run's version, 0 moves it to the deployed
        one, a positive number to that version; ``input``/``config`` replace the run's.
        """

        async def attempt(tx: Tx) -> Transition:
            run = await repo.load_run(tx.conn, run_id)
            if version is None:
                dag = await self.definitions.get(tx.conn, run.workflow_id, run.version)
            elif version == 0:
                dag = await self.definitions.deployed(tx.conn, run.workflow_id)
            elif version > 0:
                dag = await self.definitions.get(tx.conn, run.workflow_id, version)
            else:
                raise BadRequest(
                    f"version must be 0 (the deployed one) or a version number, not {version}"
                )
            return await self._decide(tx, dag, run, RunRetried(from_node, input, config))

        await self._in_tx(attempt)

    async def acquire_lease(
        self, run_id: str, task_id: str, attempt: int, *, owner: str, ttl: float
    ) -> LeaseGrant:
        """Grant a worker the attempt (no run lock needed: one fenced row update)."""

        async def attempt_tx(tx: Tx) -> LeaseGrant:
            lease = await repo.acquire_lease(
                tx.conn, run_id, task_id, attempt, owner=owner, ttl=ttl
            )
            if lease is None:
                return LeaseGrant(
                    False, "stale attempt, finished task, or leased by another worker"
                )
            return LeaseGrant(True, input=lease.input, expires_at=lease.expires_at)

        return await self._in_tx(attempt_tx)

    async def renew_lease(
        self, run_id: str, task_id: str, attempt: int, *, owner: str, ttl: float
    ) -> dt.datetime | None:
        async def attempt_tx(tx: Tx) -> dt.datetime | None:
            return await repo.renew_lease(tx.conn, run_id, task_id, attempt, owner=owner, ttl=ttl)

        return await self._in_tx(attempt_tx)

    # -- the shell -------------------------------------------------------------

    async def _decide(self, tx: Tx, dag: WorkflowDAG, run: Run, event: Event) -> Transition:
        machine = Machine(
            dag, run, Deps(repo.RunStore(tx.conn, run.run_id), self._clock, self._new_id)
        )
        try:
            transition = await machine.apply(event)
        except core_errors.InvalidRequest as exc:
            raise BadRequest(str(exc)) from exc
        except (core_errors.RunFinished, core_errors.RunActive) as exc:
            raise Conflict(str(exc)) from exc
        if transition.ignored is None:
            effects = await persist(tx, dag, run, transition.actions)
            announce(tx, effects, redis=self.redis, prefix=self.prefix, run=run)
        else:
            log.debug(
                "run %s: %s ignored: %s", run.run_id, type(event).__name__, transition.ignored
            )
        return transition

    async def _in_tx(self, fn: Callable[[Tx], Awaitable[T]]) -> T:
        """Run ``fn`` in a transaction; on a transient failure, roll back and run it again."""
        delay = 0.02
        for attempt in range(1, self._attempts + 1):
            try:
                async with repo.transaction(self.pool) as conn:
                    tx = Tx(conn)
                    result = await fn(tx)
                await tx.run_after_commit()
                return result
            except (repo.Transient, core_errors.StoreError, StaleSnapshot) as exc:
                if isinstance(exc, repo.Conflict) and not exc.retryable:
                    raise
                if attempt == self._attempts:
                    raise Unavailable(
                        f"database unavailable after {attempt} attempts: {exc}"
                    ) from exc
                log.warning("transient failure (%s); retrying in %.2fs", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
            except repo.NotFound as exc:
                raise NotFound(str(exc)) from exc
            except repo.Conflict as exc:
                raise Conflict(str(exc)) from exc
            except (repo.Invalid, core_errors.TemplateError) as exc:
                raise BadRequest(str(exc)) from exc
            except EngineError:
                raise
        raise AssertionError("unreachable")  # pragma: no cover
