"""``composer``: apply definitions and drive runs from a shell (docs/architecture.md §9).

Every command but ``migrate`` talks to the api-gateway over HTTP
(COMPOSER_API_URL, COMPOSER_API_TOKEN). Exit codes: 0 done; 1 an error, or
a waited-for run that FAILED or was CANCELLED; 2 a usage error.

What the API sends is printed from ``Answer.shown`` (its control characters
removed), or with ``--json`` through ``render.json_text``; errors are
printable already (``CliError``). Nothing prints ``Answer.body`` otherwise.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from collections.abc import Callable
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.live import Live
from rich.text import Text

from composer_cli.client import DEFAULT_URL, ApiClient, CliError
from composer_cli.render import (
    TERMINAL,
    changes,
    compact,
    json_text,
    printable_value,
    run_view,
    runs_table,
    workers_table,
    workflows_table,
)
from composer_cli.timeline import timeline

app = typer.Typer(
    name="composer",
    help="Composer: durable workflows. Talks to the api-gateway at COMPOSER_API_URL.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# soft_wrap: a message line is never broken at the terminal width (a pipe sees it whole)
# no markup: messages carry brackets (nodes[0].spec.url) that are not styles
out = Console(highlight=False, soft_wrap=True, markup=False)
err = Console(stderr=True, highlight=False, soft_wrap=True, markup=False)


def command(fn: Callable[..., None]) -> Callable[..., None]:
    """Register a command whose CliErrors print as one clear line (and details) and exit 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            fn(*args, **kwargs)
        except CliError as exc:
            err.print(Text.assemble(("error:", "red"), " ", exc.message))
            for line in exc.details:
                err.print(f"  {line}")
            raise typer.Exit(1) from None

    app.command()(wrapper)
    return wrapper


JsonOption = Annotated[
    str | None,
    typer.Option(help="JSON text, @file.json, or @- for standard input"),
]


def show_version(asked: bool) -> None:
    if asked:
        typer.echo(f"composer {package_version('composer-cli')}")
        raise typer.Exit()


@app.callback()
def configure(
    ctx: typer.Context,
    url: Annotated[
        str, typer.Option("--url", envvar="COMPOSER_API_URL", help="the api-gateway's URL")
    ] = DEFAULT_URL,
    token: Annotated[
        str,
        typer.Option("--token", envvar="COMPOSER_API_TOKEN", help="API token", show_default=False),
    ] = "",
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=show_version,
            is_eager=True,
            help="print the CLI's version and exit",
        ),
    ] = False,
) -> None:
    client = ApiClient(url, token)
    ctx.obj = client
    ctx.call_on_close(client.close)


def client_of(ctx: typer.Context) -> ApiClient:
    client: ApiClient = ctx.obj
    return client


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


# -- definitions ---------------------------------------------------------------


@command
def apply(
    ctx: typer.Context,
    files: Annotated[
        list[Path],
        typer.Option(
            "-f", "--file", help="a definition (.yaml, .yml or .json); repeat for several"
        ),
    ],
    deploy: Annotated[
        bool, typer.Option(help="make each new version the one new runs use")
    ] = False,
) -> None:
    """Create the next version of each definition (and deploy it with --deploy).

    A definition the newest version already holds adds no version: it prints
    "unchanged" with that version (deployed with --deploy)."""
    client = client_of(ctx)
    for path in files:
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
                params={"deploy": "true"} if deploy else None,
            )
        except CliError as exc:
            raise CliError(f"{path}: {exc.message}", exc.details) from exc
        body = answer.shown
        state = "deployed" if body["deployed"] else "not deployed"
        unchanged = " unchanged" if body.get("unchanged") else ""
        out.print(f"{body['id']}: version {body['version']}{unchanged} ({state})")


@command
def workflows(ctx: typer.Context) -> None:
    """List workflows with their latest and deployed versions."""
    body = client_of(ctx).call("GET", "/v1/workflows").shown
    out.print(workflows_table(body["workflows"]))


# -- runs ----------------------------------------------------------------------


