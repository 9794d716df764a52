"""Two coordinators, and workers given both (COMPOSER_COORDINATORS, docs/scale-out.md
§3): every lease and report of a run reaches the one coordinator its id routes to,
so one group commit batches all of it; when that coordinator goes, its runs go on
through the other."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from composer_coordinator.server import start_server
from composer_core.model import RunStatus
from composer_engine import Engine, Started
from composer_sdk._routing import route
from tests.integration.e2e.conftest import TOKEN, Stack
from tests.integration.e2e.test_runs import add_one, chain

Seen = dict[str, set[int]]


def noting(seen: Seen, coordinator: int, call: Callable[[Any], Awaitable[Any]]) -> Any:
    """``call`` (an engine's report or lease), noting which runs it was asked about."""

    async def noted(item: Any) -> Any:
        seen[item.run_id].add(coordinator)
        return await call(item)

    return noted


@pytest.fixture
async def second(stack: Stack) -> AsyncIterator[tuple[str, Any, Engine]]:
    """A second coordinator on the stack's database and Redis: its own engine (its own
    group commits) and gRPC server."""
    engine = Engine(stack.pool, redis=stack.redis, redis_prefix=stack.prefix)
    server, port = await start_server(
        engine, address="127.0.0.1:0", token=TOKEN, heartbeat_write_seconds=0.0
    )
    try:
        yield f"127.0.0.1:{port}", server, engine
    finally:
        await server.stop(0)
        await engine.aclose()


async def test_each_runs_calls_reach_one_coordinator_and_go_on_through_the_other_when_it_goes(
    stack: Stack, second: tuple[str, Any, Engine]
) -> None:
    target, server, engine = second
    engines = [stack.engine, engine]
    seen: Seen = defaultdict(set)
    for i, e in enumerate(engines):
        e.report = noting(seen, i, e.report)
        e.lease = noting(seen, i, e.lease)
    await stack.deploy(chain("a", "b", "c", output={"n": "{{tasks.c.output.n}}"}))
    coordinators = f"{stack.grpc_target},{target}"
    # two workers, as two processes would be: a run's steps land on either
    stack.worker({"work": add_one}, coordinators=coordinators, coordinator_attempts=2)
    stack.worker({"work": add_one}, coordinators=coordinators, coordinator_attempts=2)

    started = [await stack.engine.start("chain-3", input={"n": i}) for i in range(16)]
    for i, s in enumerate(started):
        run = await stack.wait_run(s.run_id)
        assert run.status is RunStatus.SUCCEEDED and run.output == {"n": i + 3}
    for s in started:
        assert seen[s.run_id] == {route(s.run_id, 2)}, s.run_id
    assert {route(s.run_id, 2) for s in started} == {0, 1}  # both took a share

    # the second coordinator goes: its runs' calls go to the first
    await server.stop(0)
    seen.clear()
    later: list[Started] = []
    while sum(route(s.run_id, 2) == 1 for s in later) < 3:
        later.append(await stack.engine.start("chain-3", input={"n": len(later)}))
    for i, s in enumerate(later):
        run = await stack.wait_run(s.run_id, timeout=40)
        assert run.status is RunStatus.SUCCEEDED and run.output == {"n": i + 3}
        assert seen[s.run_id] == {0}
