"""The `composer` CLI against a running gateway and stack: the README's walk-through.

The CLI is synchronous (httpx), the gateway runs in the test's event loop, so
each command runs in a thread through tests.unit.cli.runner.invoke.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from aiohttp import web

import composer_repo as repo
from composer_sdk import PermanentError, TaskContext, TaskFailed
from composer_sdk import _worker as sdk_worker
from tests.integration.api.conftest import TOKENS, Live
from tests.unit.cli.runner import Result, invoke

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


async def composer(
    live: Live | None,
    *args: str,
    token: str | None = TOKENS["admin"],
    url: str | None = None,
    columns: int | None = None,
) -> Result:
    env = {
        "COMPOSER_API_URL": url or (live.gateway.url if live else "http://127.0.0.1:9"),
        "COMPOSER_API_TOKEN": token or "",
    }
    if columns is not None:
        env["COLUMNS"] = str(columns)
    return await asyncio.to_thread(invoke, list(args), env)


@pytest.fixture
async def shop() -> AsyncIterator[str]:
    """The HTTP endpoint price-check fetches: a product priced 120."""

    async def item(request: web.Request) -> web.Response:
        return web.json_response({"name": "lamp", "price": 120})

    shop_app = web.Application()
    shop_app.router.add_get("/items/7", item)
    runner = web.AppRunner(shop_app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}/items/7"
    finally:
        await runner.cleanup()


async def test_apply_start_wait_get_and_runs(live: Live, shop: str, tmp_path: Path) -> None:
    await live.stack.builtin_workers()
    applied = await composer(live, "apply", "-f", str(EXAMPLES / "price-check.yaml"), "--deploy")
    assert applied.exit_code == 0, applied.output
    assert "price-check: version 1 (deployed)" in applied.output
    reapplied = await composer(live, "apply", "-f", str(EXAMPLES / "price-check.yaml"))
    assert reapplied.exit_code == 0, reapplied.output
    assert "price-check: version 1 unchanged (deployed)" in reapplied.output

    inputs = tmp_path / "in.json"
    inputs.write_text(json.dumps({"url": shop}))
    started = await composer(live, "start", "price-check", "--input", f"@{inputs}", "--wait")
    assert started.exit_code == 0, started.output
    assert "fetch COMPLETED" in started.output and "run SUCCEEDED" in started.output
    run_id = started.output.split()[1]
    uuid.UUID(run_id)

    shown = await composer(live, "get", run_id)
    assert shown.exit_code == 0, shown.output
    for text in ("SUCCEEDED", "fetch", "quote", "COMPLETED", "SKIPPED", "attempt"):
        assert text in shown.output
    as_json = await composer(live, "get", run_id, "--json")
    assert json.loads(as_json.output)["output"]["quote"]["total"] == 108.0

    listed = await composer(live, "runs", "--workflow", "price-check", "--status", "succeeded")
    assert listed.exit_code == 0 and run_id in listed.output
    none = await composer(live, "runs", "--workflow", "price-check", "--status", "failed")
    assert none.exit_code == 0
    assert none.output == "no runs of workflow price-check with status FAILED\n"
    workflows = await composer(live, "workflows")
    assert "price-check" in workflows.output

    # --json: stdout is the API's document alone, for scripts
    as_json = await composer(
        live, "start", "price-check", "--input", json.dumps({"url": shop}), "--json"
    )
    assert as_json.exit_code == 0, as_json.output
    started_run = json.loads(as_json.stdout)
    assert started_run["created"] is True and started_run["status"] in ("PENDING", "RUNNING")
    uuid.UUID(started_run["run_id"])
    waited = await composer(
        live, "start", "price-check", "--input", json.dumps({"url": shop}), "--json", "--wait"
    )
    assert waited.exit_code == 0, waited.output
    finished = json.loads(waited.stdout)
    assert finished["status"] == "SUCCEEDED" and finished["output"]["quote"]["total"] == 108.0

    again = await composer(
        live, "start", "price-check", "--input", json.dumps({"url": shop}), "--idempotency-key", "k"
    )
    repeat = await composer(
        live, "start", "price-check", "--input", json.dumps({"url": shop}), "--idempotency-key", "k"
    )
    assert again.output.split()[1] == repeat.output.split()[1]
    assert "already started" in repeat.output


async def test_signal_cancel_and_a_failed_wait(live: Live, tmp_path: Path) -> None:
    definition = {
        "id": "cli-waits",
        "output": "{{tasks.wait.output}}",
        "nodes": [{"id": "wait", "type": "WAIT_FOR_EVENT", "spec": {"event": "paid"}}],
    }
    path = tmp_path / "waits.json"
    path.write_text(json.dumps(definition))
    applied = await composer(live, "apply", "-f", str(path), "--deploy")
    assert applied.exit_code == 0, applied.output

    first = (await composer(live, "start", "cli-waits")).output.split()[1]
    signalled = await composer(
        live, "signal", first, "paid", "--data", '{"amount": 3}', "--idempotency-key", "p1"
    )
    assert signalled.exit_code == 0 and "delivered" in signalled.output
    # the same request again (its answer lost): answered as the first, changing nothing
    again = await composer(
        live, "signal", first, "paid", "--data", '{"amount": 3}', "--idempotency-key", "p1"
    )
    assert again.exit_code == 0 and "delivered" in again.output
    watched = await composer(live, "watch", first)
    assert watched.exit_code == 0 and "SUCCEEDED" in watched.output

    second = (await composer(live, "start", "cli-waits")).output.split()[1]
    unknown = await composer(live, "signal", second, "other")  # no node waits for it
    assert unknown.exit_code == 1 and "HTTP 422" in unknown.output, unknown.output
    assert "'other'" in unknown.output and "'paid'" in unknown.output
    cancelled = await composer(live, "cancel", second, "--reason", "changed my mind")
    assert cancelled.exit_code == 0 and "CANCELLED" in cancelled.output
    watched = await composer(live, "watch", second)
    assert watched.exit_code == 1 and "changed my mind" in watched.output
    twice = await composer(live, "cancel", second)  # answered as the first cancel was
    assert twice.exit_code == 0 and "CANCELLED" in twice.output
    finished = await composer(live, "cancel", first)  # SUCCEEDED: too late to cancel
    assert finished.exit_code == 1 and "HTTP 409" in finished.output


async def test_retry_a_failed_run_from_a_node(live: Live, tmp_path: Path) -> None:
    calls: list[int] = []

    async def flaky(ctx: TaskContext, input: dict[str, Any]) -> dict[str, Any]:
        calls.append(ctx.attempt)
        if len(calls) == 1:  # a message of several lines, as a traceback is
            raise PermanentError("the bank said no\ncard 4242: insufficient funds\nref 42")
        return {"charged": input["amount"]}

    live.stack.worker({"bank": flaky})
    definition = {
        "id": "cli-retry",
        "nodes": [
            {
                "id": "charge",
                "type": "TASK",
                "queue": "bank",
                "spec": {"amount": "{{input.amount}}"},
            }
        ],
    }
    path = tmp_path / "retry.yaml"
    path.write_text(yaml.safe_dump(definition))
    assert (await composer(live, "apply", "-f", str(path), "--deploy")).exit_code == 0
    failed = await composer(live, "start", "cli-retry", "--input", '{"amount": 5}', "--wait")
    assert failed.exit_code == 1, failed.output
    assert "charge FAILED: the bank said no…\n" in failed.output
    # the whole error once (in the run's header), not once per place it shows
    assert failed.output.count("insufficient funds") == 1, failed.output
    assert "error: node charge failed: the bank said no\ncard 4242" in failed.output
    run_id = failed.output.split()[1]
    watched = await composer(live, "watch", run_id)
    assert watched.exit_code == 1 and watched.output.count("ref 42") == 1, watched.output

    listed = await composer(live, "runs", "--workflow", "cli-retry", columns=160)
    [row] = [line for line in listed.output.splitlines() if run_id in line]
    assert row.endswith("node charge failed: the bank said no…")
    assert len(listed.output.splitlines()) == 2  # the header and the run's one line
    retried = await composer(live, "retry", run_id, "--from", "charge", "--wait")
    assert retried.exit_code == 0, retried.output
    assert "run SUCCEEDED" in retried.output


async def test_clear_messages_for_common_mistakes(live: Live, tmp_path: Path) -> None:
    down = await composer(None, "runs", url="http://127.0.0.1:9")
    assert down.exit_code == 1
    assert "cannot reach the Composer API at http://127.0.0.1:9" in down.output
    assert "\n" not in down.output.strip()  # one line

    no_token = await composer(live, "runs", token=None)
    assert no_token.exit_code == 1 and "set COMPOSER_API_TOKEN" in no_token.output
    bad_token = await composer(live, "runs", token="wrong")
    assert bad_token.exit_code == 1 and "refused the token" in bad_token.output
    weak = await composer(
        live, "apply", "-f", str(EXAMPLES / "price-check.yaml"), token=TOKENS["viewer"]
    )
    assert weak.exit_code == 1 and "needs the admin role" in weak.output

    broken = tmp_path / "broken.yaml"
    broken.write_text("id: broken\nnodes:\n  - {id: a, type: HTTP}\n  - {id: a, type: WAIT}\n")
    invalid = await composer(live, "apply", "-f", str(broken))
    assert invalid.exit_code == 1
    assert "nodes[0].spec.url" in invalid.output and "nodes[1].id" in invalid.output
    # an unknown type is one problem among the others, not the only one reported
    typo = tmp_path / "typo.yaml"
    typo.write_text(
        "id: typo\nnodes:\n  - {id: a, type: HTTPS, spec: {url: 'https://example.com'}}\n"
        "  - {id: b, type: PYTHON}\n  - {id: c, type: WAIT, spec: {duration_seconds: 1}}\n"
        "edges:\n  - {from: a, to: b}\n  - {from: b, to: c}\n  - {from: c, to: nowhere}\n"
    )
    all_three = await composer(live, "apply", "-f", str(typo))
    assert all_three.exit_code == 1
    assert "the definition is invalid (3 problem(s))" in all_three.output
    for path in ("nodes[0].type: unknown value 'HTTPS'", "nodes[1].spec.code", "edges[2].to"):
        assert path in all_three.output

    missing = await composer(live, "get", "0190a000-0000-7000-8000-000000000000")
    assert missing.exit_code == 1 and "does not exist" in missing.output
    not_json = await composer(live, "start", "x", "--input", "{oops")
    assert not_json.exit_code == 1 and "--input is not valid JSON" in not_json.output
    usage = await composer(live, "retry", "some-run")
    # one run needs --from (with filters instead of a run, each run's failed node is taken)
    assert usage.exit_code == 1 and "--from NODE" in usage.output


async def test_migrate_creates_and_migrates_a_database(pg_admin_url: str) -> None:
    name = f"composer_cli_{uuid.uuid4().hex[:10]}"
    url = repo.database_url(pg_admin_url, name)
    try:
        result = await asyncio.to_thread(invoke, ["migrate", "--url", url])
        assert result.exit_code == 0, result.output
        assert f"created database {name}" in result.output
        conn = await repo.connect(url)
        try:
            assert await repo.schema_version(conn) == repo.SCHEMA_VERSION
        finally:
            await conn.close()
    finally:
        await repo.drop_database(pg_admin_url, name)


async def test_migrate_takes_the_database_of_the_loaded_stack_env(
    pg_admin_url: str, tmp_path: Path
) -> None:
    """With `make run`'s .state/stack.env loaded, `composer migrate` migrates that stack's
    database, not `composer` (issue 31), and says which."""
    name = f"composer_cli_{uuid.uuid4().hex[:10]}"
    url = repo.database_url(pg_admin_url, name)
    stack_env = tmp_path / "stack.env"
    stack_env.write_text(f"COMPOSER_API_URL=http://127.0.0.1:9\nCOMPOSER_DATABASE_URL={url}\n")
    loaded = dict(line.split("=", 1) for line in stack_env.read_text().splitlines())
    try:
        result = await asyncio.to_thread(invoke, ["migrate"], loaded)
        assert result.exit_code == 0, result.output
        assert result.output.startswith(f"database {name} on ")
        assert f"created database {name}" in result.output
    finally:
        await repo.drop_database(pg_admin_url, name)


async def test_logs_prints_each_attempt_s_lines(live: Live, tmp_path: Path) -> None:
    async def chatty(ctx: TaskContext, input: dict[str, Any]) -> dict[str, Any]:
        ctx.logger.info("attempt %d of %s", ctx.attempt, ctx.node_id)
        if ctx.attempt == 0:
            raise TaskFailed("try again")
        return {}

    live.stack.worker({"chatty": chatty})
    await live.stack.builtin_workers()
    definition = {
        "id": "cli-logs",
        "nodes": [
            {
                "id": "talk",
                "type": "TASK",
                "queue": "chatty",
                "retry": {"max_attempts": 2, "initial_seconds": 0.1},
            },
            {
                "id": "print",
                "type": "PYTHON",
                "spec": {"code": "def main(input):\n    print('hi')\n"},
            },
        ],
        "edges": [{"from": "talk", "to": "print"}],
    }
    path = tmp_path / "logs.yaml"
    path.write_text(yaml.safe_dump(definition))
    assert (await composer(live, "apply", "-f", str(path), "--deploy")).exit_code == 0
    started = await composer(live, "start", "cli-logs", "--wait")
    assert started.exit_code == 0, started.output
    run_id = started.output.split()[1]

    shown = await composer(live, "logs", run_id)

    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    # attempts counted from 1, as the history, the tables and the UI count them
    assert [line for line in lines if line.startswith("==")] == [
        "== talk attempt 1",
        "== talk attempt 2",
        "== print attempt 1",
    ]
    assert lines[1].endswith("INFO attempt 0 of talk")
    assert lines[3].endswith("INFO attempt 1 of talk")
    assert lines[-1] == "hi"

    one = await composer(live, "logs", run_id, "--node", "print")
    assert one.output.splitlines() == ["== print attempt 1", "hi"]
    told = (await composer(live, "history", run_id, columns=200)).output
    assert "attempt 1 failed" in told and "attempt 2 completed" in told
    as_json = json.loads((await composer(live, "logs", run_id, "--json")).output)
    assert len(as_json["logs"]) == 3
    viewer = await composer(live, "logs", run_id, token=TOKENS["viewer"])
    assert (
        viewer.exit_code == 0
        and "redacted" in viewer.output
        and "hi" not in viewer.output.splitlines()
    )


#: Text that drives a terminal when printed as it is: an OSC title with BEL, a CSI that
#: clears the screen, a colour, an 8-bit CSI (U+009B), backspace, DEL, NEL (U+0085), CRLF,
#: a tab (no NUL: PostgreSQL stores none).
HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x1b[31mred\x9b1mbold\x08\x7f\x85end\r\nsecond\tline"
#: What no output may hold: C0 controls but tab and line feed, DEL, C1 controls.
CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def strings(value: Any) -> list[str]:
    """Every string in a JSON document, keys included."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [*value, *(t for v in value.values() for t in strings(v))]
    if isinstance(value, list):
        return [t for v in value for t in strings(v)]
    return []


