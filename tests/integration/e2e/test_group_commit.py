"""Group commit through the real coordinator: batched calls, each item its own answer,
one bad event isolated, a fan-in applied in order (docs/architecture.md §3.1)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import grpc.aio
import pytest

from composer_core.model import RunStatus, TaskState
from composer_core.statemachine import Event, Machine, Run
from composer_engine import Report, Reporter
from composer_engine._reports import Reports
from composer_engine._shell import Shell
from composer_rpc.v1 import worker_pb2 as pb
from composer_rpc.v1.worker_pb2_grpc import WorkerServiceStub
from tests.integration.e2e.conftest import TOKEN, Stack
from tests.integration.e2e.test_internal_errors import alerts
from tests.integration.e2e.test_runs import one_task

MD = (("authorization", f"Bearer {TOKEN}"),)


async def leased_tasks(
    stack: Stack, stub: Any, run_ids: list[str], node: str
) -> list[tuple[str, str]]:
    """Lease each run's task ``node`` in one batched call; their task ids and lease tokens."""
    task_ids = [(await stack.tasks_of(r))[node].task_id for r in run_ids]
    reply = await stub.AcquireTaskLeases(
        pb.AcquireTaskLeasesRequest(
            items=[
                pb.AcquireTaskLeaseRequest(
                    run_id=r, task_id=t, attempt=0, owner="w", ttl_seconds=30
                )
                for r, t in zip(run_ids, task_ids, strict=True)
            ]
        ),
        metadata=MD,
    )
    assert [item.granted for item in reply.items] == [True] * len(run_ids)
    return [(t, item.lease_token) for t, item in zip(task_ids, reply.items, strict=True)]


