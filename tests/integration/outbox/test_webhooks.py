"""The outbox-enqueuer's webhooks and its item-by-item resilience.

Real PostgreSQL for the outbox, real aiohttp receivers on loopback, the queue
fake for Redis (it passes the same contract test as Redis). Each test starts
from an empty outbox: the database is shared by the module.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

import composer_queue as cq
import composer_repo as repo
from composer_common.logs import ALERT
from composer_engine import Engine
from composer_executors import HttpPolicy, create_http_session, run_http
from composer_outbox_enqueuer import loop as enqueuer_loop
from composer_outbox_enqueuer.loop import Enqueuer
from composer_queue.testing import FakeQueue
from tests.integration.waits import until

OPEN = HttpPolicy(allow_private=True)
SECRET = "test-webhook-secret"


@dataclass
class Receiver:
    """A webhook receiver that records what it got and answers as it is told."""

    server: TestServer | None = None
    received: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    answers: list[int] = field(default_factory=list)  # statuses to answer, then 200
    release: asyncio.Event = field(default_factory=asyncio.Event)
    hang: bool = False
    entered: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: web.Request) -> web.Response:
        self.received.append((dict(request.headers), await request.read()))
        self.entered.set()
        if self.hang:
            await self.release.wait()
        status = self.answers.pop(0) if self.answers else 200
        return web.Response(status=status, text="ok" if status == 200 else "not now")

    async def mailto(self, _: web.Request) -> web.Response:
        return web.Response(status=302, headers={"Location": "mailto:x"})

    def url(self, path: str = "/hook") -> str:
        assert self.server is not None
        return str(self.server.make_url(path))


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = Receiver()
    app = web.Application()
    app.router.add_post("/hook", r.handle)
    app.router.add_post("/mailto", r.mailto)
    r.server = TestServer(app, host="127.0.0.1", port=0)
    await r.server.start_server()
    yield r
    r.release.set()
    await r.server.close()


@pytest.fixture
async def empty_outbox(pool: repo.Pool) -> None:
    await pool.execute("DELETE FROM outbox")


@pytest.fixture
def queue() -> FakeQueue:
    return FakeQueue()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with create_http_session(OPEN) as s:
        yield s


def enqueuer(pool: repo.Pool, queue: FakeQueue, **options: Any) -> Enqueuer:
    defaults: dict[str, Any] = {
        "prefix": f"wh-{uuid.uuid4().hex[:8]}",
        "grace": 0,
        "poll_seconds": 0.1,
        "webhook_backoff": 0,
        "http_policy": OPEN,
    }
    options = defaults | options
    engine = Engine(pool, redis=queue, redis_prefix=options["prefix"])
    return Enqueuer(engine, queue, **options)


async def add_webhook(pool: repo.Pool, run_id: str, url: str, payload: Any = None) -> int:
    async with repo.transaction(pool) as conn:
        return await repo.enqueue_webhook(
            conn, run_id=run_id, url=url, payload=payload or {"run_id": run_id, "status": "DONE"}
        )


async def add_dispatch(pool: repo.Pool, run_id: str, task_id: str, payload: Any) -> int:
    async with repo.transaction(pool) as conn:
        return await repo.enqueue_dispatch(
            conn, run_id=run_id, task_id=task_id, queue="q", payload=payload
        )


async def row(pool: repo.Pool, outbox_id: int) -> Any:
    return await pool.fetchrow(
        "SELECT attempts, last_error, next_attempt_at > now() AS later FROM outbox WHERE id = $1",
        outbox_id,
    )


def alerts(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == ALERT]


async def running(
    e: Enqueuer, stop: asyncio.Event, check: Callable[[], Awaitable[object]], what: str
) -> None:
    """Run the loop until ``check`` holds; the loop must still be running then."""
    task = asyncio.create_task(e.run(stop), name="enqueuer")

    async def holds() -> object:
        if task.done():
            task.result()  # the loop died: show why
            raise AssertionError("the enqueuer's loop stopped")
        return await check()

    try:
        await until(holds, what=what)
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


# --- one bad item never stops the loop -------------------------------------------------------


@pytest.mark.usefixtures("empty_outbox")
async def test_a_poisoned_dispatch_row_is_set_aside_and_the_next_is_published(
    pool: repo.Pool, queue: FakeQueue, caplog: pytest.LogCaptureFixture
) -> None:
    bad = await add_dispatch(pool, "run-poisoned", "t-bad", {"no": "task id"})
    await add_dispatch(
        pool, "run-good", "t-good", {"task_id": "t-good", "run_id": "run-good", "attempt": 0}
    )
    e = enqueuer(pool, queue)

    claimed, _ = await e.publish_dispatches()

    assert claimed == 2 and e.published == 1
    stream = cq.task_stream(e.prefix, "q", "t-good", cq.DEFAULT_SHARDS)
    [entry] = await queue.entries(stream)
    assert entry.message().task_id == "t-good"
    parked = await row(pool, bad)
    assert parked["later"] and "malformed task message" in parked["last_error"]
    assert any("run-poisoned" in message for message in alerts(caplog))
    # set aside: the next pass does not trip over it again
    assert (await e.publish_dispatches())[0] == 0


@pytest.mark.usefixtures("empty_outbox")
async def test_a_receiver_redirecting_to_mailto_does_not_stop_the_loop(
    pool: repo.Pool, queue: FakeQueue, receiver: Receiver
) -> None:
    bad = await add_webhook(pool, "run-mailto", receiver.url("/mailto"))
    good = await add_webhook(pool, "run-fine", receiver.url())
    e = enqueuer(pool, queue)

    async def handled() -> bool:
        failed = await row(pool, bad)
        return failed is not None and failed["attempts"] >= 1 and await row(pool, good) is None

    await running(e, asyncio.Event(), handled, "the good webhook delivered, the bad one postponed")
    assert len(receiver.received) == 1
    failed = await row(pool, bad)
    assert "mailto:x" in failed["last_error"]


@pytest.mark.usefixtures("empty_outbox")
async def test_an_unexpected_error_for_one_webhook_is_an_alert_and_the_next_is_delivered(
    pool: repo.Pool,
    queue: FakeQueue,
    receiver: Receiver,
    session: aiohttp.ClientSession,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def faulty(spec: Any, **kwargs: Any) -> dict[str, Any]:
        if "broken" in spec["url"]:
            raise RuntimeError("a bug in the delivery")
        return await run_http(spec, **kwargs)

    monkeypatch.setattr(enqueuer_loop, "run_http", faulty)
    bad = await add_webhook(pool, "run-broken", receiver.url() + "?broken=1")
    good = await add_webhook(pool, "run-fine", receiver.url())

    tried, _ = await enqueuer(pool, queue).deliver_webhooks(session)

    assert tried == 2
    assert await row(pool, good) is None
    assert len(receiver.received) == 1
    postponed = await row(pool, bad)
    assert postponed["attempts"] == 1 and "RuntimeError" in postponed["last_error"]
    assert any("run-broken" in message for message in alerts(caplog))


@pytest.mark.usefixtures("empty_outbox")
async def test_a_webhook_url_s_credentials_are_sent_and_never_logged(
    pool: repo.Pool,
    queue: FakeQueue,
    receiver: Receiver,
    session: aiohttp.ClientSession,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The finding: the logs quoted webhook_url with its user:password@."""
    password = "hunter2-pw-0417"
    url = receiver.url().replace("http://", f"http://hook-user:{password}@")
    receiver.answers = [503]
    hook = await add_webhook(pool, "run-basic", url)
    e = enqueuer(pool, queue)
    with caplog.at_level(logging.INFO, logger="composer.outbox"):
        await e.deliver_webhooks(session)  # 503: postponed, with a warning
        await e.deliver_webhooks(session)
    assert await row(pool, hook) is None
    basic = base64.b64encode(f"hook-user:{password}".encode()).decode()
    assert [h["Authorization"] for h, _ in receiver.received] == [f"Basic {basic}"] * 2

    async def bug(spec: Any, **kwargs: Any) -> dict[str, Any]:
        raise RuntimeError(f"could not post to {spec['url']}")  # a message quoting the url

    monkeypatch.setattr(enqueuer_loop, "run_http", bug)
    broken = await add_webhook(pool, "run-basic-bug", url)
    with caplog.at_level(logging.INFO, logger="composer.outbox"):
        await e.deliver_webhooks(session)
    stored_error = (await row(pool, broken))["last_error"]

    logged = [r.getMessage() for r in caplog.records]
    assert any("***@127.0.0.1" in line for line in logged), logged
    assert any("could not post to http://***@127.0.0.1" in line for line in logged), logged
    assert "could not post to http://***@127.0.0.1" in stored_error
    for text in [*logged, stored_error]:
        assert password not in text and "hook-user" not in text, text