async def test_no_command_prints_a_control_character_the_api_sent(
    live: Live, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The finding: `composer get` and `composer history` printed ESC/OSC sequences from
    a node's error as they were (a title set, the screen cleared). Every command that
    prints what the API sent prints it without control characters; --json escapes them."""

    async def hostile(ctx: TaskContext, input: dict[str, Any]) -> dict[str, Any]:
        ctx.logger.info("log %s", HOSTILE)
        raise PermanentError(HOSTILE)

    # a worker's heartbeat names its host: shown by `composer workers`
    monkeypatch.setattr(sdk_worker, "socket", SimpleNamespace(gethostname=lambda: "box" + HOSTILE))
    live.stack.worker({"hostile": hostile})
    definition = {
        "id": "cli-hostile",
        "name": "shop " + HOSTILE,
        "nodes": [{"id": "fail", "type": "TASK", "queue": "hostile"}],
    }
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(definition))
    applied = await composer(live, "apply", "-f", str(path), "--deploy")
    assert applied.exit_code == 0, applied.output

    started = await composer(live, "start", "cli-hostile", "--wait")
    assert started.exit_code == 1, started.output
    run_id = started.output.split()[1]
    outputs = {"start --wait": started.output}
    for args in (
        ["get", run_id],
        ["watch", run_id],
        ["history", run_id],
        ["logs", run_id],
        ["runs", "--workflow", "cli-hostile"],
        ["workers"],
        ["workflows"],
    ):
        result = await composer(live, *args, columns=400)
        assert result.exit_code in (0, 1), (args, result.output)
        outputs[" ".join(args[:1])] = result.output

    # the definition's problems quote a spec key as it was written: an error's details
    broken = tmp_path / "broken.json"
    broken.write_text(
        json.dumps(
            {
                "id": "cli-broken",
                "nodes": [{"id": "a", "type": "TASK", "queue": "q", "spec": {HOSTILE: "{{ ) }}"}}],
            }
        )
    )
    invalid = await composer(live, "apply", "-f", str(broken))
    assert invalid.exit_code == 1, invalid.output
    outputs["apply (invalid)"] = invalid.output

    for command_name, output in outputs.items():
        assert not CONTROLS.search(output), (command_name, output)
        # what the sequences wrapped is still there, as plain text
        assert "]0;pwned" in output, (command_name, output)
    assert "second" in outputs["get"] and "[2J[31mred1mboldend" in outputs["get"]
    assert "log ]0;pwned" in outputs["logs"]
    assert "box]0;pwned" in outputs["workers"]

    # --json: the same documents, every control escaped (JSON escapes C0; DEL and C1 too)
    for args in (["get", run_id], ["history", run_id], ["logs", run_id], ["runs"], ["workers"]):
        as_json = await composer(live, *args, "--json")
        assert as_json.exit_code == 0, (args, as_json.output)
        assert not CONTROLS.search(as_json.stdout), (args, as_json.stdout)
        # the controls are data still (a log line is cut at the line break)
        found = strings(json.loads(as_json.stdout))
        assert any("\x1b]0;pwned\x07\x1b[2J" in text for text in found), args
    shown = json.loads((await composer(live, "get", run_id, "--json")).stdout)
    assert shown["tasks"][0]["error"] == HOSTILE


async def test_limits_and_get_say_why_a_run_waits(live: Live, tmp_path: Path) -> None:
    """`composer limits` lists a key's slots and line; `composer get` of a waiting run
    says what it waits for (docs/architecture.md §4.13)."""
    queue = f"unserved-{uuid.uuid4().hex[:6]}"  # no worker: the first run keeps its slot
    workflow_id = f"cli-limited-{queue}"
    definition = {
        "id": workflow_id,
        "concurrency": {"key": "{{input.customer}}", "max_runs": 1},
        "nodes": [{"id": "charge", "type": "TASK", "queue": queue}],
    }
    path = tmp_path / "limited.json"
    path.write_text(json.dumps(definition))
    assert (await composer(live, "apply", "-f", str(path), "--deploy")).exit_code == 0
    for _ in range(2):
        started = await composer(live, "start", workflow_id, "--input", '{"customer": "acme"}')
        assert started.exit_code == 0, started.output
    waiting_run = started.output.split()[1]

    listed = await composer(live, "limits", columns=120)
    assert listed.exit_code == 0, listed.output
    row = next(line for line in listed.output.splitlines() if workflow_id in line)
    assert row.split()[1:] == ["acme", "runs", "1/1", "1"]

    shown = await composer(live, "get", waiting_run, columns=200)
    assert "PENDING" in shown.output
    assert "run waits: waiting for a slot of key 'acme': 1 of 1 running" in shown.output
