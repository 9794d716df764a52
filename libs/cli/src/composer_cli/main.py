"""``composer``: apply definitions and drive runs from a shell (docs/architecture.md §9).

Every command but ``migrate`` and ``up`` talks to the api-gateway over HTTP
(COMPOSER_API_URL, COMPOSER_API_TOKEN). Exit codes: 0 done; 1 an error, or
a waited-for run that FAILED or was CANCELLED; 2 a usage error.

What the API sends is printed from ``Answer.shown`` (its control characters
removed), or with ``--json`` through ``render.json_text``; errors are
printable already (``CliError``). Nothing prints ``Answer.body`` otherwise.

It starts in a few tens of milliseconds (issue 31): the command line is the
standard library's argparse, the API is spoken with its HTTP client, and what
only some commands use (rich, for a run's view and history; the migration
runner; the dev stack) is imported by those commands alone
(tests/unit/cli/test_start.py holds the line).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from composer_cli.client import DEFAULT_URL, ApiClient, CliError
from composer_cli.render import (
    TERMINAL,
    changes,
    compact,
    json_text,
    limits_table,
    printable_value,
    runs_table,
    schedule_lines,
    schedules_table,
    workers_table,
    workflows_table,
)

if TYPE_CHECKING:
    from rich.console import Console

DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/composer"


class Exit(Exception):
    """Leave the command with ``code`` (its output said why)."""

    def __init__(self, code: int = 0) -> None:
        super().__init__(code)
        self.code = code


class _Console:
    """A rich Console made at its first use in a command: a command that prints plain
    lines, or nothing, never imports rich (its import is most of a start's cost)."""

    def __init__(self, *, stderr: bool = False) -> None:
        self._stderr = stderr
        self._console: Console | None = None

    def reset(self) -> None:
        """Forget the console (each ``main`` call makes its own: the width may differ)."""
        self._console = None

    def get(self) -> Console:
        if self._console is None:
            from rich.console import Console

            # soft_wrap: a message line is never broken at the terminal width (a pipe sees
            # it whole); no markup: messages carry brackets (nodes[0].spec.url), not styles
            self._console = Console(
                stderr=self._stderr, highlight=False, soft_wrap=True, markup=False
            )
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.get(), name)


out: Any = _Console()
err: Any = _Console(stderr=True)


def echo(text: str = "", *, error: bool = False) -> None:
    """A plain line to stdout (or stderr)."""
    stream = sys.stderr if error else sys.stdout
    stream.write(text + "\n")
    stream.flush()


def echo_lines(lines: list[str]) -> None:
    """Plain lines (a listing from ``columns``) to stdout."""
    echo("\n".join(lines))


def err_colour() -> bool:
    from composer_cli import columns

    return sys.stderr.isatty() and not columns._NO_COLOUR


def read_json(value: str | None, what: str) -> Any:
    """``value`` as JSON: inline text, ``@path``, or ``@-`` (stdin)."""
    if value is None:
        return None
    text = value
    if value.startswith("@"):
        source = value[1:]
        try:
            text = sys.stdin.read() if source == "-" else Path(source).read_text()
        except OSError as exc:
            raise CliError(f"cannot read {what} from {source}: {exc.strerror}") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(f"{what} is not valid JSON: {exc}") from exc


def print_json(body: Any) -> None:
    echo(json_text(body))


# -- definitions ---------------------------------------------------------------


def apply(client: ApiClient, a: argparse.Namespace) -> None:
    """Create the next version of each definition (and deploy it with --deploy).

    A definition the newest version already holds adds no version: it prints
    "unchanged" with that version (deployed with --deploy)."""
    for path in a.file:
        try:
            content = path.read_bytes()
        except OSError as exc:
            raise CliError(f"cannot read {path}: {exc.strerror}") from exc
        media = "application/json" if path.suffix.lower() == ".json" else "application/yaml"
        try:
            answer = client.call(
                "POST",
                "/v1/workflows",
                content=content,
                content_type=media,
                params={"deploy": "true"} if a.deploy else None,
            )
        except CliError as exc:
            raise CliError(f"{path}: {exc.message}", exc.details) from exc
        body = answer.shown
        state = "deployed" if body["deployed"] else "not deployed"
        unchanged = " unchanged" if body.get("unchanged") else ""
        echo(f"{body['id']}: version {body['version']}{unchanged} ({state})")


def workflows(client: ApiClient, a: argparse.Namespace) -> None:
    """List workflows with their latest and deployed versions."""
    body = client.call("GET", "/v1/workflows").shown
    if not body["workflows"]:
        echo("no workflows yet: add one with `composer apply -f FILE --deploy`")
        return
    echo_lines(workflows_table(body["workflows"]))


# -- runs ----------------------------------------------------------------------


