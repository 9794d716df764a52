"""One transaction per event, with side effects that wait for the commit.

Hints, metrics and "run finished" logs must only happen if the transaction
commits: a rolled-back decision must not wake a worker or tell a dashboard
something that did not happen.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Awaitable, Callable

from opentelemetry.metrics import Counter

import composer_queue as cq
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
        "_counts",
        "_hints",
        "_hints_to",
        "_last",
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
        #: What nobody waits on (a finished run's log line): after the hints.
        self._last: list[Callable[[], None]] = []
        #: Wake-up hints to send after commit, each distinct one once (``hint``).
        self._hints: dict[tuple[str, str], None] = {}
        self._hints_to: tuple[cq.Queue, str] | None = None
        #: Counter increments to add after commit, summed by counter and labels (``count``).
        self._counts: dict[tuple[Counter, tuple[tuple[str, str], ...]], int] = {}
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

    def after_hints(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` after commit, once the hints are sent: a log line, which a
        thousand runs finished by one transaction would otherwise put between its
        commit and the hints their waiters wait for."""
        self._last.append(fn)

    def hint(self, redis: cq.Queue, prefix: str, loop: str, message: str = "") -> None:
        """Send a wake-up hint (composer_queue hints) after commit. A hint the
        transaction asks for twice goes once, and all go in one round trip: a group
        commit that finished 25 runs (the timer firing 25 waits) sends its RUN_FINISHED
        hints and one ENQUEUER hint together, not one after another. They go after
        every ``after_commit`` function, which may ask for hints too."""
        self._hints_to = (redis, prefix)
        self._hints[(loop, message)] = None

    def count(self, counter: Counter, n: int = 1, labels: dict[str, str] | None = None) -> None:
        """Add ``n`` to ``counter`` after commit. A group commit of 25 reports adds once
        per counter and labels, not 25 times: each add costs the metrics SDK the
        labels' hashing and a lock, a measurable share of a fired timer's CPU."""
        key = (counter, tuple(labels.items()) if labels else ())
        self._counts[key] = self._counts.get(key, 0) + n

    async def run_after_commit(self) -> None:
        """Run the hooks, add the counts and send the hints, once. The hooks are dropped
        after: they close over this Tx (``announce``'s do), and kept, each transaction
        and what its hooks hold (an event's Effects, lists, closures) would be a cycle
        left to the garbage collector, about 15 objects a W1 step."""
        try:
            for fn in self._after:
                try:
                    result = fn()
                    if result is not None:
                        await result
                except Exception:  # a hint or a metric must never undo a committed event
                    log.exception("after-commit hook failed")
            for (counter, labels), n in self._counts.items():
                try:
                    counter.add(n, dict(labels))
                except Exception:
                    log.exception("after-commit metric failed")
            if self._hints_to is not None:
                redis, prefix = self._hints_to
                await cq.send_hints(redis, prefix, list(self._hints))
            for last in self._last:
                try:
                    last()
                except Exception:
                    log.exception("after-commit hook failed")
        finally:
            self._after.clear()
            self._last.clear()
            self.deciding = None
