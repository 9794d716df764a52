"""Schedules through the REST API (issue 29): create, read, pause, resume, trigger,
backfill and delete, the runs they start, and who may do what — against the real
gateway, engine, PostgreSQL and Redis, with the timer service's schedule firer
running (the ``scheduled`` fixture), so fires and backfills happen as they would."""

from __future__ import annotations

import datetime as dt
import itertools
import uuid
from typing import Any
from zoneinfo import ZoneInfo

from tests.integration.api.conftest import Gateway, Live, deploy, waiting_workflow
from tests.integration.waits import until


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)


async def make(gw: Gateway, workflow_id: str, **fields: Any) -> dict[str, Any]:
    body = {"workflow_id": workflow_id, "id": unique("sched"), **fields}
    answer = await gw.call("POST", "/v1/schedules", role="operator", json=body)
    assert answer.status == 201, answer.body
    created: dict[str, Any] = answer.body
    return created


async def schedule_runs(gw: Gateway, schedule_id: str, **params: str) -> list[dict[str, Any]]:
    answer = await gw.call(
        "GET", "/v1/runs", role="viewer", params={"schedule_id": schedule_id, **params}
    )
    assert answer.status == 200, answer.body
    runs: list[dict[str, Any]] = answer.body["runs"]
    return runs


async def test_create_shows_the_next_five_fires_in_the_schedules_time_zone(
    scheduled: Live,
) -> None:
    gw = scheduled.gateway
    workflow_id = unique("nightly-wf")
    await deploy(gw, waiting_workflow(workflow_id))
    before = dt.datetime.now(dt.UTC)
    created = await make(
        gw, workflow_id, cron="0 2 * * *", timezone="Europe/Berlin", input={"region": "eu"}
    )
    assert created["source"] == "api" and created["paused"] is False
    assert created["created_by"].startswith("operator-")  # the token's name
    assert created["input"] == {"region": "eu"} and created["overlap"] == "skip"
    fires = [at(f) for f in created["next_fires"]]
    assert len(fires) == 5
    berlin = [f.astimezone(ZoneInfo("Europe/Berlin")) for f in fires]
    assert all((b.hour, b.minute, b.second) == (2, 0, 0) for b in berlin), berlin
    assert fires == sorted(fires) and fires[0] > before
    assert all((b - a) <= dt.timedelta(hours=25) for a, b in itertools.pairwise(fires))
    assert at(created["next_fire_at"]) == fires[0]
    assert created["fired"] == created["skipped"] == created["missed"] == 0
    assert [e["kind"] for e in created["events"]] == ["created"]

    shown = await gw.call("GET", f"/v1/schedules/{created['id']}", role="viewer")
    assert shown.status == 200
    assert shown.body["next_fires"] == created["next_fires"]
    listed = await gw.call(
        "GET", "/v1/schedules", role="viewer", params={"workflow_id": workflow_id}
    )
    [row] = listed.body["schedules"]
    assert row["id"] == created["id"] and row["next_fire_at"] == created["next_fire_at"]
    assert row["next_fires"] is None and row["events"] is None  # the listing stays small


async def test_a_bad_schedule_answers_400_naming_its_field_and_a_taken_id_409(
    scheduled: Live,
) -> None:
    gw = scheduled.gateway
    workflow_id = unique("bad-wf")
    await deploy(gw, waiting_workflow(workflow_id))
    for fields, named in (
        ({"cron": "0 25 * * *"}, "cron"),
        ({"cron": "0 2 * * *", "timezone": "Mars/Olympus"}, "timezone"),
        ({"cron": "0 2 * * *", "every_seconds": 60}, "exactly one of cron and every_seconds"),
        ({"every_seconds": 0}, "every_seconds"),
        ({"cron": "* * * * *", "overlap": "sometimes"}, "overlap"),
        ({"cron": "* * * * *", "id": "no spaces"}, "id"),
    ):
        body = {"workflow_id": workflow_id, "id": unique("bad"), **fields}
        answer = await gw.call("POST", "/v1/schedules", role="operator", json=body)
        assert answer.status == 400, (fields, answer.body)
        assert named in answer.body["detail"], answer.body
        if named != "exactly one of cron and every_seconds":
            assert named in [e["path"] for e in answer.body["errors"]], answer.body

    made = await make(gw, workflow_id, every_seconds=3600)
    again = await gw.call(
        "POST",
        "/v1/schedules",
        role="operator",
        json={"workflow_id": workflow_id, "id": made["id"], "cron": "0 3 * * *"},
    )
    assert again.status == 409, again.body
    assert made["id"] in again.body["detail"]

    nowhere = await gw.call(
        "POST",
        "/v1/schedules",
        role="operator",
        json={"workflow_id": unique("missing"), "id": unique("s"), "cron": "0 2 * * *"},
    )
    assert nowhere.status == 404, nowhere.body
    missing = await gw.call("GET", "/v1/schedules/no-such-schedule", role="viewer")
    assert missing.status == 404