def start(client: ApiClient, a: argparse.Namespace) -> None:
    """Start a run; with --wait, follow it and exit 1 unless it succeeds."""
    body: dict[str, Any] = {"workflow_id": a.workflow}
    for key, value in (
        ("input", read_json(a.input, "--input")),
        ("config", read_json(a.config, "--config")),
        ("version", a.version),
        ("idempotency_key", a.idempotency_key),
        ("run_id", a.run_id),
        ("context", read_json(a.context, "--context")),
        ("labels", dict(a.label) if a.label else None),
    ):
        if value is not None:
            body[key] = value
    answer = client.call("POST", "/v1/runs", json=body)
    started = answer.body
    if a.as_json:
        # stdout is the JSON document alone, so a script can parse it as it is
        finished = follow(client, started["run_id"], show=False) if a.wait else started
        print_json(finished)
        if a.wait:
            exit_unless_succeeded(finished)
        return
    started = answer.shown
    note = "" if started["created"] else " (already started with this idempotency key)"
    echo(f"run {started['run_id']} {started['status']}{note}")
    if a.wait:
        exit_unless_succeeded(follow(client, started["run_id"]))


def get(client: ApiClient, a: argparse.Namespace) -> None:
    """Show a run and a table of its tasks."""
    answer = client.call("GET", f"/v1/runs/{a.run}")
    if a.as_json:
        print_json(answer.body)
    else:
        from composer_cli.render import run_view

        out.print(run_view(answer.shown))


def watch(client: ApiClient, a: argparse.Namespace) -> None:
    """Follow a run until it ends; exit 1 unless it succeeds."""
    exit_unless_succeeded(follow(client, a.run))


def history(client: ApiClient, a: argparse.Namespace) -> None:
    """What happened to a run, oldest first: every event and attempt, who did what."""
    entries: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": 1000}
    while True:
        body = client.call("GET", f"/v1/runs/{a.run}/history", params=params).body
        entries.extend(body["entries"])
        if not body.get("next_cursor"):
            break
        params["cursor"] = body["next_cursor"]
    if a.as_json:
        print_json(entries)
    elif not entries:
        echo(f"run {a.run} has no history yet")
    else:
        from composer_cli.timeline import timeline

        out.print(timeline(printable_value(entries)))


def runs(client: ApiClient, a: argparse.Namespace) -> None:
    """List runs, newest first."""
    params: dict[str, Any] = {"limit": a.limit}
    if a.workflow:
        params["workflow_id"] = a.workflow
    if a.status:
        params["status"] = a.status.upper()
    if a.label:
        params["label"] = [f"{key}:{value}" for key, value in a.label]
    if a.schedule:
        params["schedule_id"] = a.schedule
    if a.cursor:
        params["cursor"] = a.cursor
    answer = client.call("GET", "/v1/runs", params=params)
    if a.as_json:
        print_json(answer.body)
        return
    body = answer.shown
    if not body["runs"]:
        which = [
            part
            for part in (
                f"of workflow {a.workflow}" if a.workflow else "",
                f"started by schedule {a.schedule}" if a.schedule else "",
                f"with status {a.status.upper()}" if a.status else "",
                " ".join(f"labelled {key}={value}" for key, value in a.label or ()),
            )
            if part
        ]
        more = " on this page" if a.cursor else ""
        echo(" ".join(["no runs", *which]) + more)
        return
    echo_lines(runs_table(body["runs"]))
    if body.get("next_cursor"):
        echo(f"more: composer runs --cursor {body['next_cursor']}")


def signal(client: ApiClient, a: argparse.Namespace) -> None:
    """Send a signal with an optional JSON payload."""
    payload = read_json(a.data, "--data")
    content = json.dumps(payload).encode() if a.data is not None else b""
    body = client.call(
        "POST",
        f"/v1/runs/{a.run}/signals/{a.name}",
        content=content,
        content_type="application/json",
        headers={"Idempotency-Key": a.idempotency_key} if a.idempotency_key else None,
    ).shown
    if body["delivered"]:
        echo(f"signal {a.name} delivered")
    else:
        echo(f"signal {a.name} buffered: no node waits for it yet")


def cancel(client: ApiClient, a: argparse.Namespace) -> None:
    """Cancel a run, or every run the filters match (--workflow, --status, --label,
    --created-after, --created-before) in the background: without --yes it says how
    many and asks (or refuses when nobody can answer)."""
    if a.run is None:
        bulk(client, a, "cancel", {"reason": a.reason})
        return
    _no_filters(a, "cancel")
    body = client.call("POST", f"/v1/runs/{a.run}/cancel", json={"reason": a.reason}).shown
    echo(f"run {body['run_id']} {body['status']}")


def pause(client: ApiClient, a: argparse.Namespace) -> None:
    """Pause a run: nothing new goes to a worker until it is resumed (PAUSED is not an end)."""
    body = client.call("POST", f"/v1/runs/{a.run}/pause", json={"reason": a.reason}).shown
    echo(f"run {body['run_id']} {body['status']}")


