"""The admission step: between "the machine decides to dispatch" and "the task is
published", the one place where a policy may hold a task that is ready to go
(docs/architecture.md §4.12).

A held task stays PENDING with a reason a person can read (``held_reason``), no
outbox row and no dispatch time, so nothing publishes it and the sweeper does
not take it for a lost dispatch; a release dispatches it once the policy has
room. With no policy the engine has no gate, and a dispatch costs what it did.

The policy here is a concurrency limit per queue (COMPOSER_QUEUE_CONCURRENCY):
at most N tasks of the queue with a worker or on their way to one. The flow
control issue builds keys, rates and priorities on the same step.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import composer_repo as repo


class AdmissionPolicy(Protocol):
    """Decides whether ready tasks may go now. Every method runs in the transaction
    that dispatches (or releases) them: the policy may lock and count."""

    def watches(self, queue: str) -> bool:
        """Whether tasks of ``queue`` go through the policy at all (cheap: no I/O)."""
        ...

    def queues(self) -> Collection[str]:
        """The queues whose held tasks a release looks at."""
        ...

    async def hold(
        self, conn: repo.Connection, queue: str, asking: Sequence[repo.TaskRef]
    ) -> list[str | None]:
        """For each attempt asking to go on ``queue``, in order: None (it goes) or the
        reason it is held."""
        ...

    async def room(self, conn: repo.Connection, queue: str) -> int:
        """How many held tasks of ``queue`` may go now."""
        ...


@dataclass(frozen=True, slots=True)
class QueueConcurrency:
    """At most ``limits[queue]`` tasks of each listed queue with a worker or on their
    way to one; the others wait, oldest first. Decisions on one queue take its
    admission lock until their transaction ends, so two never see the same room."""

    limits: Mapping[str, int]

    def watches(self, queue: str) -> bool:
        return queue in self.limits

    def queues(self) -> Collection[str]:
        return tuple(self.limits)

    async def hold(
        self, conn: repo.Connection, queue: str, asking: Sequence[repo.TaskRef]
    ) -> list[str | None]:
        limit = self.limits[queue]
        await repo.lock_queue_admission(conn, queue)
        reason = (
            f"queue {queue!r} is at its limit of {limit} task(s) at once "
            "(COMPOSER_QUEUE_CONCURRENCY); it goes when one finishes"
        )
        load = await repo.queue_load(conn, queue, leaving_out=[r.task_id for r in asking])
        if load.held:  # oldest first: behind those
            return [reason] * len(asking)
        busy = load.in_flight
        decisions: list[str | None] = []
        for _ in asking:
            if busy < limit:
                busy += 1
                decisions.append(None)
            else:
                decisions.append(reason)
        return decisions

    async def room(self, conn: repo.Connection, queue: str) -> int:
        await repo.lock_queue_admission(conn, queue)
        return self.limits[queue] - (await repo.queue_load(conn, queue)).in_flight


def parse_queue_concurrency(text: str) -> QueueConcurrency | None:
    """``COMPOSER_QUEUE_CONCURRENCY``: ``queue=N`` pairs separated by commas (empty:
    no limit, no policy). Raises ValueError naming what is wrong."""
    limits: dict[str, int] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        queue, sep, value = part.partition("=")
        queue = queue.strip()
        if not sep or not queue:
            raise ValueError(
                f"COMPOSER_QUEUE_CONCURRENCY: {part!r} is not queue=N (e.g. payments=2,emails=10)"
            )
        try:
            limit = int(value)
        except ValueError:
            limit = 0
        if limit < 1:
            raise ValueError(
                f"COMPOSER_QUEUE_CONCURRENCY: the limit of queue {queue!r} must be a whole "
                f"number of at least 1, not {value.strip()!r}"
            )
        if queue in limits:
            raise ValueError(f"COMPOSER_QUEUE_CONCURRENCY names queue {queue!r} twice")
        limits[queue] = limit
    return QueueConcurrency(limits) if limits else None


class Gate:
    """The admission step as the engine's transactions see it: the queue policy (None:
    none), node concurrency keys, and a release asked for after a commit that freed
    room on a watched queue or a key."""

    def __init__(
        self,
        policy: AdmissionPolicy | None,
        release_soon: Callable[[Collection[str]], None],
        release_later: Callable[[str, float], None] | None = None,
    ) -> None:
        self.policy = policy
        self._release_soon = release_soon
        self._release_later = release_later

    async def admit(
        self, conn: repo.Connection, asking: Sequence[tuple[repo.TaskRef, str]]
    ) -> dict[str, str]:
        """The attempts of ``asking`` (attempt, queue) the policy holds: task id → reason."""
        if self.policy is None:
            return {}
        by_queue: dict[str, list[repo.TaskRef]] = {}
        for ref, queue in asking:
            if self.policy.watches(queue):
                by_queue.setdefault(queue, []).append(ref)
        held: dict[str, str] = {}
        for queue in sorted(by_queue):  # one order for every transaction: no deadlock
            refs = by_queue[queue]
            for ref, reason in zip(refs, await self.policy.hold(conn, queue, refs), strict=True):
                if reason is not None:
                    held[ref.task_id] = reason
        return held

    def queues(self) -> Collection[str]:
        """The queues the policy watches."""
        return () if self.policy is None else self.policy.queues()

    def freed(self, queues: Collection[str | None]) -> Collection[str]:
        """The watched ones of ``queues`` where a task just finished."""
        if self.policy is None:
            return set()
        return {q for q in queues if q is not None and self.policy.watches(q)}

    def release_soon(self, names: Collection[str]) -> None:
        """Release on these queues and node concurrency keys after the commit."""
        self._release_soon(names)

    def release_later(self, rate_key: str, seconds: float) -> None:
        """Release on a rate key when its next token is due (``seconds`` from now)."""
        if self._release_later is not None:
            self._release_later(rate_key, seconds)
