"""Task logs end to end: what PYTHON nodes print and SDK handlers log through
ctx.logger is kept per attempt (a failed first attempt's too, bounded with a
marker line), answered by GET /v1/runs/{id}/logs to those who see payloads, and
sealed at rest when the run is."""

from __future__ import annotations

import base64
import os
from typing import Any

import pytest

import composer_repo as repo
from composer_core.statemachine import Event, Machine, Run
from composer_engine import AttemptLog, Report
from composer_engine.sealing import PREFIX, sealer_from
from composer_sdk import TaskContext, TaskFailed
from tests.integration.api.conftest import deploy, open_gateway
from tests.integration.e2e.conftest import Stack, open_stack
from tests.integration.e2e.test_runs import one_task

SECRET = "SECRET-LOG-4111"
KEYS = f"k1:{base64.b64encode(os.urandom(32)).decode()}"

SCRIPT = (
    "import sys\n"
    "def main(input):\n"
    "    print('total is', input['n'] * 2)\n"
    "    print('careful', file=sys.stderr)\n"
    "    print('a NUL: \\0.')\n"
    "    return input['n'] * 2\n"
)
NOISY = "def main(input):\n    for i in range(1500):\n        print('row', i)\n    return 'done'\n"


def logging_workflow(workflow_id: str = "logs") -> dict[str, Any]:
    """script (PYTHON, prints two lines) → charge (SDK, logs, fails its first
    attempt) → noisy (PYTHON, prints past the worker's bound)."""
    return {
        "id": workflow_id,
        "nodes": [
            {"id": "script", "type": "PYTHON", "spec": {"code": SCRIPT, "input": {"n": 21}}},
            {
                "id": "charge",
                "type": "TASK",
                "queue": "logging",
                "spec": {"card": "{{input.card}}"},
                "retry": {"max_attempts": 2, "initial_seconds": 0.1},
            },
            {"id": "noisy", "type": "PYTHON", "spec": {"code": NOISY}},
        ],
        "edges": [{"from": "script", "to": "charge"}, {"from": "charge", "to": "noisy"}],
    }


async def charge(ctx: TaskContext, input: dict[str, Any]) -> dict[str, Any]:
    ctx.logger.info("charging card %s, attempt %d", input["card"], ctx.attempt)
    if ctx.attempt == 0:
        ctx.logger.warning("the bank timed out")
        raise TaskFailed("bank timeout")
    return {"charged": True}


def messages(lines: list[str]) -> list[str]:
    """ctx.logger lines without their timestamp."""
    return [line.split(" ", 1)[1] for line in lines]


async def test_each_attempt_s_lines_are_kept_and_shown_to_who_sees_payloads(
    database_url: str, redis_url: str
) -> None:
    async with (
        open_stack(database_url, redis_url) as stack,
        open_gateway(database_url, redis_url, prefix=stack.prefix) as gw,
    ):
        await deploy(gw, logging_workflow())
        await stack.builtin_workers()
        stack.worker({"logging": charge})
        started = await gw.call(
            "POST",
            "/v1/runs",
            role="operator",
            json={"workflow_id": "logs", "input": {"card": "4242"}},
        )
        assert started.status == 201, started.body
        run_id = started.body["run_id"]
        assert (await stack.wait_run(run_id)).status.value == "SUCCEEDED"

        answer = await gw.call("GET", f"/v1/runs/{run_id}/logs", role="operator")

        assert answer.status == 200, answer.body
        assert answer.body["redacted"] is False
        logs = answer.body["logs"]
        assert [(e["node_id"], e["attempt"]) for e in logs] == [
            ("script", 0),
            ("charge", 0),
            ("charge", 1),
            ("noisy", 0),
        ]
        script, failed, succeeded, noisy = logs
        assert script["lines"] == ["total is 42", "careful", "a NUL: \ufffd."]
        assert messages(failed["lines"]) == [
            "INFO charging card 4242, attempt 0",
            "WARNING the bank timed out",
        ]
        assert messages(succeeded["lines"]) == ["INFO charging card 4242, attempt 1"]
        assert noisy["truncated"] == 500  # the worker keeps 1000 lines by default
        assert noisy["lines"][:2] == ["row 0", "row 1"]
        assert noisy["lines"][-2:] == ["row 999", "… 500 lines truncated"]
        assert all(e["truncated"] == 0 for e in (script, failed, succeeded))

        one = await gw.call(
            "GET", f"/v1/runs/{run_id}/logs", role="operator", params={"node": "charge"}
        )
        assert [(e["node_id"], e["attempt"]) for e in one.body["logs"]] == [
            ("charge", 0),
            ("charge", 1),
        ]

        # a viewer sees which attempts logged, not what: the workflow does not set
        # viewers_see_payloads
        viewed = await gw.call("GET", f"/v1/runs/{run_id}/logs", role="viewer")
        assert viewed.status == 200 and viewed.body["redacted"] is True
        assert [e["lines"] for e in viewed.body["logs"]] == [None] * 4

        missing = await gw.call(
            "GET", "/v1/runs/0190a000-0000-7000-8000-000000000000/logs", role="operator"
        )
        assert missing.status == 404


