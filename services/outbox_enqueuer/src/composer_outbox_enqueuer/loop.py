"""Publishing committed outbox rows that their committer did not publish.

Whoever commits a dispatch due at once (the coordinator, the gateway, the
timer, the sweeper) publishes it right after the commit and deletes its row;
this loop is the fallback (docs/architecture.md §4.3). It takes such a row only
once it is ``grace`` seconds old — its committer crashed between commit and
publish, or Redis was away — and a delayed dispatch (a retry's backoff) when
it comes due. Dispatch rows: claim a batch (FOR UPDATE SKIP LOCKED, only rows whose
next_attempt_at has come, so retry backoff holds), XADD each to its sharded
stream in one pipeline, then in the same transaction delete the rows and mark
the tasks QUEUED, and commit. A crash after XADD and before commit publishes
again later: a duplicate message, which the lease makes harmless. A Redis
failure rolls back (nothing lost) and backs off. Several replicas never
publish the same row at once (SKIP LOCKED).

Webhook rows: POST ``{run_id, workflow_id, version, status, error, output}``
to the definition's webhook_url through the HTTP executor (its SSRF guard
applies); a failure is retried with exponential backoff until a bounded
time has passed, then dropped with an error log.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import logging
from dataclasses import dataclass, field

import aiohttp
from opentelemetry.metrics import Histogram

import composer_queue as cq
import composer_repo as repo
from composer_common.telemetry import meter
from composer_executors import ExecutionError, HttpPolicy, create_http_session, run_http
from composer_service import sleep_or_stop

log = logging.getLogger("composer.outbox")


@dataclass
class Enqueuer:
    pool: repo.Pool
    redis: cq.Queue
    prefix: str = "composer"
    shards: int = cq.DEFAULT_SHARDS
    batch_size: int = 200
    #: How old a dispatch due at once must be before it is taken from its committer.
    grace: float = 2.0
    poll_seconds: float = 1.0
    webhook_batch_size: int = 20
    webhook_timeout: float = 10.0
    webhook_give_up: float = 3600.0
    #: First retry delay of a failed webhook; doubles per attempt (capped at 5 minutes).
    webhook_backoff: float = 1.0
    http_policy: HttpPolicy = field(default_factory=HttpPolicy)
    published: int = 0
    webhooks_delivered: int = 0

    async def run(self, stop: asyncio.Event) -> None:
        """Publish until ``stop`` is set; woken by hints, polling as a fallback.

        One transaction per wake-up in the steady state: the dispatch claim also
        asks when the next dispatch is due. Webhooks are looked at when a hint
        says one was written, when one is due, or once per poll interval.
        """
        backoff = cq.Backoff(0.1, 5.0)
        loop = asyncio.get_running_loop()
        webhooks_at = 0.0  # loop time when webhooks are next looked at
        async with (
            cq.Waker(self.redis, self.prefix, cq.ENQUEUER) as waker,
            create_http_session(self.http_policy) as session,
        ):
            while not stop.is_set():
                try:
                    published, next_due = await self.publish_dispatches()
                    delivered = 0
                    if cq.WEBHOOK in waker.take_messages() or loop.time() >= webhooks_at:
                        delivered, webhook_due = await self.deliver_webhooks(session)
                        webhooks_at = loop.time() + _until(webhook_due, self.poll_seconds)
                    backoff.reset()
                except (cq.QueueUnavailable, repo.Transient) as exc:
                    delay = backoff.next()
                    log.warning("publishing paused: %s; retrying in %.1fs", exc, delay)
                    await sleep_or_stop(stop, delay)
                    continue
                if published >= self.batch_size or delivered >= self.webhook_batch_size:
                    continue  # more is waiting
                wait = min(_until(next_due, self.poll_seconds), max(0.0, webhooks_at - loop.time()))
                if wait > 0:
                    await waker.wait_or_stop(stop, wait)

    async def publish_dispatches(self) -> tuple[int, dt.datetime | None]:
        """Publish one batch of due dispatches; returns how many, and when the next is due."""
        async with repo.transaction(self.pool) as conn:
            messages = await repo.claim_outbox(
                conn, "dispatch", limit=self.batch_size, grace=self.grace
            )
            if not messages:
                return 0, await repo.next_outbox_due(conn, "dispatch", grace=self.grace)
            refs: list[repo.TaskRef] = []
            batch: list[tuple[str, dict[str, str]]] = []
            for m in messages:
                fields = {str(k): str(v) for k, v in m.payload.items()}
                stream = cq.task_stream(self.prefix, m.destination, fields["task_id"], self.shards)
                batch.append((stream, fields))
                # (a message names the attempt only: mark_published needs no node)
                refs.append(repo.TaskRef(m.run_id, fields["task_id"], "", int(fields["attempt"])))
            await self.redis.publish(batch)  # raises on a Redis failure: the transaction rolls back
            next_due = await repo.mark_published(
                conn, [m.id for m in messages], refs, grace=self.grace
            )
            if len(messages) >= self.batch_size:
                next_due = None  # a full batch: look again at once
        self.published += len(messages)
        now = dt.datetime.now(dt.UTC)
        lag = _lag_histogram()
        for m in messages:  # how long a due dispatch waited for its publish
            lag.record(max(0.0, (now - max(m.created_at, m.next_attempt_at)).total_seconds()))
        log.debug("published %d dispatch(es)", len(messages))
        return len(messages), next_due

    async def deliver_webhooks(
        self, session: aiohttp.ClientSession
    ) -> tuple[int, dt.datetime | None]:
        """Deliver one batch of due webhooks; returns how many were tried, and when the next is due."""
        async with repo.transaction(self.pool) as conn:
            messages = await repo.claim_outbox(conn, "webhook", limit=self.webhook_batch_size)
            if not messages:
                return 0, await repo.next_outbox_due(conn, "webhook")
            results = await asyncio.gather(*(self._post(session, m) for m in messages))
            done = [m.id for m, error in zip(messages, results, strict=True) if error is None]
            await repo.delete_outbox(conn, done)
            now = dt.datetime.now(dt.UTC)
            for m, error in zip(messages, results, strict=True):
                if error is None:
                    continue
                age = (now - m.created_at).total_seconds()
                if age >= self.webhook_give_up:
                    log.error(
                        "giving up on the webhook of run %s to %s after %d attempts over %.0fs: %s",
                        m.run_id,
                        m.destination,
                        m.attempts + 1,
                        age,
                        error,
                    )
                    await repo.delete_outbox(conn, [m.id])
                    continue
                delay = min(self.webhook_backoff * 2.0**m.attempts, 300.0)
                log.warning(
                    "webhook of run %s to %s failed (%s); retrying in %.0fs",
                    m.run_id,
                    m.destination,
                    error,
                    delay,
                )
                await repo.postpone_outbox(
                    conn, m.id, not_before=now + dt.timedelta(seconds=delay), error=error
                )
            next_due = await repo.next_outbox_due(conn, "webhook")
        self.webhooks_delivered += len(done)
        return len(messages), next_due

    async def _post(
        self, session: aiohttp.ClientSession, message: repo.OutboxMessage
    ) -> str | None:
        spec = {"method": "POST", "url": message.destination, "body": message.payload}
        try:
            await run_http(
                spec, timeout=self.webhook_timeout, session=session, policy=self.http_policy
            )
        except ExecutionError as exc:
            return str(exc)
        return None


def _until(when: dt.datetime | None, cap: float) -> float:
    """Seconds until ``when`` (at most ``cap``; ``cap`` when there is nothing due)."""
    if when is None:
        return cap
    return min(cap, max(0.0, (when - dt.datetime.now(dt.UTC)).total_seconds()))


@functools.cache
def _lag_histogram() -> Histogram:
    return meter().create_histogram(
        "composer_outbox_lag_seconds",
        unit="s",
        description="A dispatch due in the outbox to its publish",
    )
