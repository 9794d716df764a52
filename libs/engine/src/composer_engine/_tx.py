"""One transaction per event, with side effects that wait for the commit.

Hints, metrics and "run finished" logs must only happen if the transaction
commits: a rolled-back decision must not wake a worker or tell a dashboard
something that did not happen.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Awaitable, Callable

from composer_core.model import WorkflowDAG
from composer_engine._admission import Gate
from composer_engine._publish import Dispatched
from composer_engine._writes import Writes
from composer_repo import Connection

log = logging.getLogger("composer.engine")

AfterCommit = Callable[[], Awaitable[None] | None]


class Tx:
    """The event's connection (inside its transaction) and what to do after commit."""

    __slots__ = (
        "_after",
        "conn",
        "deciding",
        "deployed",
        "dispatched",
        "freed",
        "gate",
        "loop_work",
        "now",
        "run_events",
        "writes",
    )

    def __init__(self, conn: Connection, gate: Gate | None = None) -> None:
        self.conn = conn
        #: The admission step (engine/_admission.py); None: no policy.
        self.gate = gate
        #: The watched queues where a task finished in this transaction.
        self.freed: set[str] = set()
        self._after: list[AfterCommit] = []
        #: The event's clock (the lock query's), once a run is locked.
        self.now: dt.datetime | None = None
        #: Dispatches due at once, published right after the commit (engine/_publish.py).
        self.dispatched: list[Dispatched] = []
        #: The outbox ids of events for other runs, delivered right after the commit
        #: (engine/_run_events.py).
        self.run_events: list[int] = []
        #: Writes held back to go in one statement per kind, before the commit.
        self.writes = Writes()
        #: The deployed version of each workflow the transaction's starts read: one read
        #: for a batch of starts (a timer firing schedules), which all start as of it.
        self.deployed: dict[str, WorkflowDAG] = {}
        #: What the transaction is deciding (run, event, actions so far), for the log
        #: line of an internal error: formatted only then, never on the hot path.
        self.deciding: Callable[[], str] | None = None
        #: The share of a template budget the transaction's decisions spent on the event
        #: loop since it last let the loop serve others (engine/_shell.py, ON_LOOP_SHARE).
        self.loop_work = 0.0

    def after_commit(self, fn: AfterCommit) -> None:
        self._after.append(fn)

    async def run_after_commit(self) -> None:
        for fn in self._after:
            try:
                result = fn()
                if result is not None:
                    await result
            except Exception:  # a hint or a metric must never undo a committed event
                log.exception("after-commit hook failed")
