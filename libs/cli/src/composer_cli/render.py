"""How runs, tasks and listings look in a terminal, and as plain progress lines.

Listings (runs, workflows, workers) are plain text fitted to the terminal
(``columns``); a run's view and its history use rich, imported only by the
commands that print them, so that ``composer`` starts quickly.

Whatever the API sends is somebody else's text: a node's error, a log line, a
worker's host name, a cancel reason. Printed as it is, an ESC or a C1 control
in it drives the terminal (sets its title, clears the screen, hides the lines
before, rewrites the clipboard), so the commands print it through
:func:`printable` (the person's view) or :func:`json_text` (``--json``).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import TYPE_CHECKING, Any

from composer_cli.columns import Column, table

if TYPE_CHECKING:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

TERMINAL = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})
#: What stands for a payload the API redacted (a viewer token; docs: viewers_see_payloads).
REDACTED = "redacted"
_STYLES = {
    "SUCCEEDED": "green",
    "COMPLETED": "green",
    "FAILED": "red",
    "CANCELLED": "yellow",
    "SKIPPED": "dim",
    "RUNNING": "cyan",
    "PAUSED": "magenta",
    "WAITING": "magenta",
    "PENDING": "blue",
    "QUEUED": "blue",
}


#: What may drive a terminal: C0 controls but tab and line feed, DEL, and C1 controls
#: (U+0080 to U+009F: a terminal may read U+009B as CSI, as it reads ESC [).
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
#: In JSON text every C0 control is escaped already; these are not.
_UNESCAPED_IN_JSON = re.compile("[\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` with every control character removed but tab and line feed (CR too, so a
    CRLF ends a line as LF): ESC, BEL, CSI, OSC and the rest cannot reach the terminal,
    and what they wrapped shows as plain text."""
    return _CONTROLS.sub("", text)


def printable_value(value: Any) -> Any:
    """An API answer (JSON) with :func:`printable` applied to every string and key."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {printable(str(k)): printable_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [printable_value(v) for v in value]
    return value


def json_text(value: Any) -> str:
    """``value`` as indented JSON that is safe to print and means the same: C0 controls
    are escaped by JSON itself, and DEL and the C1 controls are escaped here (``\\u009b``)."""
    text = json.dumps(value, indent=2, ensure_ascii=False)
    return _UNESCAPED_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def styled(state: str) -> Text:
    from rich.text import Text

    return Text(state, style=_STYLES.get(state, ""))


def parse_time(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


def duration(start: str | None, end: str | None) -> str:
    begun = parse_time(start)
    if begun is None:
        return ""
    ended = parse_time(end) or dt.datetime.now(dt.UTC)
    seconds = max((ended - begun).total_seconds(), 0.0)
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 120:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def compact(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def summary(text: str, limit: int = 120) -> str:
    """An error as one line: its first non-blank line, cut to ``limit`` characters, with
    an ellipsis when anything (more lines, or the rest of a long line) was left out.

    A traceback or a multi-line message in a table cell would break the table's rows
    and columns; the whole text stays in ``composer get RUN`` and ``--json``.
    """
    lines = [line.strip() for line in text.strip().splitlines()]
    first = next((line for line in lines if line), "")
    cut = len(first) > limit or sum(1 for line in lines if line) > 1
    if not cut:
        return first
    return first[: limit - 1].rstrip() + "…"


def audit_line(run: dict[str, Any]) -> Text | None:
    """Who started, cancelled and last retried the run (the names of their API tokens),
    and its labels."""
    from rich.text import Text

    parts = [
        f"{what} by {run[key]}"
        for what, key in (
            ("started", "started_by"),
            ("cancelled", "cancelled_by"),
            ("retried", "retried_by"),
        )
        if run.get(key)
    ]
    if run.get("schedule_id"):
        parts.append(f"scheduled by {run['schedule_id']} for {utc_text(run.get('scheduled_for'))}")
    labels = run.get("labels") or {}
    if labels:
        parts.append("labels " + " ".join(f"{k}={labels[k]}" for k in sorted(labels)))
    return Text("  ·  ".join(parts), style="dim") if parts else None


def _failed_error(item: dict[str, Any], failed: bool) -> str:
    """An error to show: the API's, or "redacted" where it withheld one."""
    if item.get("redacted"):
        return REDACTED if failed else ""
    return str(item.get("error") or "")


