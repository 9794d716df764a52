"""Workers' heartbeats, kept in PostgreSQL for the API (``GET /v1/workers``, the
hint on a task whose queue nobody serves; docs/architecture.md §6.5).

Each SDK worker beats every few seconds. One write per beat would be cheap, but
a fleet beating fast (or a test worker beating every 200 ms) should cost a write
per worker per ``write_every`` seconds at most, never one per task: a beat
that comes sooner after the last one written is answered ``recorded=false`` and
dropped, unless it changes the worker's state (a stop is always written). Now and
then (``prune_every``) the writer also deletes a bounded batch of workers unseen
for ``forget_after``, so the table stays the size of the live fleet plus a day.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from composer_engine import Engine, EngineError
from composer_engine.records import WorkerBeat, WorkerState
from composer_rpc.v1 import worker_pb2 as pb

log = logging.getLogger("composer.coordinator")

_STATES: dict[int, WorkerState] = {
    pb.WORKER_STATE_SERVING: "SERVING",
    pb.WORKER_STATE_DRAINING: "DRAINING",
    pb.WORKER_STATE_STOPPED: "STOPPED",
}
#: Bounds on what a beat may carry: the table holds what a person reads.
MAX_ID = 200
MAX_QUEUES = 256


class BadBeat(ValueError):
    """A heartbeat that cannot be recorded: the message names the field and the fix."""


def beat_of(request: pb.HeartbeatRequest, covered: frozenset[str] | None) -> WorkerBeat:
    """The beat to record, with only the queues the worker's token covers (``covered``,
    None: all): a queue it may not lease from is not one it serves."""
    if not request.worker_id or len(request.worker_id) > MAX_ID:
        raise BadBeat(f"worker_id is required, at most {MAX_ID} characters")
    if len(request.queues) > MAX_QUEUES or any(len(q) > MAX_ID for q in request.queues):
        raise BadBeat(f"queues: at most {MAX_QUEUES}, each at most {MAX_ID} characters")
    if request.state == pb.WORKER_STATE_UNSPECIFIED:
        raise BadBeat("state must be SERVING, DRAINING or STOPPED")
    # a value this coordinator does not know (a newer SDK's) reads as SERVING: a worker
    # that beats is alive (worker.proto, "Versions")
    state = _STATES.get(request.state, "SERVING")
    queues = tuple(sorted({q for q in request.queues if covered is None or q in covered}))
    started = (
        dt.datetime.fromtimestamp(request.started_at, dt.UTC)
        if request.started_at > 0
        else dt.datetime.now(dt.UTC)
    )
    return WorkerBeat(
        worker_id=request.worker_id,
        host=request.host[:MAX_ID],
        queues=queues,
        concurrency=max(0, request.concurrency),
        in_flight=max(0, request.in_flight),
        sdk_version=request.sdk_version[:MAX_ID],
        state=state,
        started_at=started,
    )


@dataclass
class Presence:
    """Records beats, at most one write per worker every ``write_every`` seconds."""

    engine: Engine
    write_every: float = 5.0
    prune_every: float = 600.0
    forget_after: float = 86400.0
    clock: Callable[[], float] = time.monotonic
    #: worker id → (when its last beat was written, the state written).
    _written: dict[str, tuple[float, WorkerState]] = field(default_factory=dict)
    _pruned_at: float | None = None

    async def record(self, beat: WorkerBeat) -> bool:
        """Write ``beat`` unless one of the same state was written too recently; True
        if written. Raises EngineError (the caller answers UNAVAILABLE)."""
        now = self.clock()
        last = self._written.get(beat.worker_id)
        if last is not None and last[1] == beat.state and now - last[0] < self.write_every:
            return False
        self._written[beat.worker_id] = (now, beat.state)
        try:
            await self.engine.upkeep.record_heartbeat(beat)
        except BaseException:
            self._written.pop(beat.worker_id, None)  # the next beat tries again
            raise
        if beat.state == "STOPPED":
            self._written.pop(beat.worker_id, None)
        await self._prune(now)
        return True

    async def _prune(self, now: float) -> None:
        if self._pruned_at is not None and now - self._pruned_at < self.prune_every:
            return
        self._pruned_at = now
        stale = [w for w, (at, _) in self._written.items() if now - at > self.prune_every]
        for worker_id in stale:
            del self._written[worker_id]
        try:
            gone = await self.engine.upkeep.prune_workers(unseen_seconds=self.forget_after)
        except EngineError as exc:  # the next prune tries again; the beat was written
            log.warning("forgetting workers unseen for %.0fs failed: %s", self.forget_after, exc)
            return
        if gone:
            log.info("forgot %d worker(s) unseen for %.0fs", gone, self.forget_after)
