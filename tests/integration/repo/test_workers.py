"""Workers' heartbeats: recorded, listed, stopped for good, pruned; and the queues of a
run's waiting tasks that no live worker serves."""

from __future__ import annotations

import datetime as dt
import uuid

import composer_repo as repo

from .helpers import new_run, new_worker_task

STARTED = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)


def beat(
    worker_id: str,
    *queues: str,
    state: repo.WorkerState = "SERVING",
    in_flight: int = 0,
    started: dt.datetime = STARTED,
) -> repo.WorkerBeat:
    return repo.WorkerBeat(
        worker_id, "host-1", tuple(queues), 8, in_flight, "0.1.0", state, started
    )


def name() -> str:
    return f"w-{uuid.uuid4().hex[:8]}"


async def workers_by_id(conn: repo.Connection) -> dict[str, repo.WorkerRecord]:
    return {w.worker_id: w for w in await repo.list_workers(conn)}


async def test_a_beat_creates_then_updates_the_workers_row(conn: repo.Connection) -> None:
    w = name()
    assert await repo.record_worker_heartbeat(conn, beat(w, "payments", "mail"))
    first = (await workers_by_id(conn))[w]
    assert await repo.record_worker_heartbeat(conn, beat(w, "payments", "mail", in_flight=3))

    now = (await workers_by_id(conn))[w]
    assert (now.queues, now.concurrency, now.in_flight, now.state) == (
        ("payments", "mail"),
        8,
        3,
        "SERVING",
    )
    assert now.host == "host-1" and now.started_at == STARTED and now.stopped_at is None
    assert now.last_seen_at >= first.last_seen_at
    assert now.now >= now.last_seen_at


async def test_a_stopped_worker_stays_stopped(conn: repo.Connection) -> None:
    w = name()
    await repo.record_worker_heartbeat(conn, beat(w, "payments"))
    assert await repo.record_worker_heartbeat(conn, beat(w, "payments", state="STOPPED"))
    # a beat sent before the stop, arriving after it, changes nothing
    assert not await repo.record_worker_heartbeat(conn, beat(w, "payments", in_flight=2))

    stopped = (await workers_by_id(conn))[w]
    assert stopped.state == "STOPPED" and stopped.stopped_at is not None
    assert stopped.in_flight == 0


async def test_a_new_process_under_a_stopped_workers_name_takes_its_row_over(
    conn: repo.Connection,
) -> None:
    w = name()
    await repo.record_worker_heartbeat(conn, beat(w, "payments", state="STOPPED"))
    restarted = STARTED + dt.timedelta(minutes=1)

    assert await repo.record_worker_heartbeat(conn, beat(w, "payments", started=restarted))

    row = (await workers_by_id(conn))[w]
    assert (row.state, row.stopped_at, row.started_at) == ("SERVING", None, restarted)


async def test_prune_drops_only_workers_unseen_that_long(conn: repo.Connection) -> None:
    old, recent = name(), name()
    await repo.record_worker_heartbeat(conn, beat(old, "q"))
    await repo.record_worker_heartbeat(conn, beat(recent, "q"))
    await conn.execute(
        "UPDATE workers SET last_seen_at = now() - interval '2 days' WHERE id = $1", old
    )

    assert await repo.prune_workers(conn, unseen_seconds=86400) == 1

    left = await workers_by_id(conn)
    assert old not in left and recent in left


async def test_unserved_queues_names_waiting_queues_without_a_live_worker(
    conn: repo.Connection,
) -> None:
    run_id = await new_run(conn)
    served, lost, gone, never = (f"{q}-{uuid.uuid4().hex[:6]}" for q in "slgn")
    for node, queue in (("a", served), ("b", lost), ("c", gone), ("d", never)):
        await new_worker_task(conn, run_id, node, queue=queue)
    await repo.record_worker_heartbeat(conn, beat(name(), served))
    lost_worker, gone_worker = name(), name()
    await repo.record_worker_heartbeat(conn, beat(lost_worker, lost))
    await conn.execute(
        "UPDATE workers SET last_seen_at = now() - interval '5 minutes' WHERE id = $1",
        lost_worker,
    )
    await repo.record_worker_heartbeat(conn, beat(gone_worker, gone))
    await repo.record_worker_heartbeat(conn, beat(gone_worker, gone, state="STOPPED"))

    unserved = {u.queue: u for u in await repo.unserved_queues(conn, run_id, live_seconds=30)}

    assert sorted(unserved) == sorted([lost, gone, never])
    assert unserved[never].last_seen_at is None
    lost_for = unserved[lost].now - unserved[lost].last_seen_at  # type: ignore[operator]
    assert dt.timedelta(minutes=5) <= lost_for < dt.timedelta(minutes=6)
    assert unserved[gone].last_seen_at is not None


async def test_unserved_queues_ignores_tasks_no_longer_waiting(conn: repo.Connection) -> None:
    run_id = await new_run(conn)
    ref = await new_worker_task(conn, run_id, "a", queue=f"q-{uuid.uuid4().hex[:6]}")
    await conn.execute(
        "UPDATE task_instances SET state = 'RUNNING' WHERE run_id = $1 AND id = $2",
        run_id,
        ref.task_id,
    )

    assert await repo.unserved_queues(conn, run_id, live_seconds=30) == []