def signals_table(signals: list[dict[str, Any]]) -> Table:
    from rich.table import Table
    from rich.text import Text

    shown = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("signal", "sent by", "taken by"):
        shown.add_column(column, no_wrap=True)
    shown.add_column("payload", overflow="fold")
    for s in signals:
        payload = Text(REDACTED, style="dim") if s.get("redacted") else compact(s.get("payload"))
        shown.add_row(
            s["name"], s.get("sent_by") or "-", s.get("consumed_by") or "(buffered)", payload
        )
    return shown


def run_view(run: dict[str, Any]) -> Group:
    """The run's header, who acted on it, its error in full, a table of its tasks (state,
    attempt, duration, each error's first line) and one of its signals. Payloads the API
    redacted show as "redacted".

    A run fails with its failed node's error, so a traceback is printed once, in the
    header; the task table and progress lines carry its first line only. At 80 columns
    the names, states and attempts stay whole; the errors fold."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    head = Text.assemble(
        ("run ", "bold"),
        (run["run_id"], "bold"),
        "  ",
        styled(run["status"]),
        f"  {run['workflow_id']} v{run['version']}",
        f"  {duration(run['created_at'], run.get('completed_at'))}",
    )
    lines: list[Any] = [head]
    audit = audit_line(run)
    if audit is not None:
        lines.append(audit)
    lines.extend(family_lines(run))
    error = _failed_error(run, run["status"] in ("FAILED", "CANCELLED"))
    if error:
        lines.append(Text(f"error: {error}", style="red"))
    if run["status"] == "SUCCEEDED" and run.get("redacted"):
        lines.append(Text(f"output: {REDACTED}", style="dim"))
    elif run["status"] == "SUCCEEDED" and run.get("output") is not None:
        lines.append(Text(f"output: {compact(run['output'], 200)}"))
    if run.get("redacted"):
        lines.append(
            Text(
                "input, config, output and errors are redacted for this viewer token",
                style="dim",
            )
        )
    tasks = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("node", "type", "state", "attempt", "duration"):
        tasks.add_column(column, no_wrap=True)
    tasks.add_column("error", overflow="fold", min_width=12)
    for task in run.get("tasks", []):
        tasks.add_row(
            task["node_id"],
            task["type"],
            styled(task["state"]),
            items_text(task) or attempt_text(task),
            duration(task.get("started_at") or task.get("created_at"), task.get("finished_at")),
            Text(
                summary(_failed_error(task, task["state"] in ("FAILED", "CANCELLED"))), style="red"
            ),
        )
    lines.append(tasks)
    lines.extend(items_lines(run))
    lines.extend(waiting_hints(run))
    if run.get("signals"):
        lines.append(Text("signals", style="bold"))
        lines.append(signals_table(run["signals"]))
    return Group(*lines)


def family_lines(run: dict[str, Any]) -> list[Text]:
    """The run's parent (the SUB_WORKFLOW node attempt that started it) and its
    children, each with the run id to ``composer get`` next."""
    from rich.text import Text

    lines: list[Text] = []
    parent = run.get("parent")
    if parent:
        lines.append(
            Text(
                f"parent: run {parent['run_id']} (node {parent['node_id']}, "
                f"attempt {parent['attempt'] + 1})",
                style="dim",
            )
        )
    for child in run.get("children") or []:
        abandoned = ", abandoned on cancel" if child.get("on_parent_cancel") == "abandon" else ""
        lines.append(
            Text.assemble(
                ("child: ", "dim"),
                f"run {child['run_id']} ",
                styled(child["status"]),
                f"  {child['workflow_id']} v{child['version']} (node {child['node_id']}, "
                f"attempt {child['attempt'] + 1}{abandoned})",
            )
        )
    return lines


def waiting_hints(run: dict[str, Any]) -> list[Text]:
    """Why the run or its tasks wait, as the API says: the run for a slot of its
    concurrency key, a task for a queue no live worker serves or a limit."""
    from rich.text import Text

    lines = (
        [Text(f"run waits: {run['waiting_hint']}", style="yellow")]
        if run.get("waiting_hint")
        else []
    )
    return lines + [
        Text(f"{task['node_id']} waits: {task['waiting_hint']}", style="yellow")
        for task in run.get("tasks", [])
        if task.get("waiting_hint")
    ]


def workers_table(workers: list[dict[str, Any]], *, width: int | None = None) -> list[str]:
    """The workers (GET /v1/workers): who serves which queues, its status, when each was
    last seen, how busy it is (tasks held / concurrency), its host and SDK version. At
    80 columns the SDK version goes first, then the host."""
    return table(
        (
            Column("worker"),  # ids are copied: never cut
            Column("queues"),
            Column("status"),
            Column("seen", keep=4, right=True),
            Column("busy", keep=3, right=True),  # tasks held / concurrency
            Column("host", keep=2),
            Column("sdk", keep=1),
        ),
        [
            (
                w["worker_id"],
                ", ".join(w["queues"]) or "-",
                (w["status"], _WORKER_STYLES.get(w["status"], "")),
                f"{ago(w['last_seen_seconds_ago'])} ago",
                f"{w['in_flight']}/{w['concurrency']}",
                w["host"],
                w["sdk_version"],
            )
            for w in workers
        ],
        columns_wide=width,
    )


def items_table(items: list[dict[str, Any]], *, width: int | None = None) -> list[str]:
    """A MAP node's items (GET /v1/runs/{id}/tasks/{node}/items): index, state, attempt,
    duration and the first line of an error. At 80 columns the error is cut first."""
    return table(
        (
            Column("item", right=True),
            Column("state"),
            Column("attempt"),
            Column("duration", keep=2, right=True),
            Column("error", flex=True),
        ),
        [
            (
                str(t["item"]),
                (t["state"], _STYLES.get(t["state"], "")),
                attempt_text(t),
                duration(t.get("started_at"), t.get("finished_at")) if t.get("started_at") else "-",
                summary(_failed_error(t, t["state"] in ("FAILED", "CANCELLED"))) or "",
            )
            for t in items
        ],
        columns_wide=width,
    )


def limits_table(limits: list[dict[str, Any]], *, width: int | None = None) -> list[str]:
    """The keys of the limits holding work back (GET /v1/limits): the workflow, the key,
    what it limits (runs, attempts, or tokens per period for a rate limit), in use out
    of the limit, and how many wait."""
    return table(
        (
            Column("workflow"),
            Column("key"),
            Column("limits"),
            Column("in use", right=True),
            Column("waiting", right=True),
        ),
        [
            (
                item["workflow_id"] or "(global)",
                "(hidden)" if item.get("redacted") else (item["key"] or "(one key)"),
                _LIMIT_KINDS.get(item["kind"], item["kind"])
                + (f" per {item['per_seconds']:g}s" if item.get("per_seconds") else ""),
                f"{item['in_use']}/{'?' if item['limit'] is None else item['limit']}",
                str(item["waiting"]),
            )
            for item in limits
        ],
        columns_wide=width,
    )


_LIMIT_KINDS = {
    "run_concurrency": "runs",
    "node_concurrency": "attempts",
    "rate_limit": "tokens",
}

_WORKER_STYLES = {"SERVING": "green", "DRAINING": "yellow", "STOPPED": "dim", "LOST": "red"}


def ago(seconds: float) -> str:
    """A short duration: 3s, 5m, 2h10m, 3d."""
    s = int(max(0.0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        hours, minutes = divmod(s // 60, 60)
        return f"{hours}h{minutes:02d}m" if minutes else f"{hours}h"
    return f"{s // 86400}d"


def items_text(task: dict[str, Any]) -> str | None:
    """A MAP node's progress, its items finished of all ("37 / 100"); None for others."""
    items = task.get("items")
    if not items:
        return None
    return f"{items['finished']} / {items['total']}"