async def test_a_viewer_sees_the_lines_when_the_workflow_lets_it(
    database_url: str, redis_url: str
) -> None:
    async with (
        open_stack(database_url, redis_url) as stack,
        open_gateway(database_url, redis_url, prefix=stack.prefix) as gw,
    ):
        definition = {
            "id": "open-logs",
            "viewers_see_payloads": True,
            "nodes": [
                {"id": "script", "type": "PYTHON", "spec": {"code": SCRIPT, "input": {"n": 1}}}
            ],
        }
        await deploy(gw, definition)
        await stack.builtin_workers()
        started = await gw.call(
            "POST", "/v1/runs", role="operator", json={"workflow_id": "open-logs"}
        )
        run_id = started.body["run_id"]
        await stack.wait_run(run_id)

        viewed = await gw.call("GET", f"/v1/runs/{run_id}/logs", role="viewer")

        assert viewed.body["redacted"] is False
        assert viewed.body["logs"][0]["lines"] == ["total is 2", "careful", "a NUL: \ufffd."]


async def test_logs_are_sealed_at_rest_and_opened_on_read(
    database_url: str, redis_url: str
) -> None:
    async with (
        open_stack(database_url, redis_url, sealer=sealer_from(KEYS)) as stack,
        open_gateway(database_url, redis_url, prefix=stack.prefix, encryption_keys=KEYS) as gw,
    ):
        await deploy(gw, logging_workflow("sealed-logs"))
        await stack.builtin_workers()
        stack.worker({"logging": charge})
        started = await gw.call(
            "POST",
            "/v1/runs",
            role="operator",
            json={"workflow_id": "sealed-logs", "input": {"card": SECRET}},
        )
        run_id = started.body["run_id"]
        await stack.wait_run(run_id)

        async with stack.pool.acquire() as conn:
            raw = await conn.fetch(
                "SELECT lines, row_to_json(l)::text AS row FROM task_logs l WHERE run_id = $1",
                run_id,
            )
        assert len(raw) == 4
        assert all(r["lines"].startswith(PREFIX) for r in raw)
        assert not [r["row"] for r in raw if SECRET in r["row"] or "total is" in r["row"]]

        shown = await gw.call(
            "GET", f"/v1/runs/{run_id}/logs", role="operator", params={"node": "charge"}
        )
        assert (
            messages(shown.body["logs"][0]["lines"])[0] == f"INFO charging card {SECRET}, attempt 0"
        )

        async with stack.pool.acquire() as conn:
            stored = await repo.get_task_logs(conn, run_id, node_id="script")
        assert stored[0].lines.startswith(PREFIX)


async def test_only_an_applied_report_stores_its_lines_alone_or_in_a_batch(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch that fails as a whole is applied one report at a time: each applied
    report's lines are stored then too; a poisoned or stale report stores none."""
    await stack.deploy(one_task("l", queue="manual"))
    run_ids = [(await stack.engine.start("one-l")).run_id for _ in range(3)]
    tasks = [(await stack.tasks_of(r))["l"].task_id for r in run_ids]
    poisoned = tasks[1]
    apply = Machine.apply

    def apply_unless_poisoned(self: Machine, run: Run, event: Event) -> Any:
        if getattr(event, "task_id", None) == poisoned:
            raise ZeroDivisionError("poisoned event")
        return apply(self, run, event)

    monkeypatch.setattr(Machine, "apply", apply_unless_poisoned)

    def report(i: int, line: str) -> Report:
        return Report(
            run_ids[i],
            tasks[i],
            "l",
            0,
            None,
            completed=True,
            output={},
            log=AttemptLog((line,)),
        )

    answers = await stack.engine.report_many([report(i, f"run {i}") for i in range(3)])
    stale = await stack.engine.report_many([report(0, "a second report")])

    assert [a is True for a in answers] == [True, False, True]
    assert stale == [False]
    async with stack.pool.acquire() as conn:
        stored = [await repo.get_task_logs(conn, r) for r in run_ids]
    assert [[entry.lines for entry in logs] for logs in stored] == [["run 0"], [], ["run 2"]]