async def test_pause_and_resume(scheduled: Live) -> None:
    gw = scheduled.gateway
    workflow_id = unique("pause-wf")
    await deploy(gw, waiting_workflow(workflow_id))
    made = await make(gw, workflow_id, cron="*/5 * * * *")
    paused = await gw.call("POST", f"/v1/schedules/{made['id']}/pause", role="operator")
    assert paused.status == 200, paused.body
    assert paused.body["paused"] is True
    assert paused.body["next_fires"] == [] and paused.body["next_fire_at"] is None
    again = await gw.call("POST", f"/v1/schedules/{made['id']}/pause", role="operator")
    assert again.body["paused"] is True
    assert [e["kind"] for e in again.body["events"]] == ["paused", "created"]  # once
    resumed = await gw.call("POST", f"/v1/schedules/{made['id']}/resume", role="operator")
    assert resumed.body["paused"] is False and len(resumed.body["next_fires"]) == 5
    assert all(at(f).minute % 5 == 0 for f in resumed.body["next_fires"])
    event = resumed.body["events"][0]
    assert event["kind"] == "resumed" and event["actor"] == paused.body["events"][0]["actor"]
    assert event["actor"] and event["actor"].startswith("operator-")


async def test_trigger_starts_a_run_marked_with_its_schedule(scheduled: Live) -> None:
    gw = scheduled.gateway
    workflow_id = unique("trigger-wf")
    await deploy(gw, waiting_workflow(workflow_id))
    made = await make(gw, workflow_id, cron="0 2 1 1 *", input={"n": 1})  # fires once a year
    sid = made["id"]
    triggered = await gw.call("POST", f"/v1/schedules/{sid}/trigger", role="operator")
    assert triggered.status == 200, triggered.body
    assert triggered.body["started"] is True
    run_id = triggered.body["run_id"]

    run = await gw.call("GET", f"/v1/runs/{run_id}", role="operator")
    assert run.body["schedule_id"] == sid
    assert run.body["scheduled_for"] is not None
    assert run.body["started_by"] == f"schedule {sid}"
    assert run.body["input"] == {"n": 1}
    listed = await schedule_runs(gw, sid)
    assert [(r["run_id"], r["schedule_id"]) for r in listed] == [(run_id, sid)]
    assert listed[0]["scheduled_for"] == run.body["scheduled_for"]
    assert [r["run_id"] for r in await schedule_runs(gw, sid, status="RUNNING")] == [run_id]
    assert await schedule_runs(gw, sid, status="SUCCEEDED") == []
    mixed = await gw.call(
        "GET", "/v1/runs", role="viewer", params={"schedule_id": sid, "workflow_id": workflow_id}
    )
    assert mixed.status == 400 and "schedule_id" in mixed.body["detail"]

    # overlap skip (the schedule's): its run still waits, so a trigger starts nothing
    held = await gw.call("POST", f"/v1/schedules/{sid}/trigger", role="operator")
    assert held.body == {
        "schedule_id": sid,
        "started": False,
        "run_id": None,
        "detail": held.body["detail"],
    }
    assert run_id in held.body["detail"]
    # allow_all for this one, sent twice with one Idempotency-Key: one more run
    key = {"Idempotency-Key": unique("trigger")}
    first = await gw.call(
        "POST",
        f"/v1/schedules/{sid}/trigger",
        role="operator",
        json={"overlap": "allow_all"},
        headers=key,
    )
    repeat = await gw.call(
        "POST",
        f"/v1/schedules/{sid}/trigger",
        role="operator",
        json={"overlap": "allow_all"},
        headers=key,
    )
    assert first.body["started"] and repeat.body["run_id"] == first.body["run_id"] != run_id
    assert len(await schedule_runs(gw, sid)) == 2

    view = (await gw.call("GET", f"/v1/schedules/{sid}", role="viewer")).body
    kinds = [e["kind"] for e in view["events"]]
    assert kinds.count("triggered") >= 2 and "skipped" in kinds
    skipped = next(e for e in view["events"] if e["kind"] == "skipped")
    assert run_id in skipped["detail"]
    assert view["last_run_id"] == first.body["run_id"]


