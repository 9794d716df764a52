"""The load: runs started and signalled through the REST API, as a client would.

A start carries an idempotency key, so the driver retries it through any
fault. A signal has no such key: when its fate is unknown (the connection
dropped, the gateway answered 5xx) the driver looks in the database whether
it landed before sending it again, so each signal is sent to the engine once.
Every run is awaited with the long-poll result endpoint.

With several api-gateway replicas the calls are spread over them at random; a
call that got no answer (its gateway killed) is retried on another one.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import aiohttp

import composer_repo as repo
from tests.chaos.cluster import API_TOKEN
from tests.chaos.shapes import EVENT, WORKFLOWS, Planned, plan_run

TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


@dataclass
class SentSignal:
    signal_id: str
    name: str
    #: delivered (a waiting node took it), buffered, refused (409: the run was over),
    #: or error (anything else: a violation).
    outcome: str = ""
    #: Sent again after an unknown outcome, having checked it had not landed.
    resends: int = 0
    #: Expected to be refused: sent after the run finished.
    late: bool = False


@dataclass
class DrivenRun:
    key: str
    planned: Planned
    run_id: str | None = None
    final_status: str | None = None
    signals: list[SentSignal] = field(default_factory=list)
    start_retries: int = 0


@dataclass
class Driver:
    #: Every gateway's URL; each call goes to one of them.
    api_urls: list[str]
    database_url: str
    rng: random.Random
    runs: int
    concurrency: int
    #: Give up waiting on a run after this long (it is then reported as stuck).
    run_deadline: float = 600.0
    late_signal_share: float = 0.05
    driven: list[DrivenRun] = field(default_factory=list)
    started: int = 0
    finished: int = 0
    api_errors: int = 0
    #: Calls each gateway answered (any status), by URL.
    answered: dict[str, int] = field(default_factory=dict)
    pool: repo.Pool | None = None
    #: Which gateway takes a call (apart from ``rng``, which plans the runs).
    _picks: random.Random = field(default_factory=random.Random)

    async def deploy(self) -> None:
        async with self._session() as http:
            for definition in WORKFLOWS.values():
                async with http.post(
                    f"{self.api_urls[0]}/v1/workflows", params={"deploy": "true"}, json=definition
                ) as resp:
                    if resp.status != 201:
                        raise RuntimeError(
                            f"deploying {definition['id']}: {resp.status} {await resp.text()}"
                        )

    def _session(self) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {API_TOKEN}"},
            timeout=aiohttp.ClientTimeout(total=40),
        )

    async def run(self) -> None:
        """Start ``runs`` runs, ``concurrency`` at a time, each awaited to its end."""
        self.pool = await repo.create_pool(self.database_url, min_size=0, max_size=4)
        try:
            async with self._session() as http:
                slots = asyncio.Semaphore(self.concurrency)
                tasks = []
                for i in range(self.runs):
                    await slots.acquire()
                    run = DrivenRun(f"chaos-{uuid.uuid4().hex[:8]}-{i}", plan_run(self.rng))
                    self.driven.append(run)
                    task = asyncio.create_task(self._drive(http, run), name=f"drive:{run.key}")
                    task.add_done_callback(lambda _t: slots.release())
                    tasks.append(task)
                await asyncio.gather(*tasks)
        finally:
            await self.pool.close()

    async def _drive(self, http: aiohttp.ClientSession, run: DrivenRun) -> None:
        deadline = time.monotonic() + self.run_deadline
        await self._start(http, run, deadline)
        self.started += 1
        if run.run_id is None:
            return
        if run.planned.expect.event_node is not None:
            # Signal at a random moment: at once (the run has not reached its wait,
            # so the signal is buffered), soon, or once the wait is likely reached.
            when = self.rng.choice([0.0, self.rng.uniform(0, 0.6), self.rng.uniform(0.6, 5)])
            await asyncio.sleep(when)
            await self._signal(http, run, deadline)
        await self._await_end(http, run, deadline)
        self.finished += 1
        if run.final_status in TERMINAL and self.rng.random() < self.late_signal_share:
            await self._signal(http, run, deadline, late=True)

    async def _call(
        self, http: aiohttp.ClientSession, method: str, path: str, **kwargs: Any
    ) -> tuple[int, Any]:
        """(status, JSON body) from a gateway picked at random; status 0 when no answer
        came (connection refused or cut), after trying every other gateway once."""
        urls = self.api_urls[:]
        self._picks.shuffle(urls)
        for url in urls:
            try:
                async with http.request(method, f"{url}{path}", **kwargs) as resp:
                    body = await resp.json(content_type=None) if resp.content_length != 0 else None
                    self.answered[url] = self.answered.get(url, 0) + 1
                    if resp.status >= 500:
                        self.api_errors += 1
                    return resp.status, body
            except aiohttp.ClientConnectorError:
                # no gateway there (refused): nothing was sent, so the next one; a call cut
                # mid-way (its fate unknown) is left to the caller, who knows how to retry it
                self.api_errors += 1
            except (aiohttp.ClientError, TimeoutError, ValueError):
                self.api_errors += 1
                return 0, None
        return 0, None

    async def _start(self, http: aiohttp.ClientSession, run: DrivenRun, deadline: float) -> None:
        body = {
            "workflow_id": run.planned.workflow_id,
            "input": run.planned.input,
            "idempotency_key": run.key,
        }
        while time.monotonic() < deadline:
            status, answer = await self._call(http, "POST", "/v1/runs", json=body)
            if status in (200, 201):
                run.run_id = answer["run_id"]
                return
            if status and status < 500:
                raise RuntimeError(f"starting {run.key}: {status} {answer}")
            run.start_retries += 1
            await asyncio.sleep(0.3)

    async def _signal(
        self, http: aiohttp.ClientSession, run: DrivenRun, deadline: float, *, late: bool = False
    ) -> None:
        assert run.run_id is not None
        sent = SentSignal(uuid.uuid4().hex, EVENT, late=late)
        run.signals.append(sent)
        while time.monotonic() < deadline:
            status, answer = await self._call(
                http, "POST", f"/v1/runs/{run.run_id}/signals/{EVENT}", json={"sig": sent.signal_id}
            )
            if status == 200:
                sent.outcome = "delivered" if answer["delivered"] else "buffered"
                return
            if status == 409:
                sent.outcome = "refused"
                return
            if status and status < 500:
                sent.outcome = f"error {status}: {answer}"
                return
            # Unknown: let whatever was in flight settle, then look before sending again.
            await asyncio.sleep(1.0)
            landed = await self._landed(run.run_id, sent.signal_id)
            if landed is not None:
                sent.outcome = landed
                return
            sent.resends += 1
        sent.outcome = "error: never answered"

    async def _landed(self, run_id: str, signal_id: str) -> str | None:
        """'delivered' or 'buffered' if the engine has the signal; None if it has not."""
        assert self.pool is not None
        while True:
            try:
                async with repo.transaction(self.pool) as conn:
                    tasks = await repo.get_run_tasks(conn, run_id)
                    buffered = await repo.run_signals(conn, run_id)
                break
            except repo.RepoError:
                await asyncio.sleep(0.5)
        kept = [s for s in buffered if s.payload == {"sig": signal_id}]
        if kept:
            # a signal a waiting node took as it arrived is kept too, consumed in the
            # transaction that wrote it (one time for both)
            return "delivered" if kept[0].consumed_at == kept[0].created_at else "buffered"
        if any(t.output == {"sig": signal_id} for t in tasks):
            return "delivered"
        return None

    async def _await_end(
        self, http: aiohttp.ClientSession, run: DrivenRun, deadline: float
    ) -> None:
        while time.monotonic() < deadline:
            status, answer = await self._call(
                http, "GET", f"/v1/runs/{run.run_id}/result", params={"timeout": "20"}
            )
            if status == 200 and answer["status"] in TERMINAL:
                run.final_status = answer["status"]
                return
            if status not in (200, 202):
                await asyncio.sleep(0.5)