# --- webhooks go out after the claim commits ---------------------------------------------------


@pytest.mark.usefixtures("empty_outbox")
async def test_a_slow_receiver_holds_no_lock_and_does_not_hold_up_dispatches(
    pool: repo.Pool, queue: FakeQueue, receiver: Receiver
) -> None:
    receiver.hang = True
    hook = await add_webhook(pool, "run-slow", receiver.url())
    e = enqueuer(pool, queue, webhook_timeout=60)
    stop = asyncio.Event()
    task = asyncio.create_task(e.run(stop), name="enqueuer")
    try:
        await asyncio.wait_for(receiver.entered.wait(), 10)

        # the POST is out: its row is neither locked nor claimable by another replica
        async with repo.transaction(pool) as conn:
            locked = await conn.fetchval(
                "SELECT id FROM outbox WHERE id = $1 FOR UPDATE NOWAIT", hook
            )
            assert locked == hook
            assert await repo.claim_outbox(conn, "webhook") == []

        # dispatches keep flowing while the receiver hangs
        await add_dispatch(
            pool, "run-busy", "t-1", {"task_id": "t-1", "run_id": "run-busy", "attempt": 0}
        )

        async def published() -> bool:
            return e.published >= 1

        await until(published, what="a dispatch published while a webhook POST hangs")
        assert not receiver.release.is_set() and not task.done()

        receiver.release.set()

        async def delivered() -> bool:
            return await row(pool, hook) is None

        await until(delivered, what="the slow webhook delivered once released")
    finally:
        stop.set()
        receiver.release.set()
        await asyncio.wait_for(task, 10)
    assert len(receiver.received) == 1