def resume(client: ApiClient, a: argparse.Namespace) -> None:
    """Resume a paused run: its held tasks go, kept timers and signals apply."""
    body = client.call("POST", f"/v1/runs/{a.run}/resume").shown
    echo(f"run {body['run_id']} {body['status']}")


#: Runs counted before asking: past it, "more than".
_COUNT_LIMIT = 10_000


def _filters(a: argparse.Namespace) -> dict[str, Any]:
    """The listing's parameters the command's filter options give (empty: none)."""
    found: dict[str, Any] = {}
    if a.workflow:
        found["workflow_id"] = a.workflow
    if a.status:
        found["status"] = a.status.upper()
    if a.label:
        found["label"] = [f"{key}:{value}" for key, value in a.label]
    if a.created_after:
        found["created_after"] = a.created_after
    if a.created_before:
        found["created_before"] = a.created_before
    return found


def _no_filters(a: argparse.Namespace, what: str) -> None:
    if _filters(a):
        raise CliError(f"give a run id or filters, not both: `composer {what} RUN` acts on one run")


def bulk(client: ApiClient, a: argparse.Namespace, action: str, extra: dict[str, Any]) -> None:
    """Cancel or retry every run the filters match, as one background operation;
    follow it to the end."""
    filters = _filters(a)
    if not filters:
        raise CliError(
            f"say which runs: `composer {action} RUN`, or filters such as "
            f"`--workflow X --status RUNNING` (see `composer {action} --help`)"
        )
    count, more = 0, True
    params: dict[str, Any] = {**filters, "limit": 1000}
    while more and count < _COUNT_LIMIT:
        page = client.call("GET", "/v1/runs", params=params).body
        count += len(page["runs"])
        more = bool(page.get("next_cursor"))
        params["cursor"] = page.get("next_cursor")
    howmany = f"more than {count}" if more else str(count)
    if count == 0:
        echo(f"no runs match: nothing to {action}")
        return
    if not a.yes:
        question = f"{action} {howmany} run(s)? [y/N] "
        if not sys.stdin.isatty():
            echo(f"this would {action} {howmany} run(s); add --yes to do it", error=True)
            raise Exit(1)
        sys.stdout.write(question)
        sys.stdout.flush()
        if sys.stdin.readline().strip().lower() not in ("y", "yes"):
            echo("nothing done")
            raise Exit(1)
    started = client.call(
        "POST", f"/v1/runs/bulk/{action}", json={"filter": filters, **extra}, ok=(200, 202)
    ).shown
    operation_id = started["operation_id"]
    echo(f"operation {operation_id}: {action} {howmany} run(s) in the background")
    while True:
        op = client.call("GET", f"/v1/operations/{operation_id}").shown
        if op["state"] == "DONE":
            break
        time.sleep(0.5)
    echo(
        f"operation {operation_id} done: {op['total']} run(s), {op['done']} "
        f"{'cancelled' if action == 'cancel' else 'retried'}, {op['skipped']} skipped, "
        f"{op['failed']} failed"
    )
    if op.get("last_error"):
        echo(f"  last error: {op['last_error']}", error=True)
    if op["failed"]:
        raise Exit(1)


def retry(client: ApiClient, a: argparse.Namespace) -> None:
    """Run a finished run again from a node (it and every node after it), or every run
    the filters match, each from --from or its first failed or cancelled node."""
    if a.run is None:
        bulk(client, a, "retry", {"from_node": a.from_node} if a.from_node else {})
        return
    _no_filters(a, "retry")
    if not a.from_node:
        raise CliError("say where to retry the run from: --from NODE")
    body: dict[str, Any] = {"from_node": a.from_node}
    for key, value in (
        ("version", a.version),
        ("input", read_json(a.input, "--input")),
        ("config", read_json(a.config, "--config")),
    ):
        if value is not None:
            body[key] = value
    answer = client.call("POST", f"/v1/runs/{a.run}/retry", json=body).shown
    echo(f"run {answer['run_id']} {answer['status']} from {a.from_node}")
    if a.wait:
        exit_unless_succeeded(follow(client, a.run))


# -- a MAP node's items ----------------------------------------------------------


def items(client: ApiClient, a: argparse.Namespace) -> None:
    """List a MAP node's item tasks in item order: state, attempt, duration, error."""
    params = {"start": str(a.start), "limit": str(a.limit)}
    answer = client.call("GET", f"/v1/runs/{a.run}/tasks/{a.node}/items", params=params)
    if a.as_json:
        print_json(answer.body)
        return
    from composer_cli.render import items_table

    body = answer.shown
    if not body["items"]:
        echo(f"no items of {a.node} from {a.start}")
        return
    echo_lines(items_table(body["items"]))
    if body.get("next_start") is not None:
        echo(f"more: composer items {a.run} {a.node} --start {body['next_start']}")


# -- task logs -----------------------------------------------------------------


