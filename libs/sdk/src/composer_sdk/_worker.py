"""The worker runtime: read tasks from a queue's streams, lease, run, renew, report, ack.

For each queue it reads the queue's shard streams through the consumer group
with bounded concurrency. For every message: take the lease from the
coordinator (a duplicate delivery or a stale attempt is not granted and is
just acknowledged), run the handler under the node's timeout while renewing
the lease every ttl/3 (a lost lease cancels the handler and reports
nothing), report the outcome (retried until the coordinator records it,
never dropped), and only then XACK. On SIGTERM it stops reading and lets
in-flight tasks finish for a grace period; a message whose report could not
be delivered stays pending in its stream for the lease-sweeper to reclaim.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from opentelemetry.trace import SpanKind
from redis.exceptions import RedisError, ResponseError

from composer_common import streams
from composer_common.logs import alert, log_context
from composer_common.telemetry import extract, tracer
from composer_sdk._client import CoordinatorClient
from composer_sdk._handler import Handler, HandlerFn, Outcome, TaskContext
from composer_sdk.errors import SdkError

log = logging.getLogger("composer.sdk")


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    redis_url: str = "redis://127.0.0.1:6379/0"
    coordinator: str = "127.0.0.1:50051"
    token: str = ""
    redis_prefix: str = "composer"
    shards: int = streams.DEFAULT_SHARDS
    #: Tasks run at once by this process, across its queues.
    concurrency: int = 16
    lease_ttl: float = 30.0
    #: The timeout of a node that sets none.
    default_timeout: float = 300.0
    #: How long SIGTERM waits for in-flight tasks before cancelling them.
    drain_seconds: float = 30.0
    read_block_ms: int = 1000
    #: Lease owner and consumer name; unique per process by default.
    owner: str | None = None


class Worker:
    """Runs registered handlers. ``worker.handler("payments")`` decorates ``async def f(ctx, input)``."""

    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        self.owner = config.owner or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._handlers: dict[str, Handler] = {}
        self._stopping = asyncio.Event()
        self._in_flight: set[asyncio.Task[None]] = set()
        #: Attempts this process is running: a duplicate delivery of one is skipped here,
        #: since the coordinator re-grants a lease to the owner that holds it.
        self._running: set[tuple[str, int]] = set()
        self._slots = asyncio.Semaphore(config.concurrency)
        self._redis: Any = None
        self._client: CoordinatorClient | None = None
        #: Counters for tests, metrics and logs.
        self.completed = 0
        self.failed = 0
        self.skipped = 0

    # -- registration ----------------------------------------------------------

    def handler(self, queue: str) -> Callable[[HandlerFn], HandlerFn]:
        def register(fn: HandlerFn) -> HandlerFn:
            self.add_handler(queue, fn)
            return fn

        return register

    def add_handler(self, queue: str, fn: HandlerFn) -> None:
        if queue in self._handlers:
            raise SdkError(
                f"queue {queue!r} already has a handler ({self._handlers[queue].fn.__qualname__})"
            )
        self._handlers[queue] = Handler.of(queue, fn)

    # -- running ---------------------------------------------------------------

    def stop(self) -> None:
        """Stop reading; in-flight tasks get ``drain_seconds`` to finish."""
        self._stopping.set()

    def install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop)

    async def run(self) -> None:
        """Serve every registered queue until ``stop()``; then drain and return."""
        if not self._handlers:
            raise SdkError("no handlers registered: add one with worker.handler(queue)")
        cfg = self.config
        self._redis = streams.connect(cfg.redis_url)
        self._client = CoordinatorClient(cfg.coordinator, cfg.token)
        try:
            for queue in self._handlers:
                await self._ensure_groups(queue)
            log.info(
                "worker %s serving %s (concurrency %d)",
                self.owner,
                ", ".join(sorted(self._handlers)),
                cfg.concurrency,
            )
            readers = [
                asyncio.create_task(self._read(h), name=f"read:{h.queue}")
                for h in self._handlers.values()
            ]
            stop = asyncio.create_task(self._stopping.wait(), name="worker-stop")
            await asyncio.wait([*readers, stop], return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
            for task in readers:
                task.cancel()
            for task in readers:
                with contextlib.suppress(asyncio.CancelledError):
                    await task  # a reader that died raises here, after the others stopped
            await self._drain()
        finally:
            await self._client.close()
            await self._redis.aclose()

    async def _drain(self) -> None:
        if not self._in_flight:
            return
        log.info(
            "draining %d in-flight task(s) for up to %.0fs",
            len(self._in_flight),
            self.config.drain_seconds,
        )
        _, pending = await asyncio.wait(self._in_flight, timeout=self.config.drain_seconds)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)
            log.warning(
                "%d task(s) did not finish in time; their messages stay pending for recovery",
                len(pending),
            )

    async def _ensure_groups(self, queue: str) -> None:
        for stream in streams.queue_streams(self.config.redis_prefix, queue, self.config.shards):
            try:
                await self._redis.xgroup_create(stream, streams.GROUP, id="0", mkstream=True)
            except ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    async def _read(self, handler: Handler) -> None:
        cfg = self.config
        names = streams.queue_streams(cfg.redis_prefix, handler.queue, cfg.shards)
        delay = 0.1
        while not self._stopping.is_set():
            await self._slots.acquire()
            free = 1
            while free < cfg.concurrency and not self._slots.locked():
                await self._slots.acquire()
                free += 1
            try:
                reply = await self._redis.xreadgroup(
                    streams.GROUP,
                    self.owner,
                    dict.fromkeys(names, ">"),
                    count=free,
                    block=cfg.read_block_ms,
                )
                delay = 0.1
            except (RedisError, OSError) as exc:
                for _ in range(free):
                    self._slots.release()
                if "NOGROUP" in str(exc):
                    await self._ensure_groups(handler.queue)
                    continue
                log.warning(
                    "reading queue %s failed: %s; retrying in %.1fs", handler.queue, exc, delay
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            entries = streams.read_entries(reply)
            for _ in range(free - len(entries)):
                self._slots.release()
            # COUNT applies to each stream, so up to shards x free entries can come
            # back: each one past the slots held waits for a slot of its own, which
            # keeps the tasks running at once within the concurrency.
            for i, (stream, entry_id, fields) in enumerate(entries):
                if i >= free:
                    await self._slots.acquire()
                task = asyncio.create_task(
                    self._process(handler, stream, entry_id, fields), name=f"task:{entry_id}"
                )
                self._in_flight.add(task)
                task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._in_flight.discard(task)
        self._slots.release()
        if not task.cancelled() and task.exception() is not None:
            log.error("processing a message crashed", exc_info=task.exception())

    async def _process(
        self, handler: Handler, stream: str, entry_id: str, fields: dict[str, str]
    ) -> None:
        try:
            msg = streams.TaskMessage.from_fields(fields)
        except ValueError as exc:
            alert(
                log,
                "dropping malformed message %s on %s (its task will be recovered by the sweeper): %s",
                entry_id,
                stream,
                exc,
            )
            await self._ack(stream, entry_id)
            return
        key = (msg.task_id, msg.attempt)
        if key in self._running:
            log.info(
                "task %s attempt %d is already running here: duplicate delivery skipped",
                msg.task_id,
                msg.attempt,
            )
            self.skipped += 1
            await self._ack(stream, entry_id)
            return
        self._running.add(key)
        parent = extract({"traceparent": msg.traceparent} if msg.traceparent else {})
        attributes: dict[str, str | int] = {
            "composer.run_id": msg.run_id,
            "composer.task_id": msg.task_id,
            "composer.node_id": msg.node_id,
            "composer.attempt": msg.attempt,
        }
        try:
            with (
                tracer().start_as_current_span(
                    f"task {handler.queue}",
                    context=parent,
                    kind=SpanKind.CONSUMER,
                    attributes=attributes,
                ),
                log_context(run_id=msg.run_id, task_id=msg.task_id, node_id=msg.node_id),
            ):
                await self._run_leased(handler, stream, entry_id, msg)
        finally:
            self._running.discard(key)

    async def _run_leased(
        self, handler: Handler, stream: str, entry_id: str, msg: streams.TaskMessage
    ) -> None:
        assert self._client is not None
        cfg = self.config
        lease = await self._client.acquire(
            msg.task_id,
            msg.run_id,
            msg.attempt,
            self.owner,
            cfg.lease_ttl,
            until=self._stopping.is_set,
        )
        if lease is None:
            return  # shutting down with the coordinator away: the message stays pending
        if not lease.granted:
            log.info(
                "task %s attempt %d not leased (%s): skipping",
                msg.task_id,
                msg.attempt,
                lease.reason,
            )
            self.skipped += 1
            await self._ack(stream, entry_id)
            return
        # Until when this process knows it holds the lease: it was granted no earlier
        # than the request was sent. A grant that arrives after that (this process
        # was frozen, or the reply sat in a queue) may have been taken over already:
        # run only if a renewal confirms it is still ours.
        valid_until = (lease.asked_at or time.monotonic()) + cfg.lease_ttl
        if time.monotonic() >= valid_until:
            asked = time.monotonic()
            if await self._renew(msg, asked) is not True:
                log.warning(
                    "task %s attempt %d: the lease came back after its TTL and is no longer "
                    "ours: not running it",
                    msg.task_id,
                    msg.attempt,
                )
                self.skipped += 1
                await self._ack(stream, entry_id)
                return
            valid_until = asked + cfg.lease_ttl
        raw = msg.input_json if msg.input_json is not None else lease.input_json
        ctx = TaskContext(
            msg.task_id,
            msg.run_id,
            msg.node_id,
            msg.attempt,
            lease.max_attempts or msg.max_attempts,
            msg.workflow_id,
            msg.workflow_version,
            msg.timeout_seconds or cfg.default_timeout,
            logging.getLogger(f"composer.task.{handler.queue}"),
        )
        run = asyncio.create_task(
            handler.invoke(
                ctx, json.loads(raw) if raw else None, msg.timeout_seconds or cfg.default_timeout
            )
        )
        lost = await self._renew_until_done(run, msg, valid_until)
        if lost:
            run.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await run
            log.warning(
                "lost the lease on task %s attempt %d: handler cancelled, nothing reported",
                msg.task_id,
                msg.attempt,
            )
            await self._ack(stream, entry_id)
            return
        outcome: Outcome = run.result()
        accepted = await self._client.report(
            msg.task_id,
            msg.run_id,
            msg.node_id,
            msg.attempt,
            self.owner,
            outcome,
            until=self._stopping.is_set,
        )
        if accepted is None:
            log.warning(
                "could not report task %s before shutdown: it stays pending for recovery",
                msg.task_id,
            )
            return
        if outcome.status == "COMPLETED":
            self.completed += 1
        else:
            self.failed += 1
        await self._ack(stream, entry_id)

    async def _renew_until_done(
        self, run: asyncio.Task[Outcome], msg: streams.TaskMessage, valid_until: float
    ) -> bool:
        """Renew every ttl/3 while the handler runs; True if the lease was lost.

        Lost also means not confirmed in time: when no renewal got through before
        ``valid_until`` (monotonic; the coordinator unreachable, this process frozen),
        the lease may have been taken over, so the handler must stop.
        """
        ttl = self.config.lease_ttl
        try:
            while True:
                wait = min(ttl / 3, max(0.0, valid_until - time.monotonic()))
                done, _ = await asyncio.wait([run], timeout=wait)
                if done:
                    return False
                asked = time.monotonic()
                ok = await self._renew(msg, asked, deadline=valid_until)
                if ok is False:
                    return True
                if ok:
                    valid_until = asked + ttl
                elif time.monotonic() >= valid_until:
                    log.warning(
                        "task %s attempt %d: no renewal got through before the lease ran out",
                        msg.task_id,
                        msg.attempt,
                    )
                    return True
        except asyncio.CancelledError:
            run.cancel()
            raise

    async def _renew(
        self, msg: streams.TaskMessage, asked: float, *, deadline: float | None = None
    ) -> bool | None:
        """One renewal; None when it did not get an answer (by ``deadline``, if given)."""
        assert self._client is not None
        call = self._client.renew(
            msg.task_id, msg.run_id, msg.attempt, self.owner, self.config.lease_ttl
        )
        if deadline is None:
            return await call
        try:
            return await asyncio.wait_for(call, max(0.05, deadline - asked))
        except TimeoutError:
            return None

    async def _ack(self, stream: str, entry_id: str) -> None:
        delay = 0.1
        for _ in range(20):
            try:
                # Acknowledge, then delete: a handled entry is never read again,
                # and deleting keeps the stream from growing without bound.
                async with self._redis.pipeline(transaction=False) as pipe:
                    pipe.xack(stream, streams.GROUP, entry_id)
                    pipe.xdel(stream, entry_id)
                    await pipe.execute()
                return
            except (RedisError, OSError) as exc:
                log.warning("XACK %s on %s failed: %s", entry_id, stream, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
