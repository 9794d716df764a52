"""Publishing committed outbox rows that their committer did not publish, and webhooks.

Whoever commits a dispatch due at once (the coordinator, the gateway, the
timer, the sweeper) publishes it right after the commit and deletes its row;
this loop is the fallback (docs/architecture.md §4.3). It takes such a row only
once it is ``grace`` seconds old — its committer crashed between commit and
publish, or Redis was away — and a delayed dispatch (a retry's backoff) when
it comes due. Dispatch rows: claim a batch (FOR UPDATE SKIP LOCKED, only rows whose
next_attempt_at has come, so retry backoff holds), XADD each to its sharded
stream in one pipeline through the engine's publisher (the committers' own,
engine/_publish.py), then in the same transaction delete the rows and mark
the tasks QUEUED, and commit (``Engine.outbox``, engine/_outbox.py). A crash
after XADD and before commit publishes again later: a duplicate message, which the lease makes harmless. A Redis
failure rolls back (nothing lost) and backs off. Several replicas never
publish the same row at once (SKIP LOCKED).

Webhook rows go out from a task of their own, outside any transaction, so a
slow receiver holds no row lock and never holds up a dispatch: lease a batch
(the rows' next_attempt_at moves past the POST's timeout, and the lease
commits), POST ``{run_id, workflow_id, version, status, error, output}`` to
each definition's webhook_url through the HTTP executor (its SSRF guard
applies), then in a short transaction delete the delivered rows and postpone
the failed ones with exponential backoff, until a bounded time has passed
(then dropped with an error log). Each POST carries ``Composer-Delivery`` (a
random id kept with the row: the same on every retry, for the receiver to dedupe
on, and telling nothing of how many webhooks went out), ``Composer-Timestamp``
(unix seconds) and, when a secret is configured, ``Composer-Signature: v2=<hex
HMAC-SHA256(secret, "<delivery id>.<timestamp>." + body)>``: the id is signed, so a
replay cannot pass as a new delivery by changing it.
A webhook_url's ``user:password@`` goes out as Basic auth and nowhere else: log
lines and the stored errors show ``***@`` and ``***`` in its place.

One bad row never stops the loop: whatever goes wrong with one row (a payload
that does not decode, a bug) is an ALERT naming its run, the row is set aside
with the error, and the others go on.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import hashlib
import hmac
import json
import logging
import time
import traceback
from dataclasses import dataclass, field
from urllib.parse import unquote

import aiohttp
from opentelemetry.metrics import Histogram

import composer_queue as cq
from composer_common.logs import ALERT, alert, log_context
from composer_common.telemetry import meter
from composer_core.model import HIDDEN_CREDENTIALS, credentials_of, hide_credentials
from composer_engine import Engine, EngineError, Unavailable
from composer_engine.records import OutboxMessage
from composer_engine.sealing import Sealer, SealingError
from composer_executors import ExecutionError, HttpPolicy, create_http_session, run_http
from composer_service import sleep_or_stop

log = logging.getLogger("composer.outbox")

#: The headers of a webhook POST (documented for receivers in the README).
DELIVERY_HEADER = "Composer-Delivery"
TIMESTAMP_HEADER = "Composer-Timestamp"
SIGNATURE_HEADER = "Composer-Signature"


def sign(secret: str, delivery: str, timestamp: str, body: bytes) -> str:
    """The ``Composer-Signature`` value: ``v2=`` and the hex HMAC-SHA256 of
    ``"<delivery id>.<timestamp>." + body`` under ``secret``. Binding the timestamp
    lets a receiver refuse an old delivery replayed by whoever saw it; binding the
    delivery id, that the replay pass its dedupe under another id. (``v1`` signed
    the timestamp and body only; the version says which text is signed.)"""
    signed = f"{delivery}.{timestamp}.".encode() + body
    return "v2=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


@dataclass
class Enqueuer:
    #: Publishes through its publisher (engine/_publish.py), to its Redis prefix and
    #: shards, and applies the events between runs their committer did not deliver.
    engine: Engine
    #: Where the hints that wake this loop come from.
    redis: cq.Queue
    prefix: str = "composer"
    batch_size: int = 200
    #: How old a dispatch due at once must be before it is taken from its committer.
    grace: float = 2.0
    poll_seconds: float = 1.0
    webhook_batch_size: int = 20
    webhook_timeout: float = 10.0
    webhook_give_up: float = 3600.0
    #: First retry delay of a failed webhook; doubles per attempt (capped at 5 minutes).
    webhook_backoff: float = 1.0
    #: The key of each webhook's signature (COMPOSER_WEBHOOK_SECRET); empty: unsigned.
    webhook_secret: str = ""
    #: How long a leased webhook stays out of other claimers' reach beyond its POST's
    #: timeout (the time to record the outcome).
    webhook_lease_margin: float = 30.0
    #: How long a dispatch row that cannot be published is set aside; it ALERTs again
    #: each time it comes back, until someone fixes or deletes it.
    park_seconds: float = 3600.0
    http_policy: HttpPolicy = field(default_factory=HttpPolicy)
    #: Opens webhook payloads, which the engine seals whole (COMPOSER_ENCRYPTION_KEYS).
    sealer: Sealer = field(default_factory=Sealer)
    #: Applies the events for other runs that their committer did not deliver
    #: (docs/architecture.md §4.10); False: this enqueuer leaves them to another.
    run_events: bool = False
    published: int = 0
    webhooks_delivered: int = 0
    run_events_delivered: int = 0

    async def run(self, stop: asyncio.Event) -> None:
        """Publish until ``stop`` is set; woken by hints, polling as a fallback.

        Two named tasks: dispatches (one transaction per wake-up in the steady
        state: the claim also asks when the next dispatch is due) and webhooks
        (looked at when a hint says one was written, when one is due, or once per
        poll interval), so a receiver that takes its whole timeout delays no
        dispatch. If either task dies, the other is cancelled and the error
        stops the service.
        """
        if not self.webhook_secret:
            log.warning(
                "COMPOSER_WEBHOOK_SECRET is not set: webhooks go out without a "
                "Composer-Signature, and receivers cannot tell them from forgeries"
            )
        webhook_hint = asyncio.Event()
        async with (
            cq.Waker(self.redis, self.prefix, cq.ENQUEUER) as waker,
            create_http_session(self.http_policy) as session,
        ):
            tasks = [
                asyncio.create_task(
                    self._dispatch_loop(stop, waker, webhook_hint), name="outbox-dispatches"
                ),
                asyncio.create_task(
                    self._webhook_loop(stop, session, webhook_hint), name="outbox-webhooks"
                ),
            ]
            if self.run_events:
                tasks.append(
                    asyncio.create_task(
                        self._run_event_loop(stop, self.engine), name="outbox-run-events"
                    )
                )
            try:
                done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    task.result()  # a loop that died stops the service, loudly
                await asyncio.gather(*tasks)  # the other one sees ``stop`` too
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

    async def _run_event_loop(self, stop: asyncio.Event, engine: Engine) -> None:
        """Deliver events for other runs that their committer did not (it died between
        commit and delivery, or the target's transaction failed), once they are
        ``grace`` seconds old; looked for once per poll interval. A database that
        is away is waited out, like the other loops do."""
        backoff = cq.Backoff(self.poll_seconds, 30.0)
        while not stop.is_set():
            try:
                self.run_events_delivered += await engine.deliver_due_run_events(
                    grace=self.grace, limit=self.batch_size
                )
            except EngineError as exc:
                delay = backoff.next()
                log.warning(
                    "delivering events between runs failed (%s); again in %.1fs", exc, delay
                )
                await sleep_or_stop(stop, delay)
                continue
            backoff.reset()
            await sleep_or_stop(stop, self.poll_seconds)

    async def _dispatch_loop(
        self, stop: asyncio.Event, waker: cq.Waker, webhook_hint: asyncio.Event
    ) -> None:
        backoff = cq.Backoff(0.1, 5.0)
        while not stop.is_set():
            if cq.WEBHOOK in waker.take_messages():
                webhook_hint.set()
            try:
                published, next_due = await self.publish_dispatches()
                backoff.reset()
            except (cq.QueueUnavailable, Unavailable) as exc:
                delay = backoff.next()
                log.warning("publishing paused: %s; retrying in %.1fs", exc, delay)
                await sleep_or_stop(stop, delay)
                continue
            if published >= self.batch_size:
                continue  # more is waiting
            wait = _until(next_due, self.poll_seconds)
            if wait > 0:
                await waker.wait_or_stop(stop, wait)

    async def _webhook_loop(
        self, stop: asyncio.Event, session: aiohttp.ClientSession, hint: asyncio.Event
    ) -> None:
        backoff = cq.Backoff(0.1, 5.0)
        while not stop.is_set():
            hint.clear()
            try:
                tried, next_due = await self.deliver_webhooks(session)
                backoff.reset()
            except Unavailable as exc:
                delay = backoff.next()
                log.warning("webhook delivery paused: %s; retrying in %.1fs", exc, delay)
                await sleep_or_stop(stop, delay)
                continue
            if tried >= self.webhook_batch_size:
                continue  # more is waiting
            await _wait_for(hint, stop, _until(next_due, self.poll_seconds))

    async def publish_dispatches(self) -> tuple[int, dt.datetime | None]:
        """Publish one batch of due dispatches; returns how many were claimed, and when
        the next is due. A row that cannot be turned into a message is an ALERT and is
        set aside for ``park_seconds``; the rest of the batch goes out."""
        done = await self.engine.outbox.publish_due(
            limit=self.batch_size, grace=self.grace, park_seconds=self.park_seconds
        )
        for aside in done.set_aside:
            m = aside.message
            with log_context(run_id=m.run_id, task_id=m.task_id):
                alert(
                    log,
                    "outbox dispatch %d of run %s (task %s) %s; set aside for %.0fs "
                    "(fix or delete the row; the other dispatches go on)",
                    m.id,
                    m.run_id,
                    m.task_id,
                    aside.error,
                    self.park_seconds,
                )
        self.published += len(done.published)
        now = dt.datetime.now(dt.UTC)
        lag = _lag_histogram()
        for m in done.published:  # how long a due dispatch waited for its publish
            lag.record(max(0.0, (now - max(m.created_at, m.next_attempt_at)).total_seconds()))
        if done.published:
            log.debug("published %d dispatch(es)", len(done.published))
        return done.claimed, done.next_due

    async def deliver_webhooks(
        self, session: aiohttp.ClientSession
    ) -> tuple[int, dt.datetime | None]:
        """Deliver one batch of due webhooks; returns how many were tried, and when the
        next is due.

        The batch is leased and the lease committed before any POST, so no row lock
        is held while receivers answer; the outcomes are recorded in a second, short
        transaction. A crash in between leaves the rows to come back when their lease
        ends (delivered again, with the same ``Composer-Delivery``).
        """
        lease = self.webhook_timeout + self.webhook_lease_margin
        outbox = self.engine.outbox
        messages, next_due = await outbox.lease_webhooks(limit=self.webhook_batch_size, lease=lease)
        if not messages:
            return 0, next_due
        results = await asyncio.gather(*(self._post(session, m) for m in messages))
        now = dt.datetime.now(dt.UTC)
        delivered = [m.id for m, error in zip(messages, results, strict=True) if error is None]
        done = list(delivered)
        retry: list[tuple[int, float, str]] = []
        for m, error in zip(messages, results, strict=True):
            if error is None:
                continue
            delay = self._retry_in(m, error, now)
            if delay is None:
                done.append(m.id)
            else:
                retry.append((m.id, delay, error))
        next_due = await outbox.settle_webhooks(done, retry)
        self.webhooks_delivered += len(delivered)
        return len(messages), next_due

    def _retry_in(self, m: OutboxMessage, error: str, now: dt.datetime) -> float | None:
        """When to try a failed webhook again (seconds), or None: given up (logged)."""
        age = (now - m.created_at).total_seconds()
        if age >= self.webhook_give_up:
            log.error(
                "giving up on the webhook of run %s to %s after %d attempts over %.0fs: %s",
                m.run_id,
                hide_credentials(m.destination),
                m.attempts + 1,
                age,
                error,
            )
            return None
        delay = min(self.webhook_backoff * 2.0**m.attempts, 300.0)
        log.warning(
            "webhook of run %s to %s failed (%s); retrying in %.0fs",
            m.run_id,
            hide_credentials(m.destination),
            error,
            delay,
        )
        return delay

    async def _post(self, session: aiohttp.ClientSession, message: OutboxMessage) -> str | None:
        """POST one webhook; None when delivered, else why not. Never raises (but
        for cancellation): anything unexpected is an ALERT and a failed attempt."""
        try:
            payload = self.sealer.open(message.run_id, message.payload)
        except SealingError as exc:
            with log_context(run_id=message.run_id):
                log.log(
                    ALERT,
                    "the webhook of run %s is parked: its payload is %s; it is tried again "
                    "with backoff until it opens or is given up",
                    message.run_id,
                    exc,
                )
            return f"its payload is {exc}"
        try:
            if message.delivery_id is None:  # V013 gives every webhook row one
                raise ValueError(f"webhook outbox row {message.id} has no delivery id")
            body = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
            timestamp = str(int(time.time()))
            headers = {
                "Content-Type": "application/json",
                DELIVERY_HEADER: message.delivery_id,
                TIMESTAMP_HEADER: timestamp,
            }
            if self.webhook_secret:
                headers[SIGNATURE_HEADER] = sign(
                    self.webhook_secret, message.delivery_id, timestamp, body.encode()
                )
            spec = {"method": "POST", "url": message.destination, "headers": headers, "body": body}
            await run_http(
                spec, timeout=self.webhook_timeout, session=session, policy=self.http_policy
            )
        except ExecutionError as exc:  # its url is shown without credentials; an echo may not be
            return _without_credentials(str(exc), message.destination)
        except Exception as exc:
            # Its text and traceback may quote the url: the credentials come out of both.
            shown = _without_credentials(f"{type(exc).__name__}: {exc}", message.destination)
            trace = _without_credentials(
                "".join(traceback.format_exception(exc)), message.destination
            )
            with log_context(run_id=message.run_id):
                log.log(
                    ALERT,
                    "the webhook of run %s to %s failed unexpectedly (%s); it is retried "
                    "with backoff and the other deliveries go on\n%s",
                    message.run_id,
                    hide_credentials(message.destination),
                    shown,
                    trace.rstrip(),
                )
            return f"unexpected {shown}"
        return None


def _without_credentials(text: str, url: str) -> str:
    """``text`` with the user:password of ``url`` (as written and decoded) hidden: a
    webhook_url's credentials are sent, never logged or stored elsewhere."""
    credentials = credentials_of(url)
    if not credentials:
        return text
    forms = {credentials, *credentials.split(":", 1)}
    forms |= {unquote(form) for form in forms}
    for form in sorted(forms, key=len, reverse=True):  # the whole before its parts
        if len(form) >= 3:  # a one- or two-letter user name would blot out the message
            text = text.replace(form, HIDDEN_CREDENTIALS)
    return text
    for form in sorted({credentials, unquote(credentials), *credentials.split(":", 1)}, key=len)[
        ::-1
    ]:
        if len(form) >= 3:  # a one- or two-letter user name would blot out the message
            text = text.replace(form, HIDDEN_CREDENTIALS)
    return text


async def _wait_for(event: asyncio.Event, stop: asyncio.Event, seconds: float) -> None:
    """Until ``event`` or ``stop`` is set, or ``seconds`` pass, whichever comes first."""
    if seconds <= 0 or event.is_set():
        return
    waiters = [asyncio.ensure_future(event.wait()), asyncio.ensure_future(stop.wait())]
    try:
        await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


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
