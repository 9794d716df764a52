"""Payloads sealed at rest, end to end (composer_engine.sealing): raw rows and
stream entries hold no plaintext, old keys keep opening after a rotation, and a
run whose key is missing is parked, with its attempt unspent, until it is back."""

from __future__ import annotations

import base64
import logging
import os
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest

import composer_repo as repo
from composer_common.logs import ALERT
from composer_core.model import RunStatus, TaskState
from composer_engine import Engine, opened
from composer_engine.sealing import PREFIX, KeyUnavailable, sealer_from
from composer_sdk import Caller, TaskContext, TaskFailed
from composer_timer.loop import Timer
from tests.integration.e2e.conftest import Stack, open_stack
from tests.integration.waits import until

SECRET = "SECRET-4111"  # in every payload of the run; must be in none of its rows
K1 = base64.b64encode(os.urandom(32)).decode()
K2 = base64.b64encode(os.urandom(32)).decode()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def payments(webhook_url: str | None = None) -> dict[str, Any]:
    """charge (fails once, then echoes its input) → a signal → settle."""
    definition: dict[str, Any] = {
        "id": "sealed-payments",
        "nodes": [
            {
                "id": "charge",
                "type": "TASK",
                "queue": "pay",
                "spec": {"card": "{{input.card}}"},
                "retry": {"max_attempts": 2, "initial_seconds": 0.1},
            },
            {"id": "approve", "type": "WAIT_FOR_EVENT", "spec": {"event": "approved"}},
            {
                "id": "settle",
                "type": "TASK",
                "queue": "pay",
                "spec": {"charged": "{{tasks.charge.output.charged}}"},
            },
        ],
        "edges": [{"from": "charge", "to": "approve"}, {"from": "approve", "to": "settle"}],
        "output": {"settled": "{{tasks.settle.output.charged}}"},
    }
    if webhook_url:
        definition["webhook_url"] = webhook_url
    return definition


async def pay(ctx: TaskContext, input: dict[str, Any]) -> dict[str, Any]:
    if ctx.node_id == "charge" and ctx.attempt == 0:
        raise TaskFailed(f"card {input['card']} declined")
    return {"charged": input.get("card") or input.get("charged")}


@pytest.fixture
async def sealed(database_url: str, redis_url: str) -> AsyncIterator[Stack]:
    async with open_stack(database_url, redis_url, sealer=sealer_from(f"k1:{K1}")) as s:
        yield s


async def raw_rows(pool: repo.Pool, run_id: str) -> list[str]:
    """Every row of the run, as PostgreSQL stores it (no codec, no opening)."""
    async with pool.acquire() as conn:
        rows = []
        for table in (
            "workflow_runs",
            "task_instances",
            "workflow_events",
            "outbox",
            "run_history",
        ):
            column = "id" if table == "workflow_runs" else "run_id"
            rows += [
                r[0]
                for r in await conn.fetch(
                    f"SELECT row_to_json(t)::text FROM {table} t WHERE {column} = $1",
                    run_id,
                )
            ]
        return rows


async def stream_entries(stack: Stack) -> list[str]:
    entries = []
    for stream in await stack.redis.streams(stack.prefix):
        entries += [repr(e) for e in await stack.redis.entries(stream)]
    return entries


