"""A run's history (GET /v1/runs/{id}/history) as a timeline a person reads.

One line per entry: when, which node, what happened — with who did it, the
attempt and its duration, an error's first line. The API's words for the
kinds (task.retry_scheduled…) are turned into phrases here only.
"""

from __future__ import annotations

import json
from typing import Any

from rich.table import Table
from rich.text import Text

from composer_cli.render import REDACTED, compact, parse_time

_STYLES = {
    "task.completed": "green",
    "task.failed": "red",
    "task.retry_scheduled": "yellow",
    "task.cancelled": "yellow",
    "run.finished": "bold",
    "run.cancelled": "yellow",
    "run.retried": "cyan",
    "run.paused": "magenta",
    "run.resumed": "cyan",
    "run.started": "bold",
}


def timeline(entries: list[dict[str, Any]]) -> Table:
    """The entries, oldest first, as a table: time, node, what happened."""
    table = Table(box=None, pad_edge=False, show_header=True, header_style="dim")
    table.add_column("time", no_wrap=True, style="dim")
    table.add_column("node", no_wrap=True)
    table.add_column("what")
    day = None
    for entry in entries:
        at = parse_time(entry.get("at"))
        stamp = ""
        if at is not None:
            stamp = at.strftime("%H:%M:%S.%f")[:-3]
            if at.date() != day:  # the date once, then when it changes
                day = at.date()
                stamp = f"{day.isoformat()} {stamp}"
        table.add_row(
            stamp,
            entry.get("node_id") or "",
            Text(describe(entry), style=_STYLES.get(entry.get("kind", ""), "")),
        )
    return table


def describe(entry: dict[str, Any]) -> str:
    """One entry in words, e.g. "attempt 1 failed after 12ms: ValueError: paid 5 of 21"."""
    kind = str(entry.get("kind", ""))
    detail: dict[str, Any] = entry.get("detail") or {}
    # the API counts attempts from 0, as a task's; people count them from 1
    attempt = None if entry.get("attempt") is None else entry["attempt"] + 1
    by = f" by {entry['actor']}" if entry.get("actor") else ""
    took = _took(entry.get("duration_ms"))
    error = _first_line(detail.get("error"), entry)
    match kind:
        case "run.started":
            start = f" from {detail['start_node']}" if detail.get("start_node") else ""
            return f"run started{by} on v{detail.get('version')}{start}, input {_value(detail, 'input', entry)}"
        case "task.scheduled":
            return _scheduled(detail, error)
        case "task.dispatched":
            if detail.get("again"):
                return f"dispatched again to queue {detail.get('queue')}: {detail['again']}"
            return f"dispatched to queue {detail.get('queue')}"
        case "task.leased":
            return f"attempt {attempt} leased{by}"
        case "task.completed":
            return f"attempt {attempt} completed{took}" if attempt else "completed"
        case "task.failed":
            head = f"attempt {attempt} failed{took}" if attempt else "failed"
            return f"{head}: {error}" if error else head
        case "task.retry_scheduled":
            when = f", retry at {detail['retry_at']}" if detail.get("retry_at") else ""
            return f"attempt {attempt} failed{took}: {error}{when}"
        case "task.cancelled":
            reason = _first_line(detail.get("reason"), entry) or _first_line(
                detail.get("error"), entry
            )
            return f"cancelled: {reason}" if reason else "cancelled"
        case "timer.fired":
            return "timer fired"
        case "signal.received":
            kept = " (buffered: no node waits for it yet)" if detail.get("buffered") else ""
            if detail.get("paused"):
                kept = " (kept: the run is paused)"
            return f"signal {detail.get('name')} received{by}{kept}"
        case "signal.consumed":
            return f"took signal {detail.get('name')}"
        case "run.cancelled":
            reason = _first_line(detail.get("reason"), entry)
            return f"run cancelled{by}" + (f": {reason}" if reason else "")
        case "task.held":
            return f"held: {detail.get('reason')}"
        case "task.released":
            return f"released to queue {detail.get('queue')}"
        case "run.paused":
            reason = _first_line(detail.get("reason"), entry)
            return f"run paused{by}" + (f": {reason}" if reason else "")
        case "run.resumed":
            return f"run resumed{by}"
        case "run.retried":
            version = f" on v{detail['version']}" if detail.get("version") is not None else ""
            return f"run retried from {detail.get('from_node')}{by}{version}"
        case "run.finished":
            status = str(detail.get("status", "")).lower()
            return f"run {status}" + (f": {error}" if error else "")
    return kind + (f" {json.dumps(detail, ensure_ascii=False)}" if detail else "")


def _scheduled(detail: dict[str, Any], error: str) -> str:
    node_type, state = detail.get("type", "task"), detail.get("state", "")
    wake_at = parse_time(detail.get("wake_at"))
    until = "" if wake_at is None else wake_at.strftime("%Y-%m-%d %H:%M:%S")
    if state == "WAITING" and detail.get("signal"):
        return f"waiting for signal {detail['signal']}" + (f" (times out {until})" if until else "")
    if state == "WAITING":
        return f"sleeping until {until}" if until else "waiting"
    if detail.get("branches") is not None:
        return f"{node_type} chose {', '.join(detail['branches']) or 'no branch'}"
    if state == "FAILED":
        return f"{node_type} failed" + (f": {error}" if error else "")
    if state in ("COMPLETED", "SKIPPED"):
        return f"{node_type} {state.lower()}"
    # created and sent at once: one row says both (a dispatch of its own has its row)
    sent = f", dispatched to queue {detail['queue']}" if detail.get("queue") else ""
    return f"scheduled ({node_type}){sent}"


def _took(ms: float | None) -> str:
    if ms is None:
        return ""
    return f" after {ms:.0f}ms" if ms < 1000 else f" after {ms / 1000:.1f}s"


def _first_line(value: Any, entry: dict[str, Any]) -> str:
    if value is None:
        return REDACTED if entry.get("redacted") else ""
    lines = str(value).strip().splitlines()
    first = lines[0] if lines else ""
    return first + (" …" if len(lines) > 1 else "")


def _value(detail: dict[str, Any], key: str, entry: dict[str, Any]) -> str:
    if detail.get(key) is None and entry.get("redacted"):
        return REDACTED
    return compact(detail.get(key), 60)
