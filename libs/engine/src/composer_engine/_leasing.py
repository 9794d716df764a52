"""Leases: a worker takes an attempt (``acquire_lease``) and keeps it
(``renew_lease``). No run lock: each is one fenced row update, and a batch of
them one statement (docs/architecture.md §3.1, §6.1); the checks of a grant are
``_leases.grant_leases``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import composer_repo as repo
from composer_common.batching import Batcher
from composer_common.codes import ErrorCode
from composer_core.model import NodeType
from composer_core.statemachine import NodeFailed
from composer_engine._leases import LeaseGrant, grant_leases
from composer_engine._shell import Shell
from composer_engine._tx import Tx
from composer_engine.errors import EngineError

log = logging.getLogger("composer.engine")
A = TypeVar("A")
#: The largest input (JSON text, bytes) of a task leased with a report's answer: a
#: batched answer of 128 reports stays under the 3 MiB an answer carries (§6.2);
#: a larger one is published and leased as always. At least 12,000: the lease
#: statement does not measure an input stored uncompressed in under 2,000 bytes.
NEXT_TASK_MAX_INPUT = 16 * 1024
B = TypeVar("B")


class Leasing:
    """Grant and renew leases, one at a time through batchers (``lease``, ``renew``)
    or many at once."""

    def __init__(
        self,
        shell: Shell,
        *,
        batch_size: int,
        batches_in_flight: int,
        new_lease_token: Callable[[], str],
        max_node_input_bytes: int | None,
        park_seconds: float,
    ) -> None:
        """``max_node_input_bytes`` (COMPOSER_MAX_NODE_INPUT_BYTES): an attempt whose
        input is larger is not leased but failed for good (None: no limit). An
        attempt whose input does not open here is parked for ``park_seconds``."""
        self._shell = shell
        self._new_lease_token = new_lease_token
        self.max_node_input_bytes = max_node_input_bytes
        self.park_for = dt.timedelta(seconds=park_seconds)
        self._leases: Batcher[repo.LeaseRequest, LeaseGrant] = Batcher(
            self.acquire_leases,
            max_size=batch_size,
            max_in_flight=batches_in_flight,
            name="leases",
        )
        self._renewals: Batcher[repo.LeaseRequest, dt.datetime | None] = Batcher(
            self.renew_leases,
            max_size=batch_size,
            max_in_flight=batches_in_flight,
            name="renewals",
        )

    def new_token(self) -> str:
        """A fresh lease token, as a grant issues."""
        return self._new_lease_token()

    async def settle(self) -> None:
        """Return once no batch of leases or renewals is in flight (Engine.aclose)."""
        await self._leases.settle()
        await self._renewals.settle()

    async def acquire_lease(
        self,
        run_id: str,
        task_id: str,
        attempt: int,
        *,
        owner: str,
        ttl: float,
        claim: str = "",
        queues: frozenset[str] | None = None,
        queue: str | None = None,
        node_types: frozenset[NodeType] | None = None,
    ) -> LeaseGrant:
        """Grant a worker the attempt under a fresh token (no run lock needed: one
        fenced row update); Forbidden when the task is on none of ``queues``, Misrouted
        when it is not on ``queue``, not of ``node_types`` or not due yet."""
        request = repo.LeaseRequest(
            run_id,
            task_id,
            attempt,
            owner,
            ttl,
            claim=claim,
            queues=queues,
            queue=queue,
            node_types=node_types,
        )
        [answer] = await self.acquire_leases([request])
        if isinstance(answer, EngineError):
            raise answer
        return answer

    async def lease(self, request: repo.LeaseRequest) -> LeaseGrant:
        """``acquire_lease`` in the next batch of leases (``acquire_leases``)."""
        return await self._leases.submit(request)

    async def renew(self, request: repo.LeaseRequest) -> dt.datetime | None:
        """``renew_lease`` in the next batch of renewals (``renew_leases``)."""
        return await self._renewals.submit(request)

    async def acquire_leases(
        self, requests: Sequence[repo.LeaseRequest]
    ) -> list[LeaseGrant | EngineError]:
        """Grant many leases in one statement (no transaction: each is one fenced row
        update), each under a fresh token. An attempt asked for twice in the batch is
        asked again after it."""
        tokened = [dataclasses.replace(r, token=self._new_lease_token()) for r in requests]
        answers = await self._fenced_batch(tokened, self._grant, self._acquire_one)
        first, _ = _once_each(requests)  # a repeat was answered, and failed, by itself
        await self.fail_too_large([(requests[i], answers[i]) for i in first])
        return answers

    async def grant_in(
        self, conn: repo.Connection, requests: Sequence[repo.LeaseRequest]
    ) -> list[LeaseGrant | EngineError]:
        """Grant ``requests`` (each attempt once) under fresh tokens in the caller's
        transaction: the tasks a report's own transaction dispatched and leases to its
        worker (engine/_reports.py). A grant refused ``too_large`` is to be passed to
        ``fail_too_large`` once the transaction committed."""
        tokened = [dataclasses.replace(r, token=self._new_lease_token()) for r in requests]
        return await self._grant(
            conn, tokened, max_stored_input=NEXT_TASK_MAX_INPUT, explain_refused=False
        )

    async def _grant(
        self,
        conn: repo.Connection,
        batch: Sequence[repo.LeaseRequest],
        max_stored_input: int | None = None,
        explain_refused: bool = True,
    ) -> list[LeaseGrant | EngineError]:
        return await grant_leases(
            conn,
            self._shell.definitions,
            batch,
            max_input_bytes=self.max_node_input_bytes,
            sealer=self._shell.sealer,
            park_for=self.park_for,
            max_stored_input=max_stored_input,
            explain_refused=explain_refused,
        )

    async def fail_too_large(
        self, answers: Sequence[tuple[repo.LeaseRequest, LeaseGrant | EngineError]]
    ) -> None:
        """Fail for good each attempt of ``answers`` not granted because its input is
        over the node input limit (``_fail_too_large``)."""
        too_large = [
            (request, answer)
            for request, answer in answers
            if isinstance(answer, LeaseGrant) and answer.too_large
        ]
        if too_large:
            await asyncio.gather(*(self._fail_too_large(r, a) for r, a in too_large))

    async def _fail_too_large(self, request: repo.LeaseRequest, grant: LeaseGrant) -> None:
        """Fail for good an attempt whose input is over the node input limit (the
        lease statement just took it, under a token no worker holds). Should this
        fail, the lease runs out and the lease-sweeper retries the attempt, whose
        lease is refused again, and this runs again."""
        event = NodeFailed(
            request.task_id,
            grant.node_id,
            request.attempt,
            grant.reason,
            ErrorCode.INPUT_TOO_LARGE,
            permanent=True,
        )
        try:
            await self._shell.handle(request.run_id, event)
        except EngineError as exc:
            log.warning(
                "run %s: could not fail %s, whose input is too large (%s): the lease "
                "sweeper will take it back",
                request.run_id,
                grant.node_id,
                exc,
            )

    async def renew_leases(
        self, requests: Sequence[repo.LeaseRequest]
    ) -> list[dt.datetime | EngineError | None]:
        """Renew many leases in one statement; for each the new expiry, or None: lost
        (or not this token's)."""
        return await self._fenced_batch(requests, repo.renew_leases, self._renew_one)

    async def _fenced_batch(
        self,
        requests: Sequence[repo.LeaseRequest],
        statement: Callable[[repo.Connection, Sequence[repo.LeaseRequest]], Awaitable[list[A]]],
        alone: Callable[[repo.LeaseRequest], Awaitable[B]],
    ) -> list[A | B | EngineError]:
        """``statement`` for the first request of each attempt, as one statement; the
        repeats of an attempt ``alone``, after it."""
        first, repeats = _once_each(requests)

        async def run(tx: Tx) -> list[A]:
            return await statement(tx.conn, [requests[i] for i in first])

        try:
            answers = await self._shell.in_tx(run, single_statement=True)
        except EngineError as exc:
            return [exc] * len(requests)
        ordered: dict[int, A | B | EngineError] = dict(zip(first, answers, strict=True))
        for i in repeats:
            try:
                ordered[i] = await alone(requests[i])
            except EngineError as exc:
                ordered[i] = exc
        return [ordered[i] for i in range(len(requests))]

    async def _acquire_one(self, r: repo.LeaseRequest) -> LeaseGrant:
        return await self.acquire_lease(
            r.run_id,
            r.task_id,
            r.attempt,
            owner=r.owner,
            ttl=r.ttl,
            claim=r.claim,
            queues=r.queues,
            queue=r.queue,
            node_types=r.node_types,
        )

    async def renew_lease(
        self,
        run_id: str,
        task_id: str,
        attempt: int,
        *,
        owner: str,
        ttl: float,
        token: str,
        queues: frozenset[str] | None = None,
    ) -> dt.datetime | None:
        """Extend the lease ``token`` names; None when it is lost or not this token's."""

        async def attempt_tx(tx: Tx) -> dt.datetime | None:
            return await repo.renew_lease(
                tx.conn, run_id, task_id, attempt, owner=owner, ttl=ttl, token=token, queues=queues
            )

        return await self._shell.in_tx(attempt_tx, single_statement=True)

    async def _renew_one(self, r: repo.LeaseRequest) -> dt.datetime | None:
        return await self.renew_lease(
            r.run_id, r.task_id, r.attempt, owner=r.owner, ttl=r.ttl, token=r.token, queues=r.queues
        )


def _once_each(requests: Sequence[repo.LeaseRequest]) -> tuple[list[int], list[int]]:
    """The positions of each attempt's first request, and of the repeats."""
    seen: set[tuple[str, str, int]] = set()
    first: list[int] = []
    repeats: list[int] = []
    for i, r in enumerate(requests):
        key = (r.run_id, r.task_id, r.attempt)
        (repeats if key in seen else first).append(i)
        seen.add(key)
    return first, repeats