async def test_rows_and_stream_entries_hold_no_plaintext_payload(sealed: Stack) -> None:
    # a webhook nobody receives: its outbox row stays, to be read raw
    await sealed.deploy(payments(webhook_url=f"http://127.0.0.1:{closed_port()}/hook"))
    callers: list[Caller | None] = []

    async def pay_and_look(ctx: TaskContext, input: dict[str, Any]) -> dict[str, Any]:
        callers.append(ctx.caller)
        return await pay(ctx, input)

    sealed.worker({"pay": pay_and_look})
    caller = Caller("ci", "operator", {"email": SECRET})  # the calling context is sealed too
    started = await sealed.engine.start("sealed-payments", input={"card": SECRET}, caller=caller)

    async def waiting() -> bool:
        tasks = await sealed.tasks_of(started.run_id)
        return "approve" in tasks and tasks["approve"].state is TaskState.WAITING

    await until(waiting, what="the approve node to wait")
    signalled = await sealed.engine.signal(
        started.run_id, "approved", {"by": SECRET}, sent_by="ops"
    )
    assert signalled is True
    run = await sealed.wait_run(started.run_id)
    assert run.status is RunStatus.SUCCEEDED

    async def webhook_tried() -> bool:
        rows = await raw_rows(sealed.pool, started.run_id)
        return any('"kind":"webhook"' in r and '"attempts":0' not in r for r in rows)

    await until(webhook_tried, what="the webhook to be tried")
    rows = await raw_rows(sealed.pool, started.run_id)
    assert len(rows) >= 6  # the run, three tasks, the signal taken at once, the webhook
    leaks = [r for r in rows + await stream_entries(sealed) if SECRET in r]
    assert leaks == []
    assert any(PREFIX + "k1:" in r for r in rows)

    # ...and the API shows every value opened
    record = opened.run_record(sealed.engine.sealer, run)
    assert record.input == {"card": SECRET}
    assert record.output == {"settled": SECRET}
    tasks = {
        n: opened.task_record(sealed.engine.sealer, started.run_id, t)
        for n, t in (await sealed.tasks_of(started.run_id)).items()
    }
    assert tasks["charge"].attempt == 1
    assert tasks["charge"].output == {"charged": SECRET}
    assert tasks["approve"].output == {"by": SECRET}
    assert tasks["settle"].input == {"charged": SECRET}
    assert record.context == caller.document()
    assert callers == [caller] * 3  # opened in each lease: charge twice, settle once
    async with repo.transaction(sealed.pool) as conn:
        [signal] = await repo.run_signals(conn, started.run_id)  # taken as it arrived
    assert (signal.sent_by, signal.consumed_by) == ("ops", "approve")
    shown = opened.buffered_signal(sealed.engine.sealer, started.run_id, signal)
    assert shown.payload == {"by": SECRET}
    # the history's details (the start's input, the declined attempt's error) open too
    async with repo.transaction(sealed.pool) as conn:
        history = await repo.run_history(conn, started.run_id)
    details = {
        h.kind: opened.shown(sealed.engine.sealer, started.run_id, h.detail) for h in history
    }
    assert details["run.started"]["input"] == {"card": SECRET}
    assert details["task.retry_scheduled"]["error"] == f"card {SECRET} declined"


async def test_after_a_rotation_old_runs_open_and_new_runs_use_the_new_key(
    database_url: str, redis_url: str
) -> None:
    async with open_stack(database_url, redis_url, sealer=sealer_from(f"k1:{K1}")) as old:
        await old.deploy(payments())
        old.worker({"pay": pay})
        started = await old.engine.start("sealed-payments", input={"card": SECRET})
        old_run = started.run_id

        async def waiting() -> bool:
            tasks = await old.tasks_of(old_run)
            return "approve" in tasks and tasks["approve"].state is TaskState.WAITING

        await until(waiting, what="the approve node to wait")
    # the next deploy: k2 first, k1 still listed; the run goes on where it was
    rotated = sealer_from(f"k2:{K2},k1:{K1}")
    async with open_stack(database_url, redis_url, sealer=rotated) as new:
        new.worker({"pay": pay})
        await new.engine.signal(old_run, "approved", {"by": "rotation"})
        run = await new.wait_run(old_run)
        assert run.status is RunStatus.SUCCEEDED
        assert opened.run_record(rotated, run).output == {"settled": SECRET}

        fresh = await new.engine.start("sealed-payments", input={"card": SECRET})
        async with new.pool.acquire() as conn:
            keys = {
                r["id"]: r["data_key"]
                for r in await conn.fetch(
                    "SELECT id, data_key FROM workflow_runs WHERE id = ANY($1)",
                    [old_run, fresh.run_id],
                )
            }
        assert keys[old_run].startswith("k1:")  # a run keeps its data key for life
        assert keys[fresh.run_id].startswith("k2:")
        with pytest.raises(KeyUnavailable):
            sealer_from(f"k2:{K2}").open(old_run, run.input)
        await new.engine.cancel(fresh.run_id)  # leave no active run to the next test


