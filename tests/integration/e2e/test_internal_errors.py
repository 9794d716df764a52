"""A bug answers INTERNAL once and says so in one ALERT line: it is never retried
as if the database were down (which answered UNAVAILABLE and made the SDK retry
forever)."""

from __future__ import annotations

import logging
from typing import Any

import grpc.aio
import pytest

from composer_common.logs import ALERT
from composer_core.model import TaskState
from composer_core.statemachine import Event, Machine, Run
from composer_engine import Internal
from composer_engine.errors import StaleSnapshot
from composer_rpc.v1.worker_pb2_grpc import WorkerServiceStub
from tests.integration.e2e.conftest import Stack
from tests.integration.e2e.test_runs import RawWorker, one_task


def alerts(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == ALERT]


async def test_an_exception_in_the_machine_is_one_internal_answer_and_one_alert(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    await stack.deploy(one_task("a", queue="manual"))
    started = await stack.engine.start("one-a", input={"n": 1})
    task = (await stack.tasks_of(started.run_id))["a"]
    calls: list[Event] = []

    def poisoned(self: Machine, run: Run, event: Event) -> Any:
        calls.append(event)
        raise ZeroDivisionError("poisoned machine")

    monkeypatch.setattr(Machine, "apply", poisoned)
    caplog.set_level(logging.INFO, logger="composer")
    async with grpc.aio.insecure_channel(stack.grpc_target) as channel:
        raw = RawWorker(WorkerServiceStub(channel), started.run_id, task.task_id)
        assert (await raw.lease("A")).granted
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await raw.report("A", output='{"ok": true}')

    assert failed.value.code() is grpc.StatusCode.INTERNAL
    assert "poisoned machine" in (failed.value.details() or "")
    # Decided twice, never more: once in its group commit, which then applies each of
    # its reports on its own to isolate the bad one, and once on its own. A bug is
    # not retried.
    assert len(calls) == 2
    (alert,) = alerts(caplog)
    assert started.run_id in alert and "NodeCompleted" in alert and "poisoned machine" in alert
    # Nothing was written: the attempt is still the worker's.
    assert (await stack.tasks_of(started.run_id))["a"].state is TaskState.RUNNING


async def test_a_stale_snapshot_is_retried_once_then_internal(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    await stack.deploy(one_task("b", queue="manual"))
    started = await stack.engine.start("one-b", input={})
    persisted: list[int] = []

    async def stale(*args: Any, **kwargs: Any) -> Any:
        persisted.append(len(args[3]))  # the actions
        raise StaleSnapshot("the task row moved under the run lock")

    monkeypatch.setattr("composer_engine._shell.persist", stale)
    caplog.set_level(logging.INFO, logger="composer")

    with pytest.raises(Internal, match="stale snapshot twice"):
        await stack.engine.cancel(started.run_id, "stop")

    assert persisted == [2, 2]  # CancelTasks + FinishRun, applied twice, not forever
    (alert,) = alerts(caplog)
    assert "RunCancelled" in alert and "CancelTasks" in alert and "FinishRun" in alert


async def test_the_lease_answer_carries_the_nodes_max_attempts(stack: Stack) -> None:
    await stack.deploy(one_task("c", queue="manual", retry={"max_attempts": 4}))
    started = await stack.engine.start("one-c", input={})
    task = (await stack.tasks_of(started.run_id))["c"]
    async with grpc.aio.insecure_channel(stack.grpc_target) as channel:
        lease = await RawWorker(WorkerServiceStub(channel), started.run_id, task.task_id).lease("A")
    assert lease.granted and lease.max_attempts == 4