README = Path(__file__).resolve().parents[3] / "README.md"


def readme_verify() -> Callable[[str, dict[str, str], bytes], bool]:
    """The receiver's recipe, run as the README prints it ("Verifying webhooks")."""
    text = README.read_text()
    start = text.index("```python\nimport hashlib, hmac, time\n")
    code = text[start:].split("\n", 1)[1].split("```", 1)[0]
    namespace: dict[str, Any] = {}
    exec(compile(code, str(README), "exec"), namespace)
    verify: Callable[[str, dict[str, str], bytes], bool] = namespace["verify"]
    return verify


verify = readme_verify()


@pytest.mark.usefixtures("empty_outbox")
async def test_each_delivery_is_signed_and_retries_carry_the_same_delivery_id(
    pool: repo.Pool, queue: FakeQueue, receiver: Receiver, session: aiohttp.ClientSession
) -> None:
    receiver.answers = [503]
    payload = {"run_id": "run-signed", "status": "SUCCEEDED", "output": {"é": [1, 2.5, None]}}
    hook = await add_webhook(pool, "run-signed", receiver.url(), payload)
    e = enqueuer(pool, queue, webhook_secret=SECRET)

    await e.deliver_webhooks(session)  # 503: postponed, due again at once (no backoff)
    assert (await row(pool, hook))["attempts"] == 1
    await e.deliver_webhooks(session)
    assert await row(pool, hook) is None

    [(first, first_body), (second, _)] = receiver.received
    assert first["Composer-Delivery"] == second["Composer-Delivery"]  # the receiver dedupes
    assert str(uuid.UUID(first["Composer-Delivery"])) == first["Composer-Delivery"]
    for headers, body in receiver.received:
        assert verify(SECRET, headers, body)
        assert not verify("another secret", headers, body)
        assert json.loads(body) == payload
        assert headers["Content-Type"] == "application/json"
    tampered = first_body.replace(b"SUCCEEDED", b"FAILED")
    assert not verify(SECRET, first, tampered)
    # issue 25: a replay under another delivery id (to get past the receiver's dedupe)
    # no longer verifies: the id is part of the signed text
    replayed = first | {"Composer-Delivery": str(uuid.uuid4())}
    assert not verify(SECRET, replayed, first_body)