def logs(client: ApiClient, a: argparse.Namespace) -> None:
    """Print what a run's task attempts logged (PYTHON nodes' prints, ctx.logger records)."""
    params = {"node": a.node} if a.node else None
    answer = client.call("GET", f"/v1/runs/{a.run}/logs", params=params)
    if a.as_json:
        print_json(answer.body)
        return
    body = answer.shown
    if body.get("redacted"):
        echo(
            "the lines are redacted: this token is a viewer's and the workflow does not set "
            "viewers_see_payloads: true",
            error=True,
        )
    if not body["logs"]:
        echo(
            "no task logs" + (f" for node {a.node}" if a.node else "") + " in this run", error=True
        )
    for entry in body["logs"]:
        # the API counts attempts from 0; people (history, tables, the UI) from 1
        header = f"== {entry['node_id']} attempt {entry['attempt'] + 1}"
        if entry.get("truncated"):
            header += f" ({entry['truncated']} lines truncated)"
        echo(header)
        for line in entry.get("lines") or []:
            echo(line)


# -- the database and the stack ------------------------------------------------


def migrate(a: argparse.Namespace) -> None:
    """Create the database if missing and apply the migrations (talks to PostgreSQL directly).

    The database is --url, else COMPOSER_DATABASE_URL: with `make run`'s .state/stack.env
    loaded, that stack's (composer_<port base> on a COMPOSER_PORT_BASE)."""
    from urllib.parse import urlsplit

    from composer_repo.__main__ import main as repo_main

    where = urlsplit(a.database_url)
    echo(
        f"database {where.path.lstrip('/') or '(none)'} on {where.hostname or 'localhost'}:"
        f"{where.port or 5432}"
    )
    code = repo_main(["migrate", "--url", a.database_url])
    if code:
        raise Exit(code)


def up(rest: list[str]) -> None:
    """Start the whole stack on this machine (what `make run` does); Ctrl-C stops it.

    Options (--state, --grace, --admin-base) go to the supervisor: `composer up --help`.
    """
    from composer_devstack.__main__ import main as devstack_main

    code = devstack_main(rest)
    if code:
        raise Exit(code)


# -- workers -------------------------------------------------------------------


def workers(client: ApiClient, a: argparse.Namespace) -> None:
    """List the workers and the queues they serve (from their heartbeats)."""
    answer = client.call("GET", "/v1/workers")
    if a.as_json:
        print_json(answer.body)
        return
    body = answer.shown
    if not body["workers"]:
        echo("no worker has sent a heartbeat (in the last day)")
        return
    echo_lines(workers_table(body["workers"]))


def limits(client: ApiClient, a: argparse.Namespace) -> None:
    """List the keys of the limits holding runs back: slots in use, limit, waiting."""
    answer = client.call("GET", "/v1/limits")
    if a.as_json:
        print_json(answer.body)
        return
    rows = answer.shown["limits"]
    if not rows:
        echo("no limited key has a run going or waiting")
        return
    echo_lines(limits_table(rows))


# -- schedules -----------------------------------------------------------------


def schedules_list(client: ApiClient, a: argparse.Namespace) -> None:
    """List schedules: when each fires, its next fire, fires started, skipped, missed."""
    params = {"workflow_id": a.workflow} if a.workflow else None
    answer = client.call("GET", "/v1/schedules", params=params)
    if a.as_json:
        print_json(answer.body)
        return
    rows = answer.shown["schedules"]
    if not rows:
        which = f" of workflow {a.workflow}" if a.workflow else ""
        echo(
            f"no schedules{which}: add one with `composer schedules create` or a "
            "definition's schedules:"
        )
        return
    echo_lines(schedules_table(rows))


def schedules_get(client: ApiClient, a: argparse.Namespace) -> None:
    """Show a schedule: its next five fire times, its last runs, recent events (skipped
    and missed fires among them) and backfills."""
    answer = client.call("GET", f"/v1/schedules/{_path(a.id)}")
    runs = client.call("GET", "/v1/runs", params={"schedule_id": a.id, "limit": a.runs})
    if a.as_json:
        print_json({**answer.body, "runs": runs.body["runs"]})
        return
    echo_lines(schedule_lines(answer.shown, runs.shown["runs"]))


#: ``composer schedules create`` flags and the fields they set.
_SCHEDULE_FLAGS = (
    ("workflow", "workflow_id"),
    ("id", "id"),
    ("cron", "cron"),
    ("every", "every_seconds"),
    ("timezone", "timezone"),
    ("overlap", "overlap"),
    ("catchup", "catchup_window_seconds"),
    ("jitter", "jitter_seconds"),
)


