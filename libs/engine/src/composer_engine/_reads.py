"""The read side: a run with its tasks and signals, the list of runs, a run's
history and its attempts' logs, the workers, the definitions — each read in one
transaction, and each holding the payload-visibility rule.

The rule (docs/architecture.md §6.3): a caller with full access (an operator or
an admin token) sees a run's documents, opened (``opened``: unsealed when its
key is here); any other caller (a viewer) sees them only when the run's
workflow version says ``viewers_see_payloads: true``; otherwise they are
redacted — inputs, configs, outputs, errors, contexts, signal payloads, log
lines and the payload members of history details are None, never opened.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass

import composer_repo as repo
from composer_core.model import RunStatus, WorkflowDAG
from composer_core.templates import Json
from composer_engine import opened
from composer_engine._shell import Shell
from composer_engine._tx import Tx

#: History detail members that hold the run's data: None for a caller who may not see them.
PAYLOAD_KEYS = ("input", "config", "error", "reason")
#: History kinds that end an attempt: ``HistoryPage.leased`` has their lease times.
ENDS_ATTEMPT = frozenset({"task.completed", "task.failed", "task.retry_scheduled"})


@dataclass(frozen=True, slots=True)
class RunView:
    """A run, its tasks and its signals as one transaction saw them."""

    run: repo.RunRecord
    tasks: list[repo.TaskRecord]
    signals: list[repo.BufferedSignal]
    #: The queues its waiting tasks wait on that no live worker serves (a finished
    #: run's: none).
    unserved: list[repo.UnservedQueue]
    #: Its documents are None: the caller may not see them.
    redacted: bool
    #: Why a PENDING run has not started: it waits for a slot of its key
    #: (docs/architecture.md §4.13); None: it does not wait.
    waiting: str | None = None
    #: The runs its SUB_WORKFLOW nodes started, oldest first (§4.15).
    children: list[repo.ChildSummary] = dataclasses.field(default_factory=list)


@dataclass(frozen=True, slots=True)
class LimitView:
    """One key of a limit, as a person reads it (GET /v1/limits)."""

    #: What it limits: ``run_concurrency`` (a workflow's runs per key),
    #: ``node_concurrency`` (attempts of the worker nodes naming the key) or
    #: ``rate_limit`` (attempts started per period, a token bucket).
    kind: str
    #: None: a global node concurrency key, shared by every workflow naming it.
    workflow_id: str | None
    #: None: redacted (rendered from run inputs the caller may not see).
    key: str | None
    in_use: int
    #: None: templated per run and no run waits.
    limit: int | None
    waiting: int
    #: A rate limit's tokens in its bucket now, and its period (None: not a rate limit).
    tokens: float | None = None
    per_seconds: float | None = None
    #: Who set a rate limit through the API (None: the definitions' values apply).
    set_by: str | None = None


@dataclass(frozen=True, slots=True)
class RunListing:
    """One page of runs, each with whether its error was redacted."""

    runs: list[tuple[repo.RunSummary, bool]]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class HistoryRow:
    entry: repo.HistoryEntry
    #: The detail as shown: opened, its payload members None when ``redacted``; a
    #: detail that does not open here is ``{"sealed": why}``.
    detail: dict[str, Json] | None
    redacted: bool


@dataclass(frozen=True, slots=True)
class HistoryPage:
    rows: list[HistoryRow]
    #: (task id, attempt) → when its lease was granted, for the attempts the rows end.
    leased: dict[tuple[str, int], dt.datetime]
    #: More rows follow the last one.
    more: bool


@dataclass(frozen=True, slots=True)
class LogsView:
    #: Each attempt's log; its ``lines`` are "" when ``redacted``.
    logs: list[repo.TaskLogRecord]
    redacted: bool


class Reads:
    """What the API reads, the payload-visibility rule applied."""

    def __init__(self, shell: Shell) -> None:
        self._shell = shell

    async def run(self, run_id: str, *, full_access: bool, live_seconds: float) -> RunView:
        """The run with its tasks and signals, read in one transaction (a consistent
        view); ``live_seconds`` (COMPOSER_WORKER_LIVE_SECONDS) says which workers are live."""

        async def read(tx: Tx) -> RunView:
            r = await repo.get_run(tx.conn, run_id)
            tasks = await repo.get_run_tasks(tx.conn, run_id)
            signals = await repo.run_signals(tx.conn, run_id)
            unserved = (
                []
                if r.status.is_terminal
                else await repo.unserved_queues(tx.conn, run_id, live_seconds=live_seconds)
            )
            shown = await self._shows(tx, full_access, r.workflow_id, r.version)
            view = self._run_view(r, tasks, signals, unserved, shown)
            children = await repo.run_children(tx.conn, run_id)  # the small parent index
            if children:
                view = dataclasses.replace(view, children=children)
            if r.status is RunStatus.PENDING:
                waiting = await repo.run_waiting(tx.conn, run_id)
                if waiting is not None:
                    view = dataclasses.replace(view, waiting=_waiting_text(waiting, shown))
            elif r.status is RunStatus.PAUSED:
                view = dataclasses.replace(view, waiting=PAUSED_HINT)
            return view

        return await self._shell.in_tx(read)

    def _run_view(
        self,
        r: repo.RunRecord,
        tasks: list[repo.TaskRecord],
        signals: list[repo.BufferedSignal],
        unserved: list[repo.UnservedQueue],
        shown: bool,
    ) -> RunView:
        sealer, run_id = self._shell.sealer, r.run_id
        if shown:
            return RunView(
                opened.run_record(sealer, r),
                [opened.task_record(sealer, run_id, t) for t in tasks],
                [opened.buffered_signal(sealer, run_id, s) for s in signals],
                unserved,
                redacted=False,
            )
        return RunView(
            dataclasses.replace(r, input=None, config=None, output=None, error=None, context=None),
            [dataclasses.replace(t, input=None, output=None, error=None) for t in tasks],
            [dataclasses.replace(s, payload=None) for s in signals],
            unserved,
            redacted=True,
        )

    async def runs(
        self,
        *,
        full_access: bool,
        workflow_id: str | None = None,
        status: RunStatus | None = None,
        labels: Mapping[str, str] | None = None,
        created_after: dt.datetime | None = None,
        created_before: dt.datetime | None = None,
        schedule_id: str | None = None,
        cursor: str | None = None,
        limit: int = 50,
    ) -> RunListing:
        """A page of runs, newest first (``cursor``: the previous page's ``next_cursor``),
        of those that match every filter given (``labels``: each must match);
        ``schedule_id`` (the runs a schedule started) combines with ``status`` and the
        creation times only."""

        async def read(tx: Tx) -> RunListing:
            page = await repo.list_runs(
                tx.conn,
                workflow_id=workflow_id,
                status=status,
                labels=labels,
                created_after=created_after,
                created_before=created_before,
                schedule_id=schedule_id,
                cursor=cursor,
                limit=limit,
            )
            shown = {
                key: await self._shows(tx, full_access, *key)
                for key in {(s.workflow_id, s.version) for s in page.runs}
            }
            sealer = self._shell.sealer
            return RunListing(
                [
                    (
                        dataclasses.replace(s, error=opened.shown_text(sealer, s.run_id, s.error))
                        if shown[(s.workflow_id, s.version)]
                        else dataclasses.replace(s, error=None),
                        not shown[(s.workflow_id, s.version)],
                    )
                    for s in page.runs
                ],
                page.next_cursor,
            )

        return await self._shell.in_tx(read)

    async def history(
        self, run_id: str, *, full_access: bool, after: int = 0, limit: int = 100
    ) -> HistoryPage:
        """Up to ``limit`` of the run's history rows after ``after`` (a row's ``seq``)."""

        async def read(tx: Tx) -> HistoryPage:
            run = await repo.get_run(tx.conn, run_id)  # NotFound: no such run
            rows = await repo.run_history(tx.conn, run_id, after=after, limit=limit + 1)
            leased = (
                await repo.lease_times(tx.conn, run_id)
                if any(r.kind in ENDS_ATTEMPT for r in rows)
                else {}
            )
            shown = await self._shows(tx, full_access, run.workflow_id, run.version)
            return HistoryPage(
                [self._history_row(run_id, r, shown) for r in rows[:limit]],
                leased,
                more=len(rows) > limit,
            )

        return await self._shell.in_tx(read)

    def _history_row(self, run_id: str, row: repo.HistoryEntry, shown: bool) -> HistoryRow:
        detail = opened.shown(self._shell.sealer, run_id, row.detail)
        if isinstance(detail, str):  # a detail that does not open here: say why
            detail = {"sealed": detail}
        redacted = False
        if not shown and isinstance(detail, dict):
            hidden = [k for k in PAYLOAD_KEYS if detail.get(k) is not None]
            if hidden:
                detail = {**detail, **dict.fromkeys(hidden)}
                redacted = True
        return HistoryRow(row, detail if isinstance(detail, dict) else None, redacted)

    async def logs(self, run_id: str, *, full_access: bool, node_id: str | None = None) -> LogsView:
        """The run's attempt logs (``node_id``: one node's)."""

        async def read(tx: Tx) -> LogsView:
            r = await repo.get_run(tx.conn, run_id)
            stored = await repo.get_task_logs(tx.conn, run_id, node_id=node_id)
            shown = await self._shows(tx, full_access, r.workflow_id, r.version)
            if shown:
                return LogsView(
                    [opened.task_log(self._shell.sealer, run_id, e) for e in stored], False
                )
            return LogsView([dataclasses.replace(e, lines="") for e in stored], True)

        return await self._shell.in_tx(read)

    async def map_items(
        self, run_id: str, node_id: str, *, full_access: bool, start: int = 0, limit: int = 100
    ) -> tuple[list[repo.TaskRecord], bool]:
        """A page of MAP ``node_id``'s item tasks in item order, and whether their
        documents were redacted. NotFound when the run has no such node's task."""

        async def read(tx: Tx) -> tuple[list[repo.TaskRecord], bool]:
            r = await repo.get_run(tx.conn, run_id)
            items = await repo.get_map_items(tx.conn, run_id, node_id, start=start, limit=limit)
            if not items and not any(
                t.node_id == node_id and t.items_total is not None
                for t in await repo.get_run_tasks(tx.conn, run_id)
            ):
                raise repo.NotFound(f"run {run_id} has no MAP node {node_id!r} that started")
            if await self._shows(tx, full_access, r.workflow_id, r.version):
                sealer = self._shell.sealer
                return [opened.task_record(sealer, run_id, t) for t in items], False
            return [
                dataclasses.replace(t, input=None, output=None, error=None) for t in items
            ], True

        return await self._shell.in_tx(read)

    async def run_limits(self, *, full_access: bool) -> list[LimitView]:
        """The keys of run limits with runs going or waiting (docs/architecture.md
        §4.13), each with its deployed limit, then the node concurrency keys with
        attempts in flight or held (§4.12). A run key is rendered from a run's input:
        a caller who may not see the workflow's payloads gets it as None. So does a node
        or rate key a template rendered from a run's data: only those a deployed
        definition writes as plain text are shown to such a caller (or those of a
        workflow that sets ``viewers_see_payloads``, or a rate key a person set)."""

        async def read(tx: Tx) -> list[LimitView]:
            views = []
            plain, open_workflows = (
                (frozenset[str](), frozenset[str]())
                if full_access
                else await self._plain_limit_keys(tx)
            )
            deployed: dict[str, WorkflowDAG | None] = {}  # one read per workflow
            for k in await repo.run_limit_keys(tx.conn):
                limit: int | None = k.waiting_max_runs
                shown = full_access
                if k.workflow_id not in deployed:
                    try:
                        deployed[k.workflow_id] = await self._shell.definitions.deployed(
                            tx.conn, k.workflow_id
                        )
                    except repo.NotFound:
                        deployed[k.workflow_id] = None
                dag = deployed[k.workflow_id]
                if dag is not None:
                    concurrency = dag.spec.concurrency
                    if concurrency is not None and isinstance(concurrency.max_runs, int):
                        limit = concurrency.max_runs
                    shown = shown or dag.spec.viewers_see_payloads
                views.append(
                    LimitView(
                        "run_concurrency",
                        k.workflow_id,
                        k.key if shown else None,
                        k.in_use,
                        limit,
                        k.waiting,
                    )
                )
            for n in await repo.node_limit_keys(tx.conn):
                scope, _, rest = n.key.partition(":")
                workflow_id, key = rest.split(":", 1) if scope == "workflow" else (None, rest)
                shown = full_access or n.key in plain or workflow_id in open_workflows
                views.append(
                    LimitView(
                        "node_concurrency",
                        workflow_id,
                        key if shown else None,
                        n.in_use,
                        n.max,
                        n.waiting,
                    )
                )
            for r in await repo.rate_limit_keys(tx.conn):
                views.append(
                    LimitView(
                        "rate_limit",
                        None,
                        # a key a person set (PUT) is a name they chose, not a run's data
                        r.key.partition(":")[2]
                        if full_access or r.key in plain or r.set_by is not None
                        else None,
                        max(0, round(r.limit - r.tokens)),
                        r.limit,
                        r.waiting,
                        tokens=round(r.tokens, 2),
                        per_seconds=r.per_seconds,
                        set_by=r.set_by,
                    )
                )
            return views

        return await self._shell.in_tx(read)

    async def _plain_limit_keys(self, tx: Tx) -> tuple[frozenset[str], frozenset[str]]:
        """The limit keys the deployed definitions write as plain text, and the
        workflows whose payloads (their rendered keys too) every caller sees."""
        plain: set[str] = set()
        open_workflows: set[str] = set()
        for summary in await repo.list_definitions(tx.conn):
            if summary.deployed_version is None:
                continue
            dag = await self._shell.definitions.get(
                tx.conn, summary.workflow_id, summary.deployed_version
            )
            plain |= dag.plain_limit_keys
            if dag.spec.viewers_see_payloads:
                open_workflows.add(summary.workflow_id)
        return frozenset(plain), frozenset(open_workflows)

    async def workers(self) -> list[repo.WorkerRecord]:
        """Every worker as its last heartbeat left it."""

        async def read(tx: Tx) -> list[repo.WorkerRecord]:
            return await repo.list_workers(tx.conn)

        return await self._shell.in_tx(read)

    async def _shows(self, tx: Tx, full_access: bool, workflow_id: str, version: int) -> bool:
        """Whether the caller sees the payloads of a run of this workflow version."""
        if full_access:
            return True
        dag = await self._shell.definitions.get(tx.conn, workflow_id, version)
        return dag.spec.viewers_see_payloads


#: A paused run's ``waiting_hint``: what it waits for, and how to let it go on.
PAUSED_HINT = (
    "paused: nothing new goes to a worker and its timers and signals are kept until it is "
    "resumed (POST /v1/runs/{id}/resume, composer resume)"
)


def _waiting_text(waiting: repo.RunWaiting, shown: bool) -> str:
    """Why a run waits for a slot, for a person: the key only for one who may see the
    run's payloads (a key is rendered from its input)."""
    key = f"key {waiting.key!r}" if waiting.key and shown else "its key"
    ahead = f"{waiting.ahead} run(s) ahead of it" if waiting.ahead else "next in line"
    return (
        f"waiting for a slot of {key}: {waiting.running} of {waiting.max_runs} running; "
        f"{ahead} (priority {waiting.priority})"
    )