@command
def start(
    ctx: typer.Context,
    workflow: Annotated[str, typer.Argument(help="the workflow id")],
    input: JsonOption = None,
    config: JsonOption = None,
    version: Annotated[int | None, typer.Option(help="default: the deployed version")] = None,
    idempotency_key: Annotated[
        str | None, typer.Option(help="a repeated key returns the run it started")
    ] = None,
    run_id: Annotated[str | None, typer.Option(help="your own run id (a recent UUIDv7)")] = None,
    context: Annotated[
        str | None,
        typer.Option(
            help="request metadata, a JSON object (text, @file or @-), kept with the run "
            "and handed to its handlers as ctx.caller.metadata",
            show_default=False,
        ),
    ] = None,
    wait: Annotated[bool, typer.Option(help="show progress until the run ends")] = False,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="print the API's JSON only: the started run, or with --wait the finished one",
        ),
    ] = False,
) -> None:
    """Start a run; with --wait, follow it and exit 1 unless it succeeds."""
    client = client_of(ctx)
    body: dict[str, Any] = {"workflow_id": workflow}
    for key, value in (
        ("input", read_json(input, "--input")),
        ("config", read_json(config, "--config")),
        ("version", version),
        ("idempotency_key", idempotency_key),
        ("run_id", run_id),
        ("context", read_json(context, "--context")),
    ):
        if value is not None:
            body[key] = value
    answer = client.call("POST", "/v1/runs", json=body)
    started = answer.body
    if as_json:
        # stdout is the JSON document alone, so a script can parse it as it is
        finished = follow(client, started["run_id"], show=False) if wait else started
        print_json(finished)
        if wait:
            exit_unless_succeeded(finished)
        return
    started = answer.shown
    note = "" if started["created"] else " (already started with this idempotency key)"
    out.print(f"run {started['run_id']} {started['status']}{note}")
    if wait:
        exit_unless_succeeded(follow(client, started["run_id"]))


@command
def get(
    ctx: typer.Context,
    run: Annotated[str, typer.Argument(help="the run id")],
    as_json: Annotated[bool, typer.Option("--json", help="print the API's JSON")] = False,
) -> None:
    """Show a run and a table of its tasks."""
    answer = client_of(ctx).call("GET", f"/v1/runs/{run}")
    if as_json:
        print_json(answer.body)
    else:
        out.print(run_view(answer.shown))


@command
def watch(ctx: typer.Context, run: Annotated[str, typer.Argument(help="the run id")]) -> None:
    """Follow a run until it ends; exit 1 unless it succeeds."""
    exit_unless_succeeded(follow(client_of(ctx), run))


@command
def history(
    ctx: typer.Context,
    run: Annotated[str, typer.Argument(help="the run id")],
    as_json: Annotated[bool, typer.Option("--json", help="print the entries as JSON")] = False,
) -> None:
    """What happened to a run, oldest first: every event and attempt, who did what."""
    client = client_of(ctx)
    entries: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": 1000}
    while True:
        body = client.call("GET", f"/v1/runs/{run}/history", params=params).body
        entries.extend(body["entries"])
        if not body.get("next_cursor"):
            break
        params["cursor"] = body["next_cursor"]
    if as_json:
        print_json(entries)
    else:
        out.print(timeline(printable_value(entries)))