async def test_the_timer_fires_a_schedule_and_delete_removes_it(scheduled: Live) -> None:
    gw = scheduled.gateway
    workflow_id = unique("every-wf")
    await deploy(gw, waiting_workflow(workflow_id))
    made = await make(gw, workflow_id, every_seconds=1, overlap="allow_all")
    sid = made["id"]

    async def two_runs() -> bool:
        return len(await schedule_runs(gw, sid)) >= 2

    await until(two_runs, 20.0, "two fires of an every-second schedule")
    runs = await schedule_runs(gw, sid)
    fired_for = []
    for summary in runs:
        run = (await gw.call("GET", f"/v1/runs/{summary['run_id']}")).body
        assert run["schedule_id"] == sid and run["workflow_id"] == workflow_id
        fired_for.append(at(run["scheduled_for"]))
    assert len(set(fired_for)) == len(fired_for)
    assert all(f.microsecond == 0 for f in fired_for)  # interval fires fall on whole seconds

    view = (await gw.call("GET", f"/v1/schedules/{sid}", role="viewer")).body
    assert view["fired"] >= 1 and view["last_run_id"] is not None
    assert "fired" in [e["kind"] for e in view["events"]]

    deleted = await gw.call("DELETE", f"/v1/schedules/{sid}", role="operator")
    assert deleted.status == 200 and deleted.body == {"id": sid, "deleted": True}
    assert (await gw.call("GET", f"/v1/schedules/{sid}")).status == 404
    assert (await gw.call("DELETE", f"/v1/schedules/{sid}", role="operator")).status == 404
    assert len(await schedule_runs(gw, sid)) >= 2  # its runs stay


def no_such_backfill() -> str:
    return "019ad000-0000-7000-8000-000000000000"


async def test_backfill_answers_202_and_starts_each_past_fire_time(scheduled: Live) -> None:
    gw = scheduled.gateway
    workflow_id = unique("backfill-wf")
    await deploy(gw, waiting_workflow(workflow_id))
    made = await make(gw, workflow_id, cron="0 * * * *", paused=True)  # hourly, never fires
    sid = made["id"]
    bad = await gw.call(
        "POST",
        f"/v1/schedules/{sid}/backfill",
        role="operator",
        json={"start": "2026-01-01T03:00:00Z", "end": "2026-01-01T00:00:00Z"},
    )
    assert bad.status == 400 and "before start" in bad.body["detail"]
    naive = await gw.call(
        "POST",
        f"/v1/schedules/{sid}/backfill",
        role="operator",
        json={"start": "2026-01-01T00:00:00", "end": "2026-01-01T03:00:00Z"},
    )
    assert naive.status == 400 and "time zone" in naive.body["detail"]

    answer = await gw.call(
        "POST",
        f"/v1/schedules/{sid}/backfill",
        role="operator",
        json={"start": "2026-01-01T00:00:00Z", "end": "2026-01-01T03:00:00Z"},
    )
    assert answer.status == 202, answer.body
    assert answer.body["total"] == 4 and answer.body["overlap"] == "allow_all"
    backfill_id = answer.body["id"]

    progress = answer.headers["Location"]
    assert progress == f"/v1/schedules/{sid}/backfills/{backfill_id}"

    async def done() -> bool:
        mine = (await gw.call("GET", progress, role="viewer")).body
        return bool(mine["done"])

    await until(done, 20.0, "the backfill finishing")
    missing = await gw.call("GET", f"/v1/schedules/{sid}/backfills/{no_such_backfill()}")
    assert missing.status == 404 and backfill_id not in missing.body["detail"]
    runs = await schedule_runs(gw, sid)
    assert len(runs) == 4
    fired_for = sorted(
        [at((await gw.call("GET", f"/v1/runs/{r['run_id']}")).body["scheduled_for"]) for r in runs]
    )
    assert fired_for == [dt.datetime(2026, 1, 1, h, tzinfo=dt.UTC) for h in range(4)]
    view = (await gw.call("GET", f"/v1/schedules/{sid}", role="viewer")).body
    [mine] = view["backfills"]
    assert mine["started"] == 4 and mine["finished_at"] is not None
    assert "backfill" in [e["kind"] for e in view["events"]]

    # the same range again: each fire time has its run, none starts twice
    again = await gw.call(
        "POST",
        f"/v1/schedules/{sid}/backfill",
        role="operator",
        json={"start": "2026-01-01T00:00:00Z", "end": "2026-01-01T03:00:00Z"},
    )
    assert again.status == 202

    async def both_done() -> bool:
        view = (await gw.call("GET", f"/v1/schedules/{sid}", role="viewer")).body
        return all(b["done"] for b in view["backfills"]) and len(view["backfills"]) == 2

    await until(both_done, 20.0, "the second backfill finishing")
    assert len(await schedule_runs(gw, sid)) == 4


