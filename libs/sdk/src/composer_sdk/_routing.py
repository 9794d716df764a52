"""Several coordinators, each run's calls to one of them (docs/scale-out.md §3).

A coordinator batches the reports it receives into one transaction (the group
commit, docs/architecture.md §3.1) and keeps a run's reports out of two of its own
batches; it cannot see another coordinator's. With replicas behind one address, the
reports of one run (a FORK's tasks, a chain's steps) reach both, and the two
transactions queue on the run's row lock: measured on a fan-in of 100 tasks, 8.5
backends waiting on a lock at once instead of 0.01. So a worker given every
coordinator's address (``COMPOSER_COORDINATORS``) sends each run's leases, renewals
and reports to the one its run id hashes to, and every run has one batcher.

The hash is the run id's CRC-32 modulo the number of coordinators, the same in every
worker of every language, with the addresses in the order given: workers must be
given one list. A coordinator that cannot be reached (``CoordinatorUnavailable``,
after its client's retries) is passed over for ``DOWN_SECONDS``: its runs' calls go
to the next in the list meanwhile, so a coordinator that dies stops no run — its runs
only lose their single batcher until it is back.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import TypeVar

from composer_sdk._client import (
    Capabilities,
    CoordinatorClient,
    Lease,
    NextTask,
    Presence,
    TakeNext,
)
from composer_sdk._handler import Outcome
from composer_sdk.errors import CoordinatorUnavailable, SdkError

T = TypeVar("T")

#: How long a coordinator that could not be reached is passed over.
DOWN_SECONDS = 5.0


def route(run_id: str, coordinators: int) -> int:
    """The index of the coordinator that takes ``run_id``'s calls."""
    return zlib.crc32(run_id.encode()) % coordinators


def parse_coordinators(text: str) -> list[str]:
    """The comma-separated addresses of ``COMPOSER_COORDINATORS``, in order, checked."""
    targets = [t.strip() for t in text.split(",")]
    if not all(targets):
        raise SdkError(
            f"COMPOSER_COORDINATORS={text!r} has an empty address: give every "
            "coordinator's host:port, separated by commas, the same list to every worker"
        )
    if len(set(targets)) != len(targets):
        raise SdkError(f"COMPOSER_COORDINATORS={text!r} names a coordinator twice")
    return targets


class RunRoutedCoordinators:
    """The coordinator protocol of ``CoordinatorClient`` over several coordinators,
    a run's calls to one of them (``route``); presence and capabilities to every one."""

    def __init__(
        self, clients: Sequence[CoordinatorClient], *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if not clients:
            raise ValueError("no coordinator to route to")
        self._clients = list(clients)
        self._down_until = [0.0] * len(clients)
        self._clock = clock
        self.target = ",".join(c.target for c in clients)

    def _order(self, run_id: str) -> list[int]:
        """The coordinators to try for ``run_id``: its own first, then the next ones,
        those passed over (unreachable a moment ago) last."""
        n = len(self._clients)
        first = route(run_id, n)
        order = [(first + k) % n for k in range(n)]
        now = self._clock()
        return [i for i in order if self._down_until[i] <= now] + [
            i for i in order if self._down_until[i] > now
        ]

    async def _routed(self, run_id: str, call: Callable[[CoordinatorClient], Awaitable[T]]) -> T:
        failed: CoordinatorUnavailable | None = None
        for i in self._order(run_id):
            try:
                answer = await call(self._clients[i])
            except CoordinatorUnavailable as exc:
                self._down_until[i] = self._clock() + DOWN_SECONDS
                failed = exc
                continue
            self._down_until[i] = 0.0
            return answer
        assert failed is not None
        raise failed

    async def acquire(
        self,
        task_id: str,
        run_id: str,
        attempt: int,
        owner: str,
        ttl: float,
        *,
        claim: str,
        until: Callable[[], bool],
        queue: str = "",
        node_types: Collection[str] = (),
    ) -> Lease | None:
        return await self._routed(
            run_id,
            lambda c: c.acquire(
                task_id,
                run_id,
                attempt,
                owner,
                ttl,
                claim=claim,
                until=until,
                queue=queue,
                node_types=node_types,
            ),
        )

    async def renew(
        self, task_id: str, run_id: str, attempt: int, owner: str, ttl: float, token: str
    ) -> bool | None:
        return await self._routed(
            run_id, lambda c: c.renew(task_id, run_id, attempt, owner, ttl, token)
        )

    async def report(
        self,
        task_id: str,
        run_id: str,
        node_id: str,
        attempt: int,
        owner: str,
        token: str,
        outcome: Outcome,
        *,
        until: Callable[[], bool],
        take_next: TakeNext | None = None,
    ) -> bool | NextTask | None:
        return await self._routed(
            run_id,
            lambda c: c.report(
                task_id,
                run_id,
                node_id,
                attempt,
                owner,
                token,
                outcome,
                until=until,
                take_next=take_next,
            ),
        )

    async def capabilities(self, sdk: str, *, until: Callable[[], bool]) -> Capabilities | None:
        """Every reachable coordinator's, checked (each must speak this SDK's protocol:
        a run may be routed to any); the first's is returned. None if ``until()``
        turned true; CoordinatorUnavailable when none could be reached."""
        first: Capabilities | None = None
        failed: CoordinatorUnavailable | None = None
        for client in self._clients:
            try:
                answer = await client.capabilities(sdk, until=until)
            except CoordinatorUnavailable as exc:
                failed = exc
                continue
            if answer is None:
                return None
            first = first or answer
        if first is None:
            assert failed is not None
            raise failed
        return first

    async def heartbeat(self, presence: Presence, *, timeout: float | None = None) -> bool:
        """To the first coordinator that answers (one is enough: they share the
        database); False when it keeps no heartbeats."""
        failed: SdkError | None = None
        for client in self._clients:
            try:
                return await client.heartbeat(presence, timeout=timeout)
            except CoordinatorUnavailable as exc:
                failed = exc
        assert failed is not None
        raise failed

    async def close(self) -> None:
        for client in self._clients:
            await client.close()