def schedules_create(client: ApiClient, a: argparse.Namespace) -> None:
    """Create a schedule from a file (YAML or JSON: a definition's schedules: entry with
    workflow_id) or from flags; flags given with a file override its fields."""
    body: dict[str, Any] = {}
    if a.file is not None:
        body = _schedule_file(a.file)
    for flag, field in _SCHEDULE_FLAGS:
        value = getattr(a, flag)
        if value is not None:
            body[field] = value
    if a.input is not None:
        body["input"] = read_json(a.input, "--input")
    if a.paused:
        body["paused"] = True
    for field, flag in (("workflow_id", "--workflow"), ("id", "--id")):
        if not body.get(field):
            raise CliError(f"say {field}: {flag}, or {field}: in the file")
    if "cron" not in body and "every_seconds" not in body:
        raise CliError('say when it fires: --cron "0 2 * * *" or --every SECONDS')
    answer = client.call("POST", "/v1/schedules", json=body)
    if a.as_json:
        print_json(answer.body)
        return
    shown = answer.shown
    echo(f"schedule {shown['id']} created: starts {shown['workflow_id']}, {_fires(shown)}")
    for fire in shown.get("next_fires") or []:
        echo(f"  next {_utc(fire)}")


def _schedule_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}") from exc
    if path.suffix.lower() == ".json":
        try:
            document = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CliError(f"{path} is not valid JSON: {exc}") from exc
    else:
        import yaml

        try:
            document = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise CliError(f"{path} is not valid YAML: {exc}") from exc
    if not isinstance(document, dict):
        raise CliError(f"{path} must hold one schedule, a mapping (id:, cron:, workflow_id: …)")
    return document


def _fires(schedule: dict[str, Any]) -> str:
    from composer_cli.render import when_text

    return when_text(schedule) + (" (paused)" if schedule["paused"] else "")


def _utc(value: str | None) -> str:
    from composer_cli.render import utc_text

    return utc_text(value)


def _path(schedule_id: str) -> str:
    from urllib.parse import quote

    return quote(schedule_id, safe="")


def schedules_pause(client: ApiClient, a: argparse.Namespace) -> None:
    """Pause a schedule: it fires no more until resumed (its runs go on)."""
    shown = client.call("POST", f"/v1/schedules/{_path(a.id)}/pause").shown
    echo(f"schedule {shown['id']} paused")


def schedules_resume(client: ApiClient, a: argparse.Namespace) -> None:
    """Resume a schedule from its next fire time (the fires it missed paused are not made up)."""
    shown = client.call("POST", f"/v1/schedules/{_path(a.id)}/resume").shown
    fires = shown.get("next_fires") or []
    echo(f"schedule {shown['id']} resumed" + (f": next {_utc(fires[0])}" if fires else ""))


def schedules_trigger(client: ApiClient, a: argparse.Namespace) -> None:
    """Fire a schedule now, under its overlap policy (or --overlap); exit 1 when the
    policy held the fire back."""
    body = {"overlap": a.overlap} if a.overlap else {}
    headers = {"Idempotency-Key": a.idempotency_key} if a.idempotency_key else None
    answer = client.call("POST", f"/v1/schedules/{_path(a.id)}/trigger", json=body, headers=headers)
    if a.as_json:
        print_json(answer.body)
    else:
        shown = answer.shown
        if shown["started"]:
            echo(f"run {shown['run_id']} started by schedule {shown['schedule_id']}")
        else:
            echo(f"not started: {shown['detail']}", error=True)
    if not answer.body["started"]:
        raise Exit(1)


def schedules_backfill(client: ApiClient, a: argparse.Namespace) -> None:
    """Start a schedule's fire times from --start to --end (RFC 3339, with a time zone)
    in the background; `composer schedules get ID` shows its progress."""
    body = {"start": a.start, "end": a.end, "overlap": a.overlap}
    answer = client.call("POST", f"/v1/schedules/{_path(a.id)}/backfill", json=body, ok=(202,))
    if a.as_json:
        print_json(answer.body)
        return
    shown = answer.shown
    echo(
        f"backfill {shown['id']}: {shown['total']} fire time(s) from {_utc(shown['start'])} "
        f"to {_utc(shown['end'])} ({shown['overlap']}), started in the background; "
        f"progress: composer schedules get {a.id}"
    )


def schedules_delete(client: ApiClient, a: argparse.Namespace) -> None:
    """Delete a schedule made through the API (its runs stay); one a definition wrote
    goes when a version without it is deployed."""
    client.call("DELETE", f"/v1/schedules/{_path(a.id)}")
    echo(f"schedule {a.id} deleted")


# -- following a run -------------------------------------------------------------


#: How long ``follow`` keeps asking an API that stopped answering before it gives up.
OUTAGE_SECONDS = 300.0


