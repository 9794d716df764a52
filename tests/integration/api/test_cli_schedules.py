"""`composer schedules …` and `composer runs --schedule` against the gateway and the
stack with the timer's schedule firer (issue 29)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from tests.integration.api.conftest import TOKENS, Live, deploy, waiting_workflow
from tests.integration.api.test_cli import composer
from tests.integration.waits import until


async def test_schedules_commands(scheduled: Live, tmp_path: Path) -> None:
    gw = scheduled.gateway
    workflow_id = f"cli-sched-{uuid.uuid4().hex[:6]}"
    await deploy(gw, waiting_workflow(workflow_id))
    sid = f"nightly-{uuid.uuid4().hex[:6]}"
    operator = TOKENS["operator"]

    created = await composer(
        scheduled,
        "schedules",
        "create",
        "--workflow",
        workflow_id,
        "--id",
        sid,
        "--cron",
        "0 2 * * *",
        "--timezone",
        "Europe/Berlin",
        "--input",
        '{"region": "eu"}',
        token=operator,
    )
    assert created.exit_code == 0, created.output
    assert f"schedule {sid} created: starts {workflow_id}, cron 0 2 * * * (Europe/Berlin)" in (
        created.output
    )
    assert created.output.count("  next ") == 5

    # a file, YAML, with a flag over one of its fields
    from_file = tmp_path / "hourly.yaml"
    from_file.write_text(
        f"id: {sid}-hourly\nworkflow_id: {workflow_id}\ncron: '0 * * * *'\noverlap: allow_all\n"
    )
    filed = await composer(
        scheduled, "schedules", "create", "-f", str(from_file), "--paused", token=operator
    )
    assert filed.exit_code == 0, filed.output
    assert f"schedule {sid}-hourly created" in filed.output and "(paused)" in filed.output

    bad = await composer(
        scheduled,
        "schedules",
        "create",
        "--workflow",
        workflow_id,
        "--id",
        f"{sid}-bad",
        "--cron",
        "0 2 * * *",
        "--timezone",
        "Nowhere/Land",
        token=operator,
    )
    assert bad.exit_code == 1 and "timezone" in bad.output and "HTTP 400" in bad.output
    taken = await composer(
        scheduled,
        "schedules",
        "create",
        "--workflow",
        workflow_id,
        "--id",
        sid,
        "--every",
        "60",
        token=operator,
    )
    assert taken.exit_code == 1 and "HTTP 409" in taken.output

    listed = await composer(scheduled, "schedules", "list", "--workflow", workflow_id, columns=200)
    assert listed.exit_code == 0, listed.output
    row = next(line for line in listed.output.splitlines() if line.startswith(sid + " "))
    assert workflow_id in row and "cron 0 2 * * * (Europe/Berlin)" in row
    hourly = next(line for line in listed.output.splitlines() if line.startswith(sid + "-hourly"))
    assert "paused" in hourly

    triggered = await composer(scheduled, "schedules", "trigger", sid, token=operator)
    assert triggered.exit_code == 0, triggered.output
    run_id = triggered.output.split()[1]
    assert f"run {run_id} started by schedule {sid}" in triggered.output
    held = await composer(scheduled, "schedules", "trigger", sid, token=operator)
    assert held.exit_code == 1 and f"not started: run {run_id} still goes" in held.output

    runs = await composer(scheduled, "runs", "--schedule", sid, columns=200)
    assert runs.exit_code == 0, runs.output
    assert run_id in runs.output and workflow_id in runs.output
    got_run = await composer(scheduled, "get", run_id)
    assert f"scheduled by {sid} for " in got_run.output, got_run.output

    shown = await composer(scheduled, "schedules", "get", sid, columns=200)
    assert shown.exit_code == 0, shown.output
    text = shown.output
    assert f"schedule {sid}  active  starts {workflow_id}" in text
    next_lines = [line for line in text.splitlines() if "02:00:00 Europe/Berlin" in line]
    assert len(next_lines) == 5, text
    assert run_id in text.split("last runs")[1]  # its last run, listed
    events = text.split("events (newest first)")[1]
    assert "skipped" in events and "triggered" in events and "created" in events

    paused = await composer(scheduled, "schedules", "pause", sid, token=operator)
    assert paused.exit_code == 0 and f"schedule {sid} paused" in paused.output
    viewer = await composer(scheduled, "schedules", "resume", sid, token=TOKENS["viewer"])
    assert viewer.exit_code == 1 and "not allowed" in viewer.output
    resumed = await composer(scheduled, "schedules", "resume", sid, token=operator)
    assert resumed.exit_code == 0 and f"schedule {sid} resumed: next " in resumed.output

    backfilled = await composer(
        scheduled,
        "schedules",
        "backfill",
        f"{sid}-hourly",
        "--start",
        "2026-01-01T00:00:00Z",
        "--end",
        "2026-01-01T02:00:00Z",
        token=operator,
    )
    assert backfilled.exit_code == 0, backfilled.output
    assert "3 fire time(s) from 2026-01-01 00:00:00 UTC to 2026-01-01 02:00:00 UTC" in (
        backfilled.output
    )

    async def backfilled_runs() -> bool:
        listing = await composer(
            scheduled, "runs", "--schedule", f"{sid}-hourly", "--json", token=operator
        )
        return len(json.loads(listing.output)["runs"]) == 3

    await until(backfilled_runs, 20.0, "three backfilled runs")
    progress = await composer(scheduled, "schedules", "get", f"{sid}-hourly", columns=200)
    assert "done: 3 started, 0 skipped of 3" in progress.output, progress.output

    deleted = await composer(scheduled, "schedules", "delete", sid, token=operator)
    assert deleted.exit_code == 0 and f"schedule {sid} deleted" in deleted.output
    gone = await composer(scheduled, "schedules", "get", sid)
    assert gone.exit_code == 1 and "HTTP 404" in gone.output
