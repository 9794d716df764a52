"""Node concurrency and rate limits on the admission step (docs/architecture.md §4.12).

A node's ``concurrency: {key, max, scope}`` is a line of its own, apart from its
queue's: its attempts are counted by the key stored on their rows (V019), under the
key's advisory lock, held oldest first, and released as the key's attempts finish.
A node's ``rate_limit: {key, limit, per_seconds, units}`` takes tokens from a bucket
(V023, ``rate_buckets``, locked with FOR UPDATE), refilled by the time passed; an
attempt without them is held in order, never dropped, and released as tokens come
back: by a timer the holding process sets for when the next token is due, and by
the lease-sweeper's pass. An attempt held for tokens is not in flight, so it holds
no concurrency place meanwhile (a restart cannot deadlock a key on it).

Every transaction takes concurrency keys before buckets, each kind in sorted order,
so two never wait on each other. A node with a concurrency key goes through its key
only, not through its queue's limit.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field

import composer_repo as repo
from composer_core.model import NodeLine, NodeRate


def reason(line: NodeLine) -> str:
    key = line.key or ""
    name = key.partition(":")[2]
    if key.startswith("workflow:"):
        workflow_id, _, short = name.partition(":")
        what = f"concurrency key {short!r} of workflow {workflow_id!r}"
    else:
        what = f"global concurrency key {name!r}"
    return f"{what} is at its limit of {line.max} attempt(s) at once; it goes when one finishes"


def rate_reason(bucket: repo.RateBucket, units: int) -> str:
    period = f"{bucket.per_seconds:g} s"
    return (
        f"rate limit {bucket.key.partition(':')[2]!r} ({bucket.limit} per {period}) has no "
        f"{'token' if units == 1 else f'{units} tokens'} left; it goes in order as tokens "
        "come back"
    )


@dataclass
class Admitted:
    """What the lines decided for a batch: task id → why it is held, and for each rate
    key with attempts held, the seconds until its next token."""

    held: dict[str, str] = field(default_factory=dict)
    wake: dict[str, float] = field(default_factory=dict)
    #: task id → the key that held it (a concurrency key, or ``rate:<key>``).
    by: dict[str, str] = field(default_factory=dict)


async def hold_on_lines(
    conn: repo.Connection, asking: Sequence[tuple[repo.TaskRef, NodeLine]]
) -> Admitted:
    """Which attempts of ``asking`` their concurrency keys or rate buckets hold."""
    out = Admitted()
    by_key: dict[str, list[tuple[repo.TaskRef, NodeLine]]] = {}
    for ref, line in asking:
        if line.key is not None:
            by_key.setdefault(line.key, []).append((ref, line))
    for key in sorted(by_key):
        items = by_key[key]
        await repo.lock_limit_key(conn, key)
        load = await repo.limit_load(conn, key, leaving_out=[ref.task_id for ref, _ in items])
        busy = load.in_flight
        for ref, line in items:
            if load.held or busy >= line.max:  # oldest first: behind those held
                out.held[ref.task_id] = reason(line)
                out.by[ref.task_id] = key
            else:
                busy += 1
    by_rate: dict[str, list[tuple[repo.TaskRef, NodeRate]]] = {}
    for ref, line in asking:
        if line.rate is not None and ref.task_id not in out.held:
            by_rate.setdefault(line.rate.key, []).append((ref, line.rate))
    for key in sorted(by_rate):
        rate_items = by_rate[key]
        first = rate_items[0][1]
        bucket = await repo.take_rate_bucket(
            conn, key, limit=first.limit, per_seconds=first.per_seconds
        )
        behind = await repo.rate_held_load(conn, key) > 0  # in order: behind those waiting
        for ref, rate in rate_items:
            if behind or bucket.tokens < rate.units:
                behind = True
                out.held[ref.task_id] = rate_reason(bucket, rate.units)
                out.by[ref.task_id] = key
                out.wake.setdefault(key, bucket.seconds_for(rate.units))
            else:
                bucket.tokens -= rate.units
        await repo.store_rate_bucket(conn, bucket)
    return out


@dataclass(frozen=True, slots=True)
class Going:
    """A held attempt a release let go, and when its dispatch is due: its retry's
    backoff end when that is still ahead (None: at once)."""

    held: repo.HeldLimited
    not_before: dt.datetime | None


async def release_line(conn: repo.Connection, key: str) -> list[Going]:
    """Take the held attempts of concurrency ``key`` that may go now, oldest first (the
    caller dispatches them in this transaction). One that also waits for a rate
    limit goes only with its tokens."""
    await repo.lock_limit_key(conn, key)
    load = await repo.limit_load(conn, key)
    held = await repo.held_limit_tasks(conn, key, 100)
    buckets: dict[str, repo.RateBucket] = {}
    for rate_key in sorted({h.rate_key for h in held if h.rate_key is not None}):
        buckets[rate_key] = await repo.take_rate_bucket(conn, rate_key)
    going: list[Going] = []
    busy = load.in_flight
    for item in held:
        if busy >= item.max:
            break
        bucket = buckets.get(item.rate_key) if item.rate_key is not None else None
        if bucket is not None and bucket.tokens < item.units:
            continue  # it waits for tokens: the rate release sends it
        released = await repo.release_task(conn, item.ref)
        if released is not None:
            if bucket is not None:
                bucket.tokens -= item.units
            going.append(Going(item, released.not_before))
            busy += 1
    for bucket in buckets.values():
        await repo.store_rate_bucket(conn, bucket)
    return going


async def release_rate(conn: repo.Connection, key: str) -> tuple[list[Going], float | None]:
    """Take the attempts waiting for rate ``key``'s tokens that may go now, in order,
    and the seconds until the next token the first one left waiting needs (None: none
    waits). One that also has a concurrency key goes only with a place there."""
    held = await repo.held_rate_tasks(conn, key, 100)
    if not held:
        return [], None
    loads: dict[str, int] = {}
    for limit_key in sorted({h.limit_key for h in held if h.limit_key is not None}):
        await repo.lock_limit_key(conn, limit_key)
        loads[limit_key] = (await repo.limit_load(conn, limit_key)).in_flight
    bucket = await repo.take_rate_bucket(conn, key)
    going: list[Going] = []
    wait: float | None = None
    for item in held:
        if bucket.tokens < item.units:
            wait = bucket.seconds_for(item.units)
            break  # in order: nobody passes the head of the line
        if item.limit_key is not None and loads[item.limit_key] >= item.max:
            continue  # it waits for a place of its concurrency key, whose release sends it
        released = await repo.release_task(conn, item.ref)
        if released is not None:
            bucket.tokens -= item.units
            if item.limit_key is not None:
                loads[item.limit_key] += 1
            going.append(Going(item, released.not_before))
    await repo.store_rate_bucket(conn, bucket)
    return going, wait