def follow(
    client: ApiClient,
    run_id: str,
    *,
    poll: float = 2.0,
    show: bool = True,
    retry_delay: float = 1.0,
    outage_seconds: float = OUTAGE_SECONDS,
) -> dict[str, Any]:
    """Show the run until it is terminal and return it as it ended.

    Each read is a long-poll of up to ``poll`` seconds, so the finish shows at
    once while progress refreshes every couple of seconds. A terminal gets a
    live table; a pipe or log gets one line per change, then the run once, so
    its error (a traceback, say) is printed in full once. ``show=False``
    prints nothing (``--json`` prints the end alone).

    When the API stops answering after the first read (a restart, say), it is
    asked again with backoff from ``retry_delay`` seconds, for up to
    ``outage_seconds``: one line says so, one says when it answers again, so a
    wait is not cut short by a blip and the error is not repeated per attempt.
    """
    previous: dict[str, Any] | None = None
    answered = False

    def read_once() -> dict[str, Any]:
        answer = client.call(
            "GET",
            f"/v1/runs/{run_id}/result",
            params={"timeout": poll},
            timeout=poll + 30,
            ok=(200, 202),
        )
        body: dict[str, Any] = answer.body
        return body

    def read() -> dict[str, Any]:
        nonlocal answered
        began: float | None = None
        delay = retry_delay
        while True:
            try:
                run = read_once()
            except CliError as exc:
                if not answered or not exc.transient:
                    raise
                if began is None:
                    began = time.monotonic()
                    err.print(
                        f"{exc.message}; asking again for up to {outage_seconds:g}s (Ctrl-C stops)",
                        style="yellow",
                    )
                elif time.monotonic() - began >= outage_seconds:
                    raise CliError(
                        f"{exc.message}; gave up after {outage_seconds:g}s", transient=True
                    ) from exc
                time.sleep(delay)
                delay = min(delay * 2, 10.0)
                continue
            if began is not None:
                err.print("the Composer API answers again", style="yellow")
            answered = True
            return run

    from composer_cli.render import run_view

    if not show:
        while (run := read())["status"] not in TERMINAL:
            pass
        return run
    if out.is_terminal:
        from rich.live import Live

        with Live(
            console=out.get() if isinstance(out, _Console) else out, auto_refresh=False
        ) as live:
            while True:
                run = read()
                live.update(run_view(printable_value(run)), refresh=True)
                if run["status"] in TERMINAL:
                    break
    else:
        while True:
            run = read()
            view = printable_value(run)
            for line in changes(previous, view):
                out.print(line)
            previous = view
            if run["status"] in TERMINAL:
                break
        out.print(run_view(view))
    if run["status"] == "SUCCEEDED" and run.get("output") is not None and out.is_terminal:
        out.print(f"output: {compact(printable_value(run['output']), 400)}")
    return run


def exit_unless_succeeded(run: dict[str, Any]) -> None:
    """Exit 1 for a run that FAILED or was CANCELLED (scripts test the exit code)."""
    if run["status"] != "SUCCEEDED":
        raise Exit(1)


# -- the command line ------------------------------------------------------------

JSON_HELP = "JSON text, @file.json, or @- for standard input"


def _limit(value: str) -> int:
    number = int(value)
    if not 1 <= number <= 1000:
        raise argparse.ArgumentTypeError(f"{value} is not from 1 to 1000")
    return number


def _label(value: str) -> tuple[str, str]:
    """A ``KEY=VALUE`` label argument (the API checks the key and the value)."""
    key, sep, text = value.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{value!r} is not KEY=VALUE (e.g. customer=acme)")
    return key, text


