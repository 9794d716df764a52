"""A worker given every coordinator (COMPOSER_COORDINATORS) sends each run's calls to
one of them, the same whichever worker asks, and to the next while it is away."""

from __future__ import annotations

from typing import Any, cast

import pytest

from composer_sdk import WorkerConfig
from composer_sdk._client import Capabilities, CoordinatorClient, Presence
from composer_sdk._handler import Outcome
from composer_sdk._routing import (
    DOWN_SECONDS,
    RunRoutedCoordinators,
    parse_coordinators,
    route,
)
from composer_sdk._worker import _coordinator_client
from composer_sdk.errors import CoordinatorUnavailable, SdkError

RUNS = [f"0190c0de-0000-7000-8000-{i:012x}" for i in range(200)]


class Coordinator:
    """One coordinator's client: notes the runs it was asked about; ``up`` False
    answers every call as a client does after its retries, unavailable."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.up = True
        self.runs: list[str] = []
        self.beats = 0
        self.closed = False

    def _call(self, run_id: str) -> None:
        if not self.up:
            raise CoordinatorUnavailable(f"{self.target} unavailable", code="UNAVAILABLE")
        self.runs.append(run_id)

    async def report(self, task_id: str, run_id: str, *args: Any, **kwargs: Any) -> bool:
        self._call(run_id)
        return True

    async def renew(self, task_id: str, run_id: str, *args: Any) -> bool:
        self._call(run_id)
        return True

    async def acquire(self, task_id: str, run_id: str, *args: Any, **kwargs: Any) -> None:
        self._call(run_id)

    async def capabilities(self, sdk: str, *, until: Any) -> Capabilities:
        self._call("")
        return Capabilities(1, 1, frozenset(), server_version=self.target)

    async def heartbeat(self, presence: Presence, *, timeout: float | None = None) -> bool:
        self._call("")
        self.beats += 1
        return True

    async def close(self) -> None:
        self.closed = True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def routed(*coordinators: Coordinator, clock: Clock | None = None) -> RunRoutedCoordinators:
    return RunRoutedCoordinators(
        [cast(CoordinatorClient, c) for c in coordinators], clock=clock or Clock()
    )


async def report(client: RunRoutedCoordinators, run_id: str) -> bool | None:
    outcome = Outcome("COMPLETED", output={})
    answer = await client.report("t", run_id, "a", 0, "w", "token", outcome, until=lambda: False)
    assert answer is None or isinstance(answer, bool)
    return answer


async def test_every_call_of_a_run_reaches_the_same_coordinator_whichever_worker_sends_it() -> None:
    a, b = Coordinator("a:1"), Coordinator("b:1")
    first, second = routed(a, b), routed(Coordinator("a:1"), Coordinator("b:1"))
    for run_id in RUNS:
        await report(first, run_id)
        await first.renew("t", run_id, 0, "w", 30.0, "token")
        await first.acquire("t", run_id, 0, "w", 30.0, claim="c", until=lambda: False)
    # a run's lease, renewal and report all went to one coordinator, and each takes
    # a share of the runs
    assert set(a.runs).isdisjoint(b.runs)
    assert sorted(a.runs + b.runs) == sorted(RUNS * 3)
    assert 60 <= len(set(a.runs)) <= 140
    for run_id in RUNS:
        assert run_id in [a, b][route(run_id, 2)].runs
    # another worker's client, given the same list, sends each run to the same one
    await report(second, RUNS[0])
    await report(second, RUNS[1])
    second_clients = cast(list[Coordinator], second._clients)
    assert [RUNS[0] in c.runs for c in second_clients] == [RUNS[0] in c.runs for c in (a, b)]


async def test_a_coordinator_away_sends_its_runs_to_the_next_until_it_is_back() -> None:
    clock = Clock()
    a, b = Coordinator("a:1"), Coordinator("b:1")
    client = routed(a, b, clock=clock)
    mine = next(r for r in RUNS if route(r, 2) == 0)
    a.up = False
    assert await report(client, mine) is True
    assert b.runs == [mine]
    # passed over while it is marked away: b is asked first, a is not tried
    a.up = True
    await report(client, mine)
    assert a.runs == [] and b.runs == [mine, mine]
    clock.now += DOWN_SECONDS + 0.1
    await report(client, mine)
    assert a.runs == [mine]


async def test_every_coordinator_away_is_the_error_of_the_call() -> None:
    a, b = Coordinator("a:1"), Coordinator("b:1")
    a.up = b.up = False
    with pytest.raises(CoordinatorUnavailable):
        await report(routed(a, b), RUNS[0])


async def test_capabilities_come_from_the_coordinators_that_answer_and_presence_from_one() -> None:
    a, b = Coordinator("a:1"), Coordinator("b:1")
    client = routed(a, b)
    a.up = False
    answer = await client.capabilities("composer-sdk test", until=lambda: False)
    assert answer is not None and answer.server_version == "b:1"
    presence = Presence("w", "host", ("q",), 1, 0, "test", "SERVING", 0.0)
    assert await client.heartbeat(presence)
    assert (a.beats, b.beats) == (0, 1)
    b.up = False
    with pytest.raises(CoordinatorUnavailable):
        await client.capabilities("composer-sdk test", until=lambda: False)
    await client.close()
    assert a.closed and b.closed


async def test_the_list_is_checked_and_builds_a_client_per_coordinator() -> None:
    assert parse_coordinators(" a:1, b:2 ") == ["a:1", "b:2"]
    with pytest.raises(SdkError, match="empty address"):
        parse_coordinators("a:1,,b:2")
    with pytest.raises(SdkError, match="names a coordinator twice"):
        parse_coordinators("a:1,a:1")
    client = _coordinator_client(WorkerConfig(coordinator="x:1", coordinators="a:1,b:2"))
    assert isinstance(client, RunRoutedCoordinators) and client.target == "a:1,b:2"
    alone = _coordinator_client(WorkerConfig(coordinator="x:1", coordinators=""))
    assert isinstance(alone, CoordinatorClient) and alone.target == "x:1"
    await client.close()
    await alone.close()