@pytest.mark.usefixtures("empty_outbox")
async def test_delivery_ids_are_random_and_say_nothing_of_the_outbox(
    pool: repo.Pool, queue: FakeQueue, receiver: Receiver, session: aiohttp.ClientSession
) -> None:
    """Issue 25: Composer-Delivery was the outbox row's id, a sequential number (how many
    webhooks went out, and the next ones). It is a random UUID kept with the row."""
    hooks = [await add_webhook(pool, f"run-id-{i}", receiver.url()) for i in range(3)]
    stored = {
        r["id"]: str(r["delivery_id"])
        for r in await pool.fetch("SELECT id, delivery_id FROM outbox WHERE kind = 'webhook'")
    }
    await enqueuer(pool, queue, webhook_secret=SECRET).deliver_webhooks(session)
    sent = [headers["Composer-Delivery"] for headers, _ in receiver.received]
    assert sorted(sent) == sorted(stored[h] for h in hooks)
    for delivery in sent:
        assert uuid.UUID(delivery).version == 4
        assert not delivery.isdigit() and delivery not in {str(h) for h in hooks}
    assert len(set(sent)) == 3


@pytest.mark.usefixtures("empty_outbox")
async def test_without_a_secret_deliveries_are_unsigned_and_the_loop_warns_once(
    pool: repo.Pool,
    queue: FakeQueue,
    receiver: Receiver,
    caplog: pytest.LogCaptureFixture,
) -> None:
    hook = await add_webhook(pool, "run-unsigned", receiver.url())
    e = enqueuer(pool, queue)
    with caplog.at_level(logging.WARNING, logger="composer.outbox"):

        async def delivered() -> bool:
            return await row(pool, hook) is None

        await running(e, asyncio.Event(), delivered, "the unsigned webhook delivered")
    [(headers, _)] = receiver.received
    assert uuid.UUID(headers["Composer-Delivery"]).version == 4
    assert abs(int(headers["Composer-Timestamp"]) - time.time()) < 60
    assert "Composer-Signature" not in headers
    warnings = [r for r in caplog.records if "COMPOSER_WEBHOOK_SECRET" in r.getMessage()]
    assert len(warnings) == 1


@pytest.mark.usefixtures("empty_outbox")
async def test_a_leased_webhook_is_nobody_elses_until_its_lease_ends(pool: repo.Pool) -> None:
    hook = await add_webhook(pool, "run-leased", "https://example.com/hook")
    async with repo.transaction(pool) as conn:
        [taken] = await repo.lease_outbox(conn, "webhook", lease=60)
    assert taken.id == hook
    async with repo.transaction(pool) as conn:
        assert await repo.lease_outbox(conn, "webhook", lease=60) == []
        assert await repo.claim_outbox(conn, "webhook") == []

    # the deliverer died: when the lease ends (by the database's clock), the row is due again
    await pool.execute("UPDATE outbox SET next_attempt_at = now() WHERE id = $1", hook)
    async with repo.transaction(pool) as conn:
        [again] = await repo.lease_outbox(conn, "webhook", lease=60)
    assert (again.id, again.attempts) == (hook, 0)