async def test_a_run_whose_key_is_missing_is_parked_then_goes_on(
    database_url: str, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The coordinator here has only k2; the run was started by an API with k1.
    async with open_stack(
        database_url,
        redis_url,
        sealer=sealer_from(f"k2:{K2}"),
        sweeper={"lost_after": 0.5},
        park_seconds=1.0,
    ) as s:
        await s.deploy(payments())
        api = Engine(s.pool, redis=s.redis, redis_prefix=s.prefix, sealer=sealer_from(f"k1:{K1}"))
        started = await api.start("sealed-payments", input={"card": SECRET})
        await api.aclose()
        calls: list[int] = []

        async def counting(ctx: TaskContext, input: dict[str, Any]) -> dict[str, Any]:
            if ctx.run_id == started.run_id:  # the database is the module's: only this run
                calls.append(ctx.attempt)
            return {"charged": input["card"]}

        with caplog.at_level(logging.WARNING, logger="composer.engine"):
            s.worker({"pay": counting})

            async def parked() -> bool:
                charge = (await s.tasks_of(started.run_id))["charge"]
                return charge.error_code == "PARKED"

            await until(parked, what="the charge to be parked")
        charge = (await s.tasks_of(started.run_id))["charge"]
        assert charge.state is TaskState.QUEUED and charge.attempt == 0
        assert charge.error is not None and "'k1'" in charge.error
        alerts = [r for r in caplog.records if r.levelno == ALERT and "parked" in r.getMessage()]
        assert alerts and "'k1'" in alerts[0].getMessage()
        assert SECRET not in caplog.text
        assert calls == []  # no handler ever saw it

        # the key is back (the coordinator restarted with it): the run goes on by itself
        s.engine.sealer = sealer_from(f"k2:{K2},k1:{K1}")

        async def charged() -> bool:
            return (await s.tasks_of(started.run_id))["charge"].state is TaskState.COMPLETED

        await until(charged, timeout=20, what="the charge to complete")
        charge = (await s.tasks_of(started.run_id))["charge"]
        assert calls == [0] and charge.attempt == 0  # no attempt was spent on the parking
        assert charge.error is None and charge.error_code is None


async def test_the_timer_parks_a_wait_whose_run_it_cannot_open_and_fires_the_others(
    database_url: str, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    nap = {"nodes": [{"id": "nap", "type": "WAIT", "spec": {"duration_seconds": 0.2}}]}
    async with open_stack(database_url, redis_url, sealer=sealer_from(f"k1:{K1}")) as s:
        await s.deploy({"id": "sealed-nap", **nap})
        locked_out = (await s.engine.start("sealed-nap")).run_id
        # a timer whose keys are k2 only: it cannot open k1's run, but can open its own
        timer_engine = Engine(
            s.pool, redis=s.redis, redis_prefix=s.prefix, sealer=sealer_from(f"k2:{K2}")
        )
        fine = (await timer_engine.start("sealed-nap")).run_id

        async def both_due() -> bool:
            async with repo.connection(s.pool) as conn:
                return len(await repo.due_waits(conn)) == 2

        await until(both_due, what="both waits due")
        timer = Timer(timer_engine, s.redis, prefix=s.prefix)
        with caplog.at_level(logging.WARNING):
            first = await timer.fire_due()
        assert (first.due, first.fired) == (2, 1)
        assert (await s.wait_run(fine, timeout=5)).status is RunStatus.SUCCEEDED
        assert timer.parked == 1
        alerts = [r.getMessage() for r in caplog.records if r.levelno == ALERT]
        assert any(locked_out in m and "'k1'" in m for m in alerts), alerts
        second = await timer.fire_due()  # parked: not due again at once
        assert second.due == 0
        assert (await s.tasks_of(locked_out))["nap"].state is TaskState.WAITING
        await timer_engine.aclose()