async def test_a_viewer_reads_schedules_but_changes_none(scheduled: Live) -> None:
    gw = scheduled.gateway
    workflow_id = unique("viewer-wf")
    await deploy(gw, waiting_workflow(workflow_id))
    made = await make(gw, workflow_id, cron="0 2 * * *", input={"secretish": "x"})
    sid = made["id"]
    listed = await gw.call(
        "GET", "/v1/schedules", role="viewer", params={"workflow_id": workflow_id}
    )
    [row] = listed.body["schedules"]
    assert row["input"] is None and row["redacted"] is True  # as a run's input is
    shown = await gw.call("GET", f"/v1/schedules/{sid}", role="viewer")
    assert shown.status == 200 and shown.body["input"] is None and shown.body["redacted"]
    assert len(shown.body["next_fires"]) == 5

    for method, path, body in (
        (
            "POST",
            "/v1/schedules",
            {"workflow_id": workflow_id, "id": unique("v"), "cron": "0 2 * * *"},
        ),
        ("POST", f"/v1/schedules/{sid}/pause", None),
        ("POST", f"/v1/schedules/{sid}/resume", None),
        ("POST", f"/v1/schedules/{sid}/trigger", None),
        (
            "POST",
            f"/v1/schedules/{sid}/backfill",
            {"start": "2026-01-01T00:00:00Z", "end": "2026-01-01T01:00:00Z"},
        ),
        ("DELETE", f"/v1/schedules/{sid}", None),
    ):
        refused = await gw.call(method, path, role="viewer", json=body)
        assert refused.status == 403, (path, refused.body)
    after = (await gw.call("GET", f"/v1/schedules/{sid}", role="operator")).body
    assert after["paused"] is False and after["backfills"] == []
    assert [e["kind"] for e in after["events"]] == ["created"]
    assert after["input"] == {"secretish": "x"} and after["redacted"] is False

    # a workflow that shows viewers its payloads shows them its schedules' input too
    open_id = unique("open-wf")
    await deploy(gw, {**waiting_workflow(open_id), "viewers_see_payloads": True})
    opened = await make(gw, open_id, cron="0 2 * * *", input={"k": 1})
    seen = await gw.call("GET", f"/v1/schedules/{opened['id']}", role="viewer")
    assert seen.body["input"] == {"k": 1} and seen.body["redacted"] is False


async def test_a_definitions_schedule_is_listed_and_not_deleted_through_the_api(
    scheduled: Live,
) -> None:
    gw = scheduled.gateway
    workflow_id = unique("defined-wf")
    sid = unique("defined")
    await deploy(
        gw,
        {
            **waiting_workflow(workflow_id),
            "schedules": [{"id": sid, "cron": "30 6 * * 1-5", "timezone": "America/New_York"}],
        },
    )
    shown = await gw.call("GET", f"/v1/schedules/{sid}", role="viewer")
    assert shown.status == 200, shown.body
    assert shown.body["source"] == "definition" and shown.body["created_by"] is None
    assert shown.body["workflow_id"] == workflow_id
    local = [at(f).astimezone(ZoneInfo("America/New_York")) for f in shown.body["next_fires"]]
    assert all((t.hour, t.minute) == (6, 30) and t.isoweekday() <= 5 for t in local)
    refused = await gw.call("DELETE", f"/v1/schedules/{sid}", role="operator")
    assert refused.status == 409 and "definition" in refused.body["detail"]


async def test_a_schedule_whose_input_fails_the_input_schema_is_refused_before_it_fires(
    scheduled: Live,
) -> None:
    """Every fire of such a schedule would be refused: the definition that carries it
    and the POST that makes it answer at once (422, 400), naming each problem's path."""
    gw = scheduled.gateway
    workflow_id = unique("typed-wf")
    schema = {
        "type": "object",
        "properties": {"region": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["region"],
    }
    bad = {**waiting_workflow(workflow_id), "input_schema": schema}
    bad["schedules"] = [{"id": unique("typed"), "cron": "0 2 * * *", "input": {"days": "7"}}]
    refused = await gw.call("POST", "/v1/workflows", json=bad, params={"deploy": "true"})
    assert refused.status == 422, refused.body
    problems = refused.body["problems"]
    assert [p["path"] for p in problems] == ["schedules[0].input", "schedules[0].input.days"]
    assert "'region' is a required property" in problems[0]["message"], problems

    await deploy(gw, {**waiting_workflow(workflow_id), "input_schema": schema})
    answer = await gw.call(
        "POST",
        "/v1/schedules",
        role="operator",
        json={"workflow_id": workflow_id, "id": unique("s"), "cron": "0 2 * * *", "input": {}},
    )
    assert answer.status == 400, answer.body
    assert answer.body["type"].endswith("input-invalid"), answer.body
    assert [p["path"] for p in answer.body["problems"]] == ["$"], answer.body
    listed = await gw.call("GET", "/v1/schedules", params={"workflow_id": workflow_id})
    assert listed.body["schedules"] == []  # nothing was stored

    made = await make(gw, workflow_id, cron="0 2 * * *", input={"region": "eu", "days": 7})
    assert made["input"] == {"region": "eu", "days": 7}