def items_lines(run: dict[str, Any]) -> list[Text]:
    """Under the tasks: each MAP node's items by state, and where to list them."""
    from rich.text import Text

    lines = []
    for task in run.get("tasks", []):
        items = task.get("items")
        if not items:
            continue
        counts = ", ".join(f"{n} {state}" for state, n in sorted(items["counts"].items()))
        lines.append(
            Text(
                f"{task['node_id']} items: {items_text(task)}"
                + (f" ({counts})" if counts else "")
                + f" — composer items {run['run_id']} {task['node_id']}",
                style="dim",
            )
        )
    return lines


def attempt_text(task: dict[str, Any]) -> str:
    """The attempt as people count it, from 1, with the node's allowance when it has
    one ("2 of 3"): the API's ``attempt`` counts from 0, the UI shows the same text."""
    shown = f"{task['attempt'] + 1}"
    limit = task.get("max_attempts")
    return f"{shown} of {limit}" if limit else shown


def created_text(value: str | None, today: dt.date | None = None) -> str:
    """When a run was made (UTC, as ``composer history``): the time alone today, else the
    day and the minute."""
    created = parse_time(value)
    if created is None:
        return ""
    if created.date() == (today or dt.datetime.now(dt.UTC).date()):
        return created.strftime("%H:%M:%S")
    return created.strftime("%m-%d %H:%M")