def parser() -> argparse.ArgumentParser:
    """The command line: global options, then one command and its own."""
    top = argparse.ArgumentParser(
        prog="composer",
        description="Composer: durable workflows. Talks to the api-gateway at COMPOSER_API_URL.",
    )
    top.add_argument(
        "--url",
        default=os.environ.get("COMPOSER_API_URL") or DEFAULT_URL,
        help="the api-gateway's URL (default: COMPOSER_API_URL, else %(default)s)",
    )
    top.add_argument(
        "--token",
        default=os.environ.get("COMPOSER_API_TOKEN", ""),
        help="API token (default: COMPOSER_API_TOKEN)",
    )
    top.add_argument("--version", action="store_true", help="print the CLI's version and exit")
    commands = top.add_subparsers(dest="command", metavar="COMMAND")

    def command(fn: Callable[..., None], name: str | None = None) -> argparse.ArgumentParser:
        doc = (fn.__doc__ or "").strip()
        sub = commands.add_parser(
            name or fn.__name__,
            help=doc.splitlines()[0],
            description=doc,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        sub.set_defaults(handler=fn)
        return sub

    def as_json(sub: argparse.ArgumentParser, what: str = "print the API's JSON") -> None:
        sub.add_argument("--json", dest="as_json", action="store_true", help=what)

    sub = command(apply)
    sub.add_argument(
        "-f",
        "--file",
        type=Path,
        action="append",
        required=True,
        help="a definition (.yaml, .yml or .json); repeat for several",
    )
    sub.add_argument(
        "--deploy",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="make each new version the one new runs use",
    )
    command(workflows)

    sub = command(start)
    sub.add_argument("workflow", help="the workflow id")
    sub.add_argument("--input", help=JSON_HELP)
    sub.add_argument("--config", help=JSON_HELP)
    sub.add_argument("--version", type=int, help="default: the deployed version")
    sub.add_argument("--idempotency-key", help="a repeated key returns the run it started")
    sub.add_argument("--run-id", help="your own run id (a recent UUIDv7)")
    sub.add_argument(
        "--context",
        help="request metadata, a JSON object (text, @file or @-), kept with the run and "
        "handed to its handlers as ctx.caller.metadata",
    )
    sub.add_argument(
        "--label",
        type=_label,
        action="append",
        metavar="KEY=VALUE",
        help="a label for finding the run (`composer runs --label`); repeat for several; "
        "plain text, never sealed",
    )
    sub.add_argument(
        "--wait",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="show progress until the run ends",
    )
    as_json(sub, "print the API's JSON only: the started run, or with --wait the finished one")

    sub = command(get)
    sub.add_argument("run", help="the run id")
    as_json(sub)
    sub = command(watch)
    sub.add_argument("run", help="the run id")
    sub = command(history)
    sub.add_argument("run", help="the run id")
    as_json(sub, "print the entries as JSON")

    sub = command(runs)
    sub.add_argument("--workflow", help="only runs of this workflow")
    sub.add_argument("--status", help="RUNNING, PAUSED, SUCCEEDED, FAILED, CANCELLED …")
    sub.add_argument(
        "--label",
        type=_label,
        action="append",
        metavar="KEY=VALUE",
        help="only runs with this label; repeat for several (a run must have all)",
    )
    sub.add_argument(
        "--schedule",
        metavar="ID",
        help="only runs this schedule started (with --status at most)",
    )
    sub.add_argument("--limit", type=_limit, default=20, help="1 to 1000 (default 20)")
    sub.add_argument("--cursor", help="the next page's cursor")
    as_json(sub)

    sub = command(signal)
    sub.add_argument("run", help="the run id")
    sub.add_argument("name", help="the signal (a WAIT_FOR_EVENT node's event)")
    sub.add_argument("--data", help=JSON_HELP)
    sub.add_argument(
        "--idempotency-key",
        help="sent again with the same key (after a lost answer), the signal changes nothing",
    )

    def run_filters(sub: argparse.ArgumentParser, what: str) -> None:
        sub.add_argument("--workflow", help=f"{what} the runs of this workflow")
        sub.add_argument("--status", help="… with this status (RUNNING, FAILED, …)")
        sub.add_argument(
            "--label", type=_label, action="append", metavar="KEY=VALUE", help="… with this label"
        )
        sub.add_argument("--created-after", help="… created after this time (RFC 3339)")
        sub.add_argument("--created-before", help="… created before this time (RFC 3339)")
        sub.add_argument(
            "--yes", action="store_true", help="do it without asking (scripts must say so)"
        )

    sub = command(cancel)
    sub.add_argument("run", nargs="?", help="the run id (or filters instead)")
    sub.add_argument("--reason", default="", help="recorded as the run's error")
    run_filters(sub, "cancel")
    sub = command(pause)
    sub.add_argument("run", help="the run id")
    sub.add_argument("--reason", default="", help="recorded in the run's history")
    sub = command(resume)
    sub.add_argument("run", help="the run id")
    sub = command(retry)
    sub.add_argument("run", nargs="?", help="the run id (or filters instead)")
    sub.add_argument(
        "--from",
        dest="from_node",
        help="the node to run again from (with filters: default each run's first failed node)",
    )
    run_filters(sub, "retry")
    sub.add_argument(
        "--version", type=int, help="0: the deployed version; N: version N; default: the run's"
    )
    sub.add_argument("--input", help=JSON_HELP)
    sub.add_argument("--config", help=JSON_HELP)
    sub.add_argument(
        "--wait",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="show progress until the run ends",
    )

    sub = command(items)
    sub.add_argument("run", help="the run id")
    sub.add_argument("node", help="the MAP node's id")
    sub.add_argument("--start", type=int, default=0, help="the first item's index (default 0)")
    sub.add_argument("--limit", type=_limit, default=100, help="1 to 1000 (default 100)")
    as_json(sub)

    sub = command(logs)
    sub.add_argument("run", help="the run id")
    sub.add_argument("--node", help="only this node's attempts")
    as_json(sub)

    sub = command(migrate)
    sub.add_argument(
        "--url",
        dest="database_url",
        default=os.environ.get("COMPOSER_DATABASE_URL") or DEFAULT_DATABASE_URL,
        help="the database, created if missing (default: COMPOSER_DATABASE_URL, else %(default)s)",
    )
    commands.add_parser(
        "up",
        help="Start the whole stack on this machine (what `make run` does); Ctrl-C stops it.",
        add_help=False,
    )
    sub = command(workers)
    as_json(sub)
    sub = command(limits)
    as_json(sub)

    sched = commands.add_parser(
        "schedules",
        help="List, create, pause, resume, trigger, backfill and delete schedules.",
        description="Schedules start runs of a workflow at cron or interval fire times "
        "(a definition's schedules:, or these commands). The timer service fires them.",
    )
    actions = sched.add_subparsers(dest="action", metavar="ACTION", required=True)

    def action(fn: Callable[..., None], name: str) -> argparse.ArgumentParser:
        doc = (fn.__doc__ or "").strip()
        one = actions.add_parser(name, help=doc.splitlines()[0], description=doc)
        one.set_defaults(handler=fn)
        return one

    one = action(schedules_list, "list")
    one.add_argument("--workflow", help="only the schedules of this workflow")
    as_json(one)
    one = action(schedules_get, "get")
    one.add_argument("id", help="the schedule id")
    one.add_argument(
        "--runs", type=_limit, default=5, help="how many of its last runs to show (default 5)"
    )
    as_json(one, "print the API's JSON (with its last runs as runs)")
    one = action(schedules_create, "create")
    one.add_argument(
        "-f",
        "--file",
        type=Path,
        help="the schedule as YAML or JSON (fields as in a "
        "definition's schedules:, and workflow_id)",
    )
    one.add_argument("--workflow", help="the workflow it starts runs of")
    one.add_argument("--id", help="the schedule's id")
    one.add_argument("--cron", help='a cron expression, "0 2 * * *" (5 or 6 fields)')
    one.add_argument("--every", type=int, metavar="SECONDS", help="or fire every so many seconds")
    one.add_argument("--timezone", help="the cron expression's IANA time zone (default UTC)")
    one.add_argument("--input", help="the input of its runs: " + JSON_HELP)
    one.add_argument(
        "--overlap",
        choices=("skip", "buffer_one", "allow_all", "cancel_other"),
        help="a fire while the last run still goes (default skip)",
    )
    one.add_argument(
        "--catchup", type=int, metavar="SECONDS", help="how late a fire may still start (3600)"
    )
    one.add_argument("--jitter", type=int, metavar="SECONDS", help="delay fires by up to this")
    one.add_argument("--paused", action="store_true", help="create it paused")
    as_json(one)
    for fn, name in ((schedules_pause, "pause"), (schedules_resume, "resume")):
        one = action(fn, name)
        one.add_argument("id", help="the schedule id")
    one = action(schedules_trigger, "trigger")
    one.add_argument("id", help="the schedule id")
    one.add_argument(
        "--overlap",
        choices=("skip", "buffer_one", "allow_all", "cancel_other"),
        help="this fire's overlap policy (default: the schedule's)",
    )
    one.add_argument(
        "--idempotency-key", help="sent again with the same key, it starts no second run"
    )
    as_json(one)
    one = action(schedules_backfill, "backfill")
    one.add_argument("id", help="the schedule id")
    one.add_argument("--start", required=True, help="the first time (2026-12-01T00:00:00Z)")
    one.add_argument("--end", required=True, help="the last time, with a time zone")
    one.add_argument(
        "--overlap",
        choices=("allow_all", "skip", "buffer_all"),
        default="allow_all",
        help="allow_all (default): every fire starts at once; skip; buffer_all: one at a time",
    )
    as_json(one)
    one = action(schedules_delete, "delete")
    one.add_argument("id", help="the schedule id")
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """The console script: run one command; its exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    out.reset()
    err.reset()
    from composer_cli.columns import no_colour

    no_colour(bool(os.environ.get("NO_COLOR")))
    top = parser()
    at = _command_at(args)
    if at is not None and args[at] == "up":  # the rest is the supervisor's (`composer up --help`)
        known = top.parse_args(args[:at])
        if not known.version:
            return _run(lambda: up(args[at + 1 :]))
    a = top.parse_args(args)
    if a.version:
        from importlib.metadata import version as package_version

        echo(f"composer {package_version('composer-cli')}")
        return 0
    if a.command is None:
        top.print_help()
        return 2
    if a.command == "migrate":
        return _run(lambda: migrate(a))
    client = ApiClient(a.url, a.token)
    try:
        return _run(lambda: a.handler(client, a))
    finally:
        client.close()


def _command_at(args: list[str]) -> int | None:
    """Where the command is in ``args``: the first word that is no global option's."""
    i = 0
    while i < len(args):
        if args[i] in ("--url", "--token"):
            i += 2
        elif args[i].startswith("-"):
            i += 1
        else:
            return i
    return None


def _run(call: Callable[[], None]) -> int:
    """Run a command: its CliErrors print as one clear line (and details), exit 1."""
    try:
        call()
    except CliError as exc:
        from composer_cli.columns import paint

        echo(f"{paint('error:', 'red', err_colour())} {exc.message}", error=True)
        for line in exc.details:
            echo(f"  {line}", error=True)
        return 1
    except Exit as exc:
        return exc.code
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