@command
def runs(
    ctx: typer.Context,
    workflow: Annotated[str | None, typer.Option(help="only runs of this workflow")] = None,
    status: Annotated[
        str | None, typer.Option(help="RUNNING, SUCCEEDED, FAILED, CANCELLED …")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 20,
    cursor: Annotated[str | None, typer.Option(help="the next page's cursor")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the API's JSON")] = False,
) -> None:
    """List runs, newest first."""
    params: dict[str, Any] = {"limit": limit}
    if workflow:
        params["workflow_id"] = workflow
    if status:
        params["status"] = status.upper()
    if cursor:
        params["cursor"] = cursor
    answer = client_of(ctx).call("GET", "/v1/runs", params=params)
    if as_json:
        print_json(answer.body)
        return
    body = answer.shown
    out.print(runs_table(body["runs"]))
    if body.get("next_cursor"):
        out.print(f"more: composer runs --cursor {body['next_cursor']}", style="dim")


@command
def signal(
    ctx: typer.Context,
    run: Annotated[str, typer.Argument(help="the run id")],
    name: Annotated[str, typer.Argument(help="the signal (a WAIT_FOR_EVENT node's event)")],
    data: JsonOption = None,
    idempotency_key: Annotated[
        str | None,
        typer.Option(
            "--idempotency-key",
            help="sent again with the same key (after a lost answer), the signal changes nothing",
        ),
    ] = None,
) -> None:
    """Send a signal with an optional JSON payload."""
    payload = read_json(data, "--data")
    content = json.dumps(payload).encode() if data is not None else b""
    body = (
        client_of(ctx)
        .call(
            "POST",
            f"/v1/runs/{run}/signals/{name}",
            content=content,
            content_type="application/json",
            headers={"Idempotency-Key": idempotency_key} if idempotency_key else None,
        )
        .shown
    )
    if body["delivered"]:
        out.print(f"signal {name} delivered")
    else:
        out.print(f"signal {name} buffered: no node waits for it yet")


@command
def cancel(
    ctx: typer.Context,
    run: Annotated[str, typer.Argument(help="the run id")],
    reason: Annotated[str, typer.Option(help="recorded as the run's error")] = "",
) -> None:
    """Cancel a run."""
    body = client_of(ctx).call("POST", f"/v1/runs/{run}/cancel", json={"reason": reason}).shown
    out.print(f"run {body['run_id']} {body['status']}")


@command
def retry(
    ctx: typer.Context,
    run: Annotated[str, typer.Argument(help="the run id")],
    from_node: Annotated[str, typer.Option("--from", help="the node to run again from")],
    version: Annotated[
        int | None, typer.Option(help="0: the deployed version; N: version N; default: the run's")
    ] = None,
    input: JsonOption = None,
    config: JsonOption = None,
    wait: Annotated[bool, typer.Option(help="show progress until the run ends")] = False,
) -> None:
    """Run a finished run again from a node (it and every node after it)."""
    client = client_of(ctx)
    body: dict[str, Any] = {"from_node": from_node}
    for key, value in (
        ("version", version),
        ("input", read_json(input, "--input")),
        ("config", read_json(config, "--config")),
    ):
        if value is not None:
            body[key] = value
    answer = client.call("POST", f"/v1/runs/{run}/retry", json=body).shown
    out.print(f"run {answer['run_id']} {answer['status']} from {from_node}")
    if wait:
        exit_unless_succeeded(follow(client, run))


# -- task logs -----------------------------------------------------------------


@command
def logs(
    ctx: typer.Context,
    run: Annotated[str, typer.Argument(help="the run id")],
    node: Annotated[str | None, typer.Option("--node", help="only this node's attempts")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the API's JSON")] = False,
) -> None:
    """Print what a run's task attempts logged (PYTHON nodes' prints, ctx.logger records)."""
    params = {"node": node} if node else None
    answer = client_of(ctx).call("GET", f"/v1/runs/{run}/logs", params=params)
    if as_json:
        print_json(answer.body)
        return
    body = answer.shown
    if body.get("redacted"):
        err.print(
            "the lines are redacted: this token is a viewer's and the workflow does not set "
            "viewers_see_payloads: true"
        )
    if not body["logs"]:
        err.print("no task logs" + (f" for node {node}" if node else "") + " in this run")
    for entry in body["logs"]:
        header = f"== {entry['node_id']} attempt {entry['attempt']}"
        if entry.get("truncated"):
            header += f" ({entry['truncated']} lines truncated)"
        out.print(header, style="bold")
        for line in entry.get("lines") or []:
            typer.echo(line)


@command
def migrate(
    url: Annotated[
        str,
        typer.Option(envvar="COMPOSER_DATABASE_URL", help="the database (created if missing)"),
    ] = "postgresql://postgres@127.0.0.1:5432/composer",
) -> None:
    """Create the database if missing and apply the migrations (talks to PostgreSQL directly)."""
    from composer_repo.__main__ import main as repo_main

    code = repo_main(["migrate", "--url", url])
    if code:
        raise typer.Exit(code)


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)
def up(ctx: typer.Context) -> None:
    """Start the whole stack on this machine (what `make run` does); Ctrl-C stops it.

    Options (--state, --grace, --admin-base) go to the supervisor: `composer up --help`.
    """
    from composer_devstack.__main__ import main as devstack_main

    code = devstack_main(list(ctx.args))
    if code:
        raise typer.Exit(code)


# -- workers -------------------------------------------------------------------


@command
def workers(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="print the API's JSON")] = False,
) -> None:
    """List the workers and the queues they serve (from their heartbeats)."""
    answer = client_of(ctx).call("GET", "/v1/workers")
    if as_json:
        print_json(answer.body)
        return
    body = answer.shown
    if not body["workers"]:
        out.print("no worker has sent a heartbeat (in the last day)")
        return
    out.print(workers_table(body["workers"]))


# -- following a run -------------------------------------------------------------


def print_json(body: Any) -> None:
    typer.echo(json_text(body))


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

    if not show:
        while (run := read())["status"] not in TERMINAL:
            pass
        return run
    if out.is_terminal:
        with Live(console=out, auto_refresh=False) as live:
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
        raise typer.Exit(1)


def main() -> int:
    """The console script."""
    app()
    return 0  # pragma: no cover - app() exits


if __name__ == "__main__":
    sys.exit(main())