def runs_table(
    runs: list[dict[str, Any]], *, today: dt.date | None = None, width: int | None = None
) -> list[str]:
    """One line per run: its id, workflow and version, status, when it was made (UTC), how
    long it took and its error's first line. At 80 columns the error takes what is left
    (cut with "…"; ``composer get RUN`` has it whole), then the duration goes."""
    return table(
        (
            Column("run"),  # ids are copied: never cut
            Column("workflow"),
            Column("status"),
            Column("created", keep=2),
            Column("took", keep=1, right=True),
            Column("error", flex=True),
        ),
        [
            (
                run["run_id"],
                f"{run['workflow_id']} v{run['version']}",
                (run["status"], _STYLES.get(run["status"], "")),
                created_text(run["created_at"], today),
                duration(run["created_at"], run.get("completed_at")),
                (
                    summary(_failed_error(run, run["status"] in ("FAILED", "CANCELLED")), 80),
                    "red",
                ),
            )
            for run in runs
        ],
        columns_wide=width,
    )


def workflows_table(workflows: list[dict[str, Any]], *, width: int | None = None) -> list[str]:
    return table(
        (
            Column("workflow"),
            Column("latest", keep=2, right=True),
            Column("deployed", keep=3, right=True),
            Column("name", flex=True, least=8),
        ),
        [
            (
                w["id"],
                str(w["latest_version"]),
                str(w["deployed_version"]) if w.get("deployed_version") else "-",
                w["name"],
            )
            for w in workflows
        ],
        columns_wide=width,
    )


def changes(before: dict[str, Any] | None, after: dict[str, Any]) -> list[str]:
    """Plain progress lines for what changed between two reads of a run (for logs, not terminals)."""
    old = {
        t["node_id"]: (t["state"], t["attempt"], items_text(t))
        for t in (before or {}).get("tasks", [])
    }
    lines = []
    for task in after.get("tasks", []):
        now = (task["state"], task["attempt"], items_text(task))
        if old.get(task["node_id"]) != now:
            attempt = f" (attempt {attempt_text(task)})" if task["attempt"] else ""
            if items_text(task):
                attempt = f" ({items_text(task)} items)"
            stopped = task["state"] in ("FAILED", "CANCELLED")
            error = f": {summary(str(task['error']))}" if task.get("error") and stopped else ""
            lines.append(f"{task['node_id']} {task['state']}{attempt}{error}")
    hinted = {t["node_id"]: t.get("waiting_hint") for t in (before or {}).get("tasks", [])}
    for task in after.get("tasks", []):
        if task.get("waiting_hint") and hinted.get(task["node_id"]) != task["waiting_hint"]:
            lines.append(f"{task['node_id']} waits: {task['waiting_hint']}")
    if before is None or before["status"] != after["status"]:
        lines.append(f"run {after['status']}")
    return lines


# -- schedules -----------------------------------------------------------------------


def utc_text(value: str | None) -> str:
    """A time from the API as ``2026-12-03 01:00:00 UTC`` ("-" for none)."""
    at = parse_time(value)
    if at is None:
        return "-"
    return at.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def local_text(value: str | None, timezone: str) -> str:
    """The time in the schedule's time zone, ``02:00 Europe/Berlin`` ('' for UTC or none)."""
    at = parse_time(value)
    if at is None or timezone.upper() == "UTC":
        return ""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        local = at.astimezone(ZoneInfo(timezone))
    except (ZoneInfoNotFoundError, ValueError):
        return ""
    return local.strftime(f"%a %Y-%m-%d %H:%M:%S {timezone}")


