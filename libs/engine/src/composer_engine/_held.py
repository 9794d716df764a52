"""Held tasks: releasing what the admission step held once its policy has room
(docs/architecture.md §4.12).

A release is asked for right after a commit that finished a task on a watched
queue (in the background, coalesced: one at a time, and one more if asked
meanwhile), and by the lease-sweeper on each pass, which catches a release a
process did not make (it died, or the room freed elsewhere). Each queue is
released in a transaction of its own, under its admission lock: the policy says
how many may go, the oldest held attempts go, each through the same outbox row
and publish as any dispatch.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Collection

import composer_repo as repo
from composer_engine._admission import AdmissionPolicy
from composer_engine._metrics import count_limits, instruments
from composer_engine._node_limits import release_line, release_rate
from composer_engine._persist import write_dispatch
from composer_engine._shell import Shell
from composer_engine._tx import Tx
from composer_engine.errors import BadRequest

log = logging.getLogger("composer.engine")


class HeldTasks:
    """Releases held tasks when their queue has room."""

    def __init__(self, shell: Shell) -> None:
        self._shell = shell
        self._asked: set[str] = set()
        self._releasing: asyncio.Task[None] | None = None
        #: rate key → when (loop time) a release of it is already set for.
        self._timers: dict[str, float] = {}

    async def release(self, queues: Collection[str] | None = None) -> int:
        """Release, on each of ``queues`` (queue names, and node concurrency keys, which
        hold a ':'; None: every queue the policy watches and every key with held
        attempts), as many held attempts as there is room for, oldest first: how many
        went."""
        gate = self._shell.gate
        if gate is None:
            return 0
        if queues is None:

            async def keys(tx: Tx) -> list[str]:
                return [
                    *await repo.held_limit_keys(tx.conn),
                    *await repo.held_rate_keys(tx.conn),
                ]

            queues = [*gate.queues(), *await self._shell.in_tx(keys)]
        released = 0
        for name in sorted(queues):
            if name.startswith("rate:"):
                released += await self._release_rate(name)
                continue
            if ":" in name:
                released += await self._release_key(name)
                continue
            policy = gate.policy
            if policy is None:
                continue

            async def attempt(tx: Tx, queue: str = name, policy: AdmissionPolicy = policy) -> int:
                room = await policy.room(tx.conn, queue)
                if room <= 0:
                    return 0
                going = 0
                for ref in await repo.held_tasks(tx.conn, queue, room):
                    released = await repo.release_task(tx.conn, ref)
                    if released is None:
                        continue
                    await self._dispatch(tx, ref, queue, not_before=released.not_before)
                    going += 1
                return going

            released += await self._shell.in_tx(attempt)
        return released

    async def _release_key(self, key: str) -> int:
        """Release the held attempts of a node concurrency key that may go now."""

        async def attempt(tx: Tx) -> int:
            going = await release_line(tx.conn, key)
            for g in going:
                await self._dispatch(tx, g.held.ref, g.held.queue, key, not_before=g.not_before)
            return len(going)

        return await self._shell.in_tx(attempt)

    async def _release_rate(self, key: str) -> int:
        """Release the attempts waiting for a rate key's tokens that may go now; set a
        release for when the next token the first one left needs is due."""

        async def attempt(tx: Tx) -> tuple[int, float | None]:
            going, wait = await release_rate(tx.conn, key)
            for g in going:
                await self._dispatch(tx, g.held.ref, g.held.queue, key, not_before=g.not_before)
            return len(going), wait

        released, wait = await self._shell.in_tx(attempt)
        if wait is not None:
            self.release_later(key, wait)
        return released

    async def set_rate_limit(
        self, key: str, *, limit: int, per_seconds: float, set_by: str
    ) -> None:
        """PUT /v1/limits/{key}: the rate key's limit from now on, whatever the
        definitions naming it say; attempts waiting for it are looked at again."""
        if limit < 1 or not 0 < per_seconds <= 86400:
            raise BadRequest(
                f"rate limit {key!r}: limit must be a whole number of at least 1 and "
                f"per_seconds in (0, 86400], not {limit} per {per_seconds}"
            )

        async def attempt(tx: Tx) -> None:
            await repo.set_rate_limit(
                tx.conn, f"rate:{key}", limit=limit, per_seconds=per_seconds, set_by=set_by
            )

        await self._shell.in_tx(attempt)
        self.release_soon([f"rate:{key}"])

    def release_later(self, rate_key: str, seconds: float) -> None:
        """Release on ``rate_key`` ``seconds`` from now (its next token), unless a release
        of it is set for sooner. A process that dies with it set leaves it to the
        lease-sweeper's pass."""
        loop = asyncio.get_running_loop()
        at = loop.time() + max(0.0, seconds) + 0.005  # the token is whole by then
        if self._timers.get(rate_key, float("inf")) <= at:
            return
        self._timers[rate_key] = at

        def due() -> None:
            if self._timers.get(rate_key) == at:
                del self._timers[rate_key]
                self.release_soon([rate_key])

        loop.call_at(at, due)

    async def _dispatch(
        self,
        tx: Tx,
        ref: repo.TaskRef,
        queue: str,
        limit: str | None = None,
        *,
        not_before: dt.datetime | None = None,
    ) -> None:
        """Send a released attempt, no earlier than ``not_before`` (a held retry's
        backoff end); ``limit``: the queue or key that released it (its queue when
        None), counted once the transaction commits."""
        await write_dispatch(tx, ref, queue=queue, not_before=not_before, admit=False)
        name = queue if limit is None else limit
        tx.after_commit(lambda: count_limits(instruments().attempts_released, [name]))
        tx.writes.history.append(
            repo.NewHistory(
                ref.run_id,
                "task.released",
                node_id=ref.node_id,
                task_id=ref.task_id,
                attempt=ref.attempt,
                detail={"queue": queue},
            )
        )

    def release_soon(self, queues: Collection[str]) -> None:
        """Release on ``queues`` in the background, right after the commit that freed room
        there; asked again while one runs, one more runs after it."""
        self._asked.update(queues)
        if self._releasing is None:
            self._releasing = asyncio.get_running_loop().create_task(
                self._release_asked(), name="held-task-release"
            )

    async def _release_asked(self) -> None:
        try:
            while self._asked:
                queues, self._asked = self._asked, set()
                try:
                    await self.release(queues)
                except Exception as exc:  # the sweeper's pass releases them later
                    log.warning(
                        "releasing held tasks of %s failed (%s): the lease-sweeper's next "
                        "pass releases them",
                        ", ".join(sorted(queues)),
                        exc,
                    )
        finally:
            self._releasing = None

    async def aclose(self) -> None:
        """Wait for the release under way."""
        if self._releasing is not None:
            await asyncio.gather(self._releasing, return_exceptions=True)