async def test_a_batch_with_a_poisoned_event_applies_the_others(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    await stack.deploy(one_task("a", queue="manual"))
    run_ids = [(await stack.engine.start("one-a")).run_id for _ in range(3)]
    async with grpc.aio.insecure_channel(stack.grpc_target) as channel:
        stub = WorkerServiceStub(channel)
        leased = await leased_tasks(stack, stub, run_ids, "a")
        poisoned = leased[1][0]
        apply = Machine.apply

        def apply_unless_poisoned(self: Machine, run: Run, event: Event) -> Any:
            if getattr(event, "task_id", None) == poisoned:
                raise ZeroDivisionError("poisoned event")
            return apply(self, run, event)

        monkeypatch.setattr(Machine, "apply", apply_unless_poisoned)
        caplog.set_level(logging.INFO, logger="composer")
        reply = await stub.ReportTaskResults(
            pb.ReportTaskResultsRequest(
                items=[
                    pb.ReportTaskResultRequest(
                        run_id=r,
                        task_id=t,
                        node_id="a",
                        attempt=0,
                        owner="w",
                        lease_token=token,
                        status=pb.TASK_STATUS_COMPLETED,
                        output_json='{"ok": true}',
                    )
                    for r, (t, token) in zip(run_ids, leased, strict=True)
                ]
            ),
            metadata=MD,
        )

    first, bad, last = reply.items
    assert first.accepted and last.accepted
    assert not bad.accepted and bad.problem.code == "INTERNAL"
    assert "poisoned event" in bad.problem.message
    assert (await stack.wait_run(run_ids[0])).status is RunStatus.SUCCEEDED
    assert (await stack.wait_run(run_ids[2])).status is RunStatus.SUCCEEDED
    # the poisoned one changed nothing, and said so once
    assert (await stack.tasks_of(run_ids[1]))["a"].state is TaskState.RUNNING
    (alert,) = alerts(caplog)
    assert run_ids[1] in alert and "poisoned event" in alert


async def test_a_batched_item_that_is_malformed_is_refused_alone(stack: Stack) -> None:
    await stack.deploy(one_task("m", queue="manual"))
    run_id = (await stack.engine.start("one-m")).run_id
    async with grpc.aio.insecure_channel(stack.grpc_target) as channel:
        stub = WorkerServiceStub(channel)
        [(task_id, token)] = await leased_tasks(stack, stub, [run_id], "m")
        good = pb.ReportTaskResultRequest(
            run_id=run_id,
            task_id=task_id,
            node_id="m",
            attempt=0,
            owner="w",
            lease_token=token,
            status=pb.TASK_STATUS_COMPLETED,
            output_json="{}",
        )
        no_owner = pb.ReportTaskResultRequest(run_id=run_id, task_id=task_id, node_id="m")
        reply = await stub.ReportTaskResults(
            pb.ReportTaskResultsRequest(items=[no_owner, good]), metadata=MD
        )
    refused, accepted = reply.items
    assert refused.problem.code == "INVALID_ARGUMENT" and "owner" in refused.problem.message
    assert accepted.accepted and not accepted.HasField("problem")
    assert (await stack.wait_run(run_id)).status is RunStatus.SUCCEEDED


async def test_a_fan_in_of_reports_to_one_run_in_one_batch_applies_in_order(stack: Stack) -> None:
    branches = ["b0", "b1", "b2"]
    await stack.deploy(
        {
            "id": "fan-in",
            "nodes": [
                {"id": "fork", "type": "FORK"},
                *({"id": b, "type": "TASK", "queue": "manual", "spec": {}} for b in branches),
                {"id": "join", "type": "JOIN"},
            ],
            "edges": [
                *({"from": "fork", "to": b} for b in branches),
                *({"from": b, "to": "join"} for b in branches),
            ],
            "output": {"last": "{{tasks.b2.output.n}}"},
        }
    )
    run_id = (await stack.engine.start("fan-in")).run_id
    tasks = await stack.tasks_of(run_id)
    async with grpc.aio.insecure_channel(stack.grpc_target) as channel:
        stub = WorkerServiceStub(channel)
        tokens = {}
        for b in branches:
            [(task_id, tokens[b])] = await leased_tasks(stack, stub, [run_id], b)
            assert task_id == tasks[b].task_id
    reports = [
        Report(
            run_id,
            tasks[b].task_id,
            b,
            0,
            Reporter(tokens[b], "w"),
            completed=True,
            output={"n": i},
        )
        for i, b in enumerate(branches)
    ]
    # one group commit: the run is locked once and the three apply one after the other
    assert await stack.engine.report_many(reports) == [True, True, True]
    run = await stack.wait_run(run_id)
    assert run.status is RunStatus.SUCCEEDED and run.output == {"last": 2}
    after = await stack.tasks_of(run_id)
    assert after["join"].state is TaskState.COMPLETED
    # a repeated report of the batch is stale now: acknowledged, nothing changed
    assert await stack.engine.report_many(reports[:1]) == [False]


#: A TASK node "a" whose output feeds a FORK into three branches with a quadratic
#: template over it: ``{"l": list(range(60))}`` is about 67,500 of the event's 100,000
#: steps per branch, far past the event loop's share; ``{"l": [1, 2]}`` is nothing.
QUADRATIC = "{{tasks.a.output.l.map(x, tasks.a.output.l.filter(y, y == x).size())}}"
BRANCHES = ["b0", "b1", "b2"]
HEAVY, LIGHT = {"l": list(range(60))}, {"l": [1, 2]}


async def then_fork(stack: Stack, runs: int) -> tuple[list[str], list[tuple[str, str]]]:
    """``runs`` runs of a → FORK → quadratic branches, with "a" leased: run ids, and
    the task ids and lease tokens of their "a"."""
    await stack.deploy(
        {
            "id": "then-fork",
            "nodes": [
                {"id": "a", "type": "TASK", "queue": "manual", "spec": {}},
                {"id": "fork", "type": "FORK"},
                *(
                    {"id": b, "type": "TASK", "queue": "manual", "spec": {"n": QUADRATIC}}
                    for b in BRANCHES
                ),
            ],
            "edges": [{"from": "a", "to": "fork"}, *({"from": "fork", "to": b} for b in BRANCHES)],
        }
    )
    run_ids = [(await stack.engine.start("then-fork")).run_id for _ in range(runs)]
    async with grpc.aio.insecure_channel(stack.grpc_target) as channel:
        leased = await leased_tasks(stack, WorkerServiceStub(channel), run_ids, "a")
    return run_ids, leased


def completed(run_id: str, leased: tuple[str, str], output: dict[str, Any]) -> Report:
    task_id, token = leased
    return Report(run_id, task_id, "a", 0, Reporter(token, "w"), completed=True, output=output)


async def test_a_report_too_heavy_for_the_loop_leaves_the_batch_and_is_applied_alone(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The group commit decides its reports on the event loop; one whose templates need
    more than their share of it (docs/architecture.md §8) is applied after the batch, on
    its own and decided on the engine's decision thread, so the batch never waits for it
    and the loop goes on serving. Its outcome is what it would have been anyway."""
    run_ids, leased = await then_fork(stack, 3)
    alone: list[str] = []
    off_loop: list[str] = []
    report_alone, decide_off_loop = Reports._report_alone, Shell._off_loop

    async def recorded_alone(self: Reports, r: Report) -> Any:
        alone.append(r.run_id)
        return await report_alone(self, r)

    async def recorded_off_loop(self: Shell, machine: Machine, run: Run, event: Event) -> Any:
        off_loop.append(run.run_id)
        return await decide_off_loop(self, machine, run, event)

    monkeypatch.setattr(Reports, "_report_alone", recorded_alone)
    monkeypatch.setattr(Shell, "_off_loop", recorded_off_loop)
    heavy = run_ids[1]
    reports = [
        completed(r, lease, HEAVY if r == heavy else LIGHT)
        for r, lease in zip(run_ids, leased, strict=True)
    ]
    assert await stack.engine.report_many(reports) == [True, True, True]
    assert alone == [heavy] and off_loop == [heavy]
    for run_id in run_ids:
        tasks = await stack.tasks_of(run_id)
        states = [tasks[b].state for b in BRANCHES]
        if run_id == heavy:
            # one branch fits in the event's budget, the others fail naming it
            assert states.count(TaskState.FAILED) == 2, states
            failed = [t for t in tasks.values() if t.state is TaskState.FAILED]
            assert all("template exceeded its budget" in (t.error or "") for t in failed)
        else:
            assert TaskState.FAILED not in states, states


async def test_reports_applied_alone_do_not_hold_the_batches_they_left(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The coordinator's reports go through batches, two in flight at most
    (COMPOSER_BATCHES_IN_FLIGHT). A report that left its batch is applied by its own
    caller, so the batch's slot is free while it is decided: two heavy reports being
    decided never hold up a light one."""
    run_ids, leased = await then_fork(stack, 3)
    first, second, light = run_ids
    entered = {first: asyncio.Event(), second: asyncio.Event()}
    release = asyncio.Event()
    report_alone = Reports._report_alone

    async def held_alone(self: Reports, r: Report) -> Any:
        if r.run_id in entered:  # decided for as long as the test says
            entered[r.run_id].set()
            await release.wait()
        return await report_alone(self, r)

    monkeypatch.setattr(Reports, "_report_alone", held_alone)
    heavy = []
    try:
        for run_id, lease in ((first, leased[0]), (second, leased[1])):
            heavy.append(asyncio.create_task(stack.engine.report(completed(run_id, lease, HEAVY))))
            await asyncio.wait_for(entered[run_id].wait(), 10)  # one batch after the other
        assert await asyncio.wait_for(stack.engine.report(completed(light, leased[2], LIGHT)), 10)
    finally:
        release.set()
        results = await asyncio.gather(*heavy, return_exceptions=True)
    assert results == [True, True]
    assert TaskState.FAILED not in [(await stack.tasks_of(light))[b].state for b in BRANCHES]