def when_text(schedule: dict[str, Any]) -> str:
    """When it fires: ``cron 0 2 * * * (Europe/Berlin)`` or ``every 30s``."""
    if schedule.get("cron"):
        zone = schedule.get("timezone") or "UTC"
        return f"cron {schedule['cron']}" + ("" if zone == "UTC" else f" ({zone})")
    return f"every {schedule.get('every_seconds')}s"


def schedules_table(schedules: list[dict[str, Any]], *, width: int | None = None) -> list[str]:
    """One line per schedule: id, workflow, when it fires, paused or its next fire (UTC),
    and its fires started / skipped / missed."""
    return table(
        (
            Column("schedule"),
            Column("workflow"),
            Column("fires", flex=True, least=10),
            Column("next (UTC)", keep=3),
            Column("started", keep=2, right=True),
            Column("skipped", keep=1, right=True),
            Column("missed", keep=1, right=True),
        ),
        [
            (
                s["id"],
                s["workflow_id"],
                when_text(s),
                ("paused", "yellow") if s["paused"] else utc_text(s.get("next_fire_at"))[:-4],
                str(s["fired"]),
                (str(s["skipped"]), "yellow" if s["skipped"] else ""),
                (str(s["missed"]), "red" if s["missed"] else ""),
            )
            for s in schedules
        ],
        columns_wide=width,
    )


def schedule_lines(
    schedule: dict[str, Any], runs: list[dict[str, Any]], *, width: int | None = None
) -> list[str]:
    """A schedule for a person: what it starts and when, its next five fire times (UTC
    and its own time zone), its last runs, what happened lately (skipped and missed
    fires included) and its backfills."""
    s = schedule
    state = "paused" if s["paused"] else "active"
    lines = [
        f"schedule {s['id']}  {state}  starts {s['workflow_id']}  {when_text(s)}",
        f"  overlap {s['overlap']}  catch-up {s['catchup_window_seconds']}s  "
        f"jitter {s['jitter_seconds']}s  source {s['source']}"
        + (f"  created by {s['created_by']}" if s.get("created_by") else ""),
        "  input " + (REDACTED if s.get("redacted") else compact(s.get("input") or {}, 200)),
        f"  fires: {s['fired']} started, {s['skipped']} skipped, {s['missed']} missed"
        + (f"; one buffered for {utc_text(s['buffered_for'])}" if s.get("buffered_for") else ""),
        "",
        "next fires" + ("" if s.get("next_fires") else ": none (paused)"),
    ]
    for fire in s.get("next_fires") or []:
        local = local_text(fire, s.get("timezone") or "UTC")
        lines.append(f"  {utc_text(fire)}" + (f"  ({local})" if local else ""))
    lines += ["", "last runs" + ("" if runs else ": none yet")]
    if runs:
        lines += ["  " + line for line in runs_table(runs, width=(width or 120) - 2)]
    events = s.get("events") or []
    lines += ["", "events (newest first)" + ("" if events else ": none")]
    if events:
        lines += [
            "  " + line
            for line in table(
                (
                    Column("at (UTC)"),
                    Column("event"),
                    Column("for (UTC)", keep=2),
                    Column("run", keep=1),
                    Column("by", keep=3),
                    Column("detail", flex=True),
                ),
                [
                    (
                        utc_text(e["at"])[:-4],
                        (e["kind"], _EVENT_STYLES.get(e["kind"], "")),
                        utc_text(e.get("scheduled_for"))[:-4] if e.get("scheduled_for") else "-",
                        e.get("run_id") or "-",
                        e.get("actor") or "-",
                        summary(e.get("detail") or "", 200),
                    )
                    for e in events
                ],
                columns_wide=(width or 160) - 2,
            )
        ]
    for b in s.get("backfills") or []:
        state = "done" if b["done"] else "going"
        lines.append(
            f"backfill {b['id']}  {utc_text(b['start'])} to {utc_text(b['end'])}  "
            f"{b['overlap']}  {state}: {b['started']} started, {b['skipped']} skipped "
            f"of {b['total']}"
        )
    return lines


_EVENT_STYLES = {
    "fired": "green",
    "triggered": "green",
    "skipped": "yellow",
    "buffered": "yellow",
    "missed": "red",
    "failed": "red",
    "paused": "magenta",
}
