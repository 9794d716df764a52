"""The engine: every input becomes an event, and every event goes through
lock → decide → persist → commit in one transaction (docs/architecture.md §3).

``Engine`` puts the use cases together over one shared shell (``_shell``):

    run commands   _runs.py         start, signal, cancel, retry
    pauses         _pauses.py       pause, resume
    reports        _reports.py      report, report_many (group commit), report_completed/failed
    leases         _leasing.py      acquire/renew one or many, batched (lease, renew)
    loop events    _loop_events.py  fire_timer, expire_lease, redispatch
    run events     _run_event_delivery.py  events one run sent another, applied once
    reads          _reads.py        a run, runs, history, logs, workers: payloads shown or not
    operations     _operations.py   bulk cancel and retry, run in the background (§6.7)
    workflows      _workflows.py    definitions: create, apply, deploy, delete, read
    admission      _admission.py, _held.py  a policy that holds ready tasks; their release
    upkeep         _upkeep.py       what the loops read and keep: waits, leases, partitions, workers
    outbox         _outbox.py       the enqueuer's fallback: claim, publish (_publish.py), delete
    the shell      _shell.py        handle (lock → decide → persist), the decision thread
    the retry loop _transaction.py  one transaction, retried while the database is away

Errors tell the truth: a lost connection rolls the transaction back and the
whole event is applied again on a fresh snapshot, with backoff (Unavailable
once it keeps failing); a stale snapshot is retried once; anything else that
is not the caller's fault — an exception from the machine, a repository error,
a second stale snapshot — is a bug: one ALERT line, then Internal.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import composer_queue as cq
import composer_repo as repo
from composer_common import ids, limits
from composer_core.kinds.map import DEFAULT_MAX_ITEMS
from composer_engine._admission import AdmissionPolicy, Gate
from composer_engine._children import DEFAULT_MAX_CHILD_DEPTH
from composer_engine._definitions import DefinitionCache
from composer_engine._held import HeldTasks
from composer_engine._leases import new_token
from composer_engine._leasing import Leasing
from composer_engine._loop_events import LoopEvents
from composer_engine._operations import Operations
from composer_engine._outbox import Outbox
from composer_engine._pauses import RunPauses
from composer_engine._reads import Reads
from composer_engine._reports import Reports
from composer_engine._run_event_delivery import RunEventDelivery
from composer_engine._runs import RunCommands
from composer_engine._schedules import Schedules
from composer_engine._shell import Shell, utcnow
from composer_engine._transaction import DEFAULT_ATTEMPTS
from composer_engine._upkeep import Upkeep
from composer_engine._workflows import Workflows
from composer_engine.sealing import Sealer


class Engine:
    """Applies events to runs. Safe to share between tasks and to run in many processes.

    Each public method is its use case's (``runs``, ``reports``, ``leases``,
    ``loops``); callers may use either. ``reads`` and ``workflows`` are used as such."""

    def __init__(
        self,
        pool: repo.Pool,
        *,
        redis: cq.Queue | None = None,
        redis_prefix: str = "composer",
        shards: int = cq.DEFAULT_SHARDS,
        definitions: DefinitionCache | None = None,
        clock: Callable[[], dt.datetime] = utcnow,
        new_id: Callable[[], str] = ids.new_id,
        new_lease_token: Callable[[], str] = new_token,
        attempts: int = DEFAULT_ATTEMPTS,
        batch_size: int = 256,
        batches_in_flight: int = 2,
        max_node_input_bytes: int | None = limits.DEFAULT_MAX_NODE_INPUT_BYTES,
        max_output_bytes: int | None = limits.DEFAULT_MAX_OUTPUT_BYTES,
        sealer: Sealer | None = None,
        park_seconds: float = 300.0,
        admission: AdmissionPolicy | None = None,
        max_child_depth: int = DEFAULT_MAX_CHILD_DEPTH,
        map_max_items: int = DEFAULT_MAX_ITEMS,
    ) -> None:
        """``batch_size`` and ``batches_in_flight`` bound each group commit of reports
        and each batch of leases and renewals: how many go in one transaction (one
        statement), how many at once.

        ``max_node_input_bytes`` (COMPOSER_MAX_NODE_INPUT_BYTES): an attempt whose
        input is larger is not leased but failed for good; ``max_output_bytes``
        (COMPOSER_MAX_OUTPUT_BYTES): a worker's report of a larger output fails its
        node for good instead (None: no limit).

        ``sealer`` seals every document written and opens what the machine and the
        lease use (COMPOSER_ENCRYPTION_KEYS; None: no keys, documents stay plain). An
        attempt whose input does not open here is parked for ``park_seconds``.

        ``admission`` may hold tasks ready to go until it has room for them
        (COMPOSER_QUEUE_CONCURRENCY; None: every dispatch goes at once).

        ``max_child_depth`` (COMPOSER_MAX_CHILD_DEPTH): how deep SUB_WORKFLOW children
        nest; a node that would start a deeper one fails (engine/_children.py).

        ``map_max_items`` (COMPOSER_MAP_MAX_ITEMS) caps how many items a MAP node may
        take, whatever its max_items says."""
        shell = Shell(
            pool,
            redis=redis,
            redis_prefix=redis_prefix,
            shards=shards,
            definitions=definitions,
            clock=clock,
            new_id=new_id,
            attempts=attempts,
            max_node_input_bytes=max_node_input_bytes,
            sealer=sealer,
            max_child_depth=max_child_depth,
            map_max_items=map_max_items,
        )
        self._shell = shell
        self.pool = pool
        self.definitions = shell.definitions
        self.max_node_input_bytes = max_node_input_bytes
        self.max_output_bytes = max_output_bytes
        self.runs = RunCommands(shell)
        self.pauses = RunPauses(shell)
        self.leases = Leasing(
            shell,
            batch_size=batch_size,
            batches_in_flight=batches_in_flight,
            new_lease_token=new_lease_token,
            max_node_input_bytes=max_node_input_bytes,
            park_seconds=park_seconds,
        )
        self.reports = Reports(
            shell,
            batch_size=batch_size,
            batches_in_flight=batches_in_flight,
            max_output_bytes=max_output_bytes,
            leasing=self.leases,
        )
        self.loops = LoopEvents(shell)
        self.run_events = RunEventDelivery(shell)
        self.held = HeldTasks(shell)
        # always a gate: node concurrency keys come with definitions, not settings
        shell.gate = Gate(admission, self.held.release_soon, self.held.release_later)
        shell.deliver = self.run_events.deliver_soon
        self.reads = Reads(shell)
        self.operations = Operations(shell, self.runs)
        self.schedules = Schedules(shell, self.runs)
        self.upkeep = Upkeep(shell)
        self.outbox = Outbox(shell)
        self.workflows = Workflows(pool, attempts=attempts)
        # -- the public inputs, each its use case's ------------------------------
        self.handle = shell.handle
        self.start = self.runs.start
        self.signal = self.runs.signal
        self.cancel = self.runs.cancel
        self.retry = self.runs.retry
        self.pause = self.pauses.pause
        self.resume = self.pauses.resume
        self.report = self.reports.report
        self.report_many = self.reports.report_many
        self.fire_timers = self.reports.fire_timers
        self.report_completed = self.reports.report_completed
        self.report_failed = self.reports.report_failed
        self.lease = self.leases.lease
        self.renew = self.leases.renew
        self.acquire_lease = self.leases.acquire_lease
        self.acquire_leases = self.leases.acquire_leases
        self.renew_lease = self.leases.renew_lease
        self.renew_leases = self.leases.renew_leases
        self.fire_timer = self.loops.fire_timer
        self.expire_lease = self.loops.expire_lease
        self.redispatch = self.loops.redispatch
        self.deliver_run_event = self.run_events.deliver
        self.deliver_due_run_events = self.run_events.deliver_due
        self.release_held = self.held.release
        self.set_rate_limit = self.held.set_rate_limit

    @property
    def redis_prefix(self) -> str:
        """The Redis key prefix this engine publishes tasks under."""
        return self._shell.prefix

    @property
    def redis_topology(self) -> str:
        """How this engine reaches Redis: "cluster" (a Redis Cluster) or "server"."""
        return "cluster" if isinstance(self._shell.redis, cq.ClusterQueue) else "server"

    @property
    def shards(self) -> int:
        """The shard streams per queue this engine publishes tasks to."""
        return self._shell.shards

    @property
    def sealer(self) -> Sealer:
        """What seals and opens the runs' documents (every use case's)."""
        return self._shell.sealer

    @sealer.setter
    def sealer(self, sealer: Sealer) -> None:
        self._shell.sealer = sealer

    async def aclose(self) -> None:
        """Wait for the group commits in flight (a caller that gave up on one, a
        cancelled RPC, leaves it running: it would go on publishing to a closed Redis
        client, which opens its connections again), then delete now the outbox rows of
        the dispatches published so far (their deletion is batched, off the callers'
        path: engine/_publish.py). Call it before closing the pool and the Redis
        client; a row it misses is published again by the outbox-enqueuer (a duplicate
        message, refused a second lease). The engine stays usable."""
        await self.schedules.settle()
        await self.runs.settle()
        await self.reports.settle()
        await self.leases.settle()
        await self._shell.aclose()
        await self.run_events.aclose()
        await self.held.aclose()
