"""Rate limits (docs/architecture.md §4.12): a worker node's ``rate_limit: {key, limit,
per_seconds, units}`` is a token bucket shared by name; an attempt without its tokens
waits PENDING, in order, never dropped, and goes as tokens come back — released by a
timer the holding engine sets for the next token, or by the sweeper's pass. An attempt
waiting for tokens holds no concurrency place."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator

import pytest

import composer_repo as repo
from composer_engine import BadRequest, Engine, Workflows, _held, _writes, validate_definition
from tests.integration.waits import until

RATED = {
    "id": "rated",
    "nodes": [
        {
            "id": "call",
            "type": "TASK",
            "queue": "partner-api",
            "spec": {},
            "rate_limit": {"key": "partner-api", "limit": 5, "per_seconds": 2},
        }
    ],
}
BOTH = {
    "id": "rated-and-limited",
    "nodes": [
        {
            "id": "call",
            "type": "TASK",
            "queue": "partner-api",
            "spec": {},
            "rate_limit": {"key": "partner-both", "limit": 1, "per_seconds": 3600},
            "concurrency": {"key": "calls", "max": 1},
        }
    ],
}
PER_PARTNER = {
    "id": "rated-per-partner",
    "nodes": [
        {
            "id": "call",
            "type": "TASK",
            "queue": "partner-api",
            "spec": {},
            "rate_limit": {"key": "per-{{input.partner}}", "limit": 2, "per_seconds": 3600},
        }
    ],
}


@pytest.fixture
async def engine(pool: repo.Pool) -> AsyncIterator[Engine]:
    workflows = Workflows(pool)
    for spec in (RATED, BOTH, PER_PARTNER):
        await workflows.create(validate_definition(spec), deploy=True)
    async with repo.connection(pool) as conn:  # each test starts with full buckets
        tables = ("task_instances", "workflow_runs", "outbox", "run_slots", "runs_waiting")
        for table in (*tables, "rate_buckets"):  # task rows first: nothing cascades (V028)
            await conn.execute(f"DELETE FROM {table}")
    e = Engine(pool)
    try:
        yield e
    finally:
        await e.aclose()


async def dispatched(pool: repo.Pool) -> list[tuple[str, dt.datetime]]:
    """(run, when it went) of each attempt sent: at once, or by a release."""
    async with repo.connection(pool) as conn:
        rows = await conn.fetch(
            "SELECT t.run_id, coalesce(min(h.at), t.created_at) AS went "
            "  FROM task_instances t LEFT JOIN run_history h "
            "    ON h.run_id = t.run_id AND h.kind = 'task.released' "
            " WHERE t.held_reason IS NULL AND t.state = 'PENDING' "
            " GROUP BY t.run_id, t.created_at ORDER BY went"
        )
    return [(r[0], r[1]) for r in rows]


async def test_a_burst_then_tokens_as_they_come_back_in_order(
    engine: Engine, pool: repo.Pool
) -> None:
    runs = [(await engine.start("rated")).run_id for _ in range(10)]
    first = await dispatched(pool)
    assert [r for r, _ in first] == runs[:5]  # the burst: the bucket's 5 tokens
    async with repo.connection(pool) as conn:
        reasons = {
            r[0]: r[1]
            for r in await conn.fetch(
                "SELECT run_id, held_reason FROM task_instances WHERE held_reason IS NOT NULL"
            )
        }
    assert set(reasons) == set(runs[5:])
    assert all(
        "rate limit 'partner-api' (5 per 2 s) has no token left" in r for r in reasons.values()
    )

    async def all_went() -> bool:
        return len(await dispatched(pool)) == 10

    await until(all_went, timeout=15, what="the held attempts sent as tokens came back")
    went = await dispatched(pool)
    assert [r for r, _ in went] == runs  # in order, none dropped
    # 5 more tokens take 2 s at 2.5 a second: never faster than the bucket allows
    t0 = went[0][1]
    for i, (_, at) in enumerate(went[5:], start=1):
        assert (at - t0).total_seconds() >= i * 0.4 - 0.05, (i, at - t0)


async def test_waiting_for_tokens_holds_no_concurrency_place(
    engine: Engine, pool: repo.Pool
) -> None:
    runs = [(await engine.start("rated-and-limited")).run_id for _ in range(2)]
    # the first took the only token and the only place; the second waits for both
    assert [r for r, _ in await dispatched(pool)] == runs[:1]
    async with repo.connection(pool) as conn:
        (task,) = await repo.get_run_tasks(conn, runs[0])
    assert await engine.report_completed(runs[0], task.task_id, task.node_id, task.attempt, {})
    # its place is free, but no token for an hour: it waits for the token, and the key
    # shows no attempt in flight
    limits = {(v.kind, v.key): v for v in await engine.reads.run_limits(full_access=True)}
    assert limits[("rate_limit", "partner-both")].waiting == 1
    assert limits[("rate_limit", "partner-both")].tokens == pytest.approx(0, abs=0.01)
    assert ("node_concurrency", "calls") not in limits or limits[
        ("node_concurrency", "calls")
    ].in_use == 0
    assert await engine.release_held() == 0

    # an operator raises the limit at run time: it goes
    await engine.set_rate_limit("partner-both", limit=10, per_seconds=1, set_by="ops")

    async def second_went() -> bool:
        return [r for r, _ in await dispatched(pool)] == runs[1:]

    await until(second_went, what="the waiting attempt sent once the limit was raised")
    limits = {(v.kind, v.key): v for v in await engine.reads.run_limits(full_access=True)}
    assert limits[("rate_limit", "partner-both")].set_by == "ops"
    assert limits[("rate_limit", "partner-both")].limit == 10


async def test_a_bad_limit_is_refused(engine: Engine) -> None:
    with pytest.raises(BadRequest, match="limit must be a whole number of at least 1"):
        await engine.set_rate_limit("partner-api", limit=0, per_seconds=1, set_by="ops")


async def test_a_templated_key_gives_each_rendered_key_its_own_bucket(
    engine: Engine, pool: repo.Pool
) -> None:
    partners = ["a", "b", "a", "a", "b", "b", "c"]
    runs = [
        (await engine.start("rated-per-partner", input={"partner": p})).run_id for p in partners
    ]
    # 2 tokens an hour per partner: a and b each send their first two, c its one
    went = [r for r, _ in await dispatched(pool)]
    assert went == [runs[i] for i in (0, 1, 2, 4, 6)]
    async with repo.connection(pool) as conn:
        rows = await conn.fetch(
            "SELECT run_id, rate_key, held_reason FROM task_instances ORDER BY created_at, id"
        )
    assert [r["rate_key"] for r in rows] == [f"rate:per-{p}" for p in partners]
    reasons = {r["run_id"]: r["held_reason"] for r in rows if r["held_reason"] is not None}
    assert set(reasons) == {runs[3], runs[5]}
    assert "rate limit 'per-a' (2 per 3600 s) has no token left" in reasons[runs[3]]
    assert "rate limit 'per-b' (2 per 3600 s)" in reasons[runs[5]]
    limits = {(v.kind, v.key): v for v in await engine.reads.run_limits(full_access=True)}
    assert {k for kind, k in limits if kind == "rate_limit" and k and k.startswith("per-")} == {
        "per-a",
        "per-b",
        "per-c",
    }
    assert (limits[("rate_limit", "per-a")].limit, limits[("rate_limit", "per-a")].waiting) == (
        2,
        1,
    )
    # PUT on a rendered key sets that key's bucket only: b's waiting attempt goes, a's
    # stays behind its own bucket
    await engine.set_rate_limit("per-b", limit=10, per_seconds=1, set_by="ops")

    async def b_went() -> bool:
        return runs[5] in [r for r, _ in await dispatched(pool)]

    await until(b_went, what="partner b's attempt sent once its key was raised")
    assert runs[3] not in [r for r, _ in await dispatched(pool)]
    assert await engine.release_held() == 0


async def test_held_and_released_attempts_are_counted_by_kind_and_key(
    engine: Engine, pool: repo.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted: dict[tuple[str, str, str], int] = {}

    class Counter:
        def __init__(self, name: str) -> None:
            self.name = name

        def add(self, n: int, attributes: dict[str, str]) -> None:
            key = (self.name, attributes["kind"], attributes["key"])
            counted[key] = counted.get(key, 0) + n

    class Instruments:
        attempts_held = Counter("held")
        attempts_released = Counter("released")

    monkeypatch.setattr(_writes, "instruments", Instruments)
    monkeypatch.setattr(_held, "instruments", Instruments)
    runs = [(await engine.start("rated")).run_id for _ in range(8)]
    assert counted == {("held", "rate_limit", "partner-api"): 3}

    async def all_went() -> bool:
        return len(await dispatched(pool)) == len(runs)

    await until(all_went, timeout=15, what="the held attempts sent as tokens came back")

    async def released() -> bool:
        return counted.get(("released", "rate_limit", "partner-api")) == 3

    await until(released, what="the releases counted after their commits")
