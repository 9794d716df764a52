"""The chaos suite's worker process: an SDK worker whose no-op handler writes the ledger.

    python -m tests.chaos.worker LEDGER_DIR QUEUE

Settings come from the same COMPOSER_* variables the built-in workers read
(COMPOSER_REDIS_URL, COMPOSER_REDIS_PREFIX, COMPOSER_GRPC_ADDR, COMPOSER_WORKER_TOKEN,
COMPOSER_LEASE_TTL_SECONDS, COMPOSER_CONCURRENCY). Every TASK node of the chaos
workflows has ``spec: {plan: "{{input.plan}}"}``; the handler looks its node
up in the plan: ``sleep`` seconds, ``fail_first`` attempts that fail (retryable),
``permanent`` to fail for good.

Besides the handler's start and end, the ledger gets each lease the
coordinator grants or renews (with the expiry it set) and each report's
fate, seen from the worker's side of the wire: the checks need to know when
each execution held a valid lease, and why a task ran again.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
import uuid
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import grpc.aio

from composer_rpc.v1 import worker_pb2 as pb
from composer_sdk import Outcome, PermanentError, TaskContext, TaskFailed, Worker, WorkerConfig
from composer_sdk import _client as sdk_client
from composer_sdk import _worker as sdk_worker
from composer_sdk._client import CoordinatorClient, Lease, NextTask, TakeNext
from composer_service.logs import setup_logging
from composer_workers.settings import WorkersSettings
from tests.chaos.ledger import LedgerWriter

log = logging.getLogger("composer.chaos.worker")


class LedgerClient(CoordinatorClient):
    """The SDK's coordinator client, noting every lease, renewal and report in the ledger."""

    ledger: LedgerWriter | None = None

    def _note(self, kind: str, **fields: Any) -> None:
        if self.ledger is not None:
            self.ledger.write(kind, **fields)

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
        t0 = time.time()
        lease = await super().acquire(
            task_id,
            run_id,
            attempt,
            owner,
            ttl,
            claim=claim,
            until=until,
            queue=queue,
            node_types=node_types,
        )
        if lease is not None and lease.granted:
            self._note(
                "lease",
                task=task_id,
                run=run_id,
                attempt=attempt,
                owner=owner,
                t0=t0,
                t1=time.time(),
                exp=lease.expires_at,
            )
        return lease

    async def renew(
        self, task_id: str, run_id: str, attempt: int, owner: str, ttl: float, token: str
    ) -> bool | None:
        # The base class's renewal, keeping the expiry the coordinator set.
        request = pb.RenewTaskLeaseRequest(
            task_id=task_id,
            run_id=run_id,
            attempt=attempt,
            owner=owner,
            ttl_seconds=ttl,
            lease_token=token,
        )
        t0 = time.time()
        try:
            reply = await self._stub.RenewTaskLease(
                request, metadata=self._md(), timeout=self._timeout
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() in sdk_client._TRANSIENT:
                self._note("renew", task=task_id, attempt=attempt, owner=owner, t0=t0, ok=None)
                return None
            raise sdk_client._fatal(exc) from exc
        self._note(
            "renew",
            task=task_id,
            attempt=attempt,
            owner=owner,
            t0=t0,
            t1=time.time(),
            ok=bool(reply.ok),
            exp=reply.lease_expires_at,
        )
        return bool(reply.ok)

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
        t0 = time.time()
        answer = await super().report(
            task_id,
            run_id,
            node_id,
            attempt,
            owner,
            token,
            outcome,
            until=until,
            take_next=take_next,
        )
        accepted = True if isinstance(answer, NextTask) else answer
        self._note(
            "report", task=task_id, attempt=attempt, owner=owner, t=time.time(), accepted=accepted
        )
        if isinstance(answer, NextTask):  # leased with the report: a lease like any other
            self._note(
                "lease",
                task=answer.fields["task_id"],
                run=answer.fields["run_id"],
                attempt=int(answer.fields["attempt"]),
                owner=owner,
                t0=t0,
                t1=time.time(),
                exp=answer.lease.expires_at,
            )
        return answer


async def serve(ledger_dir: Path, queue: str) -> None:
    settings = WorkersSettings()
    worker = Worker(
        WorkerConfig(
            redis_url=settings.redis_url,
            coordinator=settings.grpc_addr,
            coordinators=settings.coordinators,
            token=settings.worker_token,
            redis_prefix=settings.redis_prefix,
            shards=settings.shards,
            concurrency=settings.concurrency,
            lease_ttl=settings.lease_ttl_seconds,
            read_block_ms=200,
            drain_seconds=2.0,
        )
    )
    ledger = LedgerWriter(ledger_dir, worker.owner)
    LedgerClient.ledger = ledger
    # The SDK builds its client in Worker.run(); this process's workers build ours.
    sdk_worker.CoordinatorClient = LedgerClient  # type: ignore[attr-defined]

    async def noop(ctx: TaskContext, input: dict[str, Any]) -> dict[str, Any]:
        plan = (input.get("plan") or {}).get(ctx.node_id) or {}
        execution = uuid.uuid4().hex[:12]
        ledger.write(
            "start",
            x=execution,
            task=ctx.task_id,
            run=ctx.run_id,
            node=ctx.node_id,
            attempt=ctx.attempt,
            owner=worker.owner,
            t=time.time(),
        )
        outcome = "cancelled"
        try:
            await asyncio.sleep(float(plan.get("sleep", 0.05)))
            if plan.get("permanent"):
                outcome = "permanent"
                raise PermanentError(f"{ctx.node_id} refuses for good", code="chaos_permanent")
            if ctx.attempt < int(plan.get("fail_first", 0)):
                outcome = "flaky"
                raise TaskFailed(f"{ctx.node_id} flaked on attempt {ctx.attempt}", code="flaky")
            outcome = "ok"
            return {"node": ctx.node_id, "attempt": ctx.attempt, "owner": worker.owner}
        finally:
            ledger.write("end", x=execution, t=time.time(), outcome=outcome)

    worker.add_handler(queue, noop)
    worker.install_signal_handlers()
    try:
        await worker.run()
    finally:
        ledger.close()


def main() -> int:
    settings = WorkersSettings()
    setup_logging("chaos-worker", settings.log_level, json_lines=settings.json_logs)
    asyncio.run(serve(Path(sys.argv[1]), sys.argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
