"""How the CLI shows a task that waits on a queue no live worker serves: under the run's
task table (composer get, watch on a terminal) and as a progress line (watch in a pipe)."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from composer_cli.render import changes, run_view, workers_table

HINT = "no worker has ever served queue 'payments': start a worker with a handler for it"


def run(state: str, hint: str | None, status: str = "RUNNING") -> dict[str, Any]:
    return {
        "run_id": "r1",
        "status": status,
        "workflow_id": "wf",
        "version": 1,
        "created_at": "2030-01-01T00:00:00Z",
        "tasks": [
            {
                "node_id": "charge",
                "type": "TASK",
                "state": state,
                "attempt": 0,
                "created_at": "2030-01-01T00:00:00Z",
                "waiting_hint": hint,
            }
        ],
    }


def shown(renderable: Any) -> str:
    console = Console(width=200, record=True, highlight=False)
    console.print(renderable)
    return console.export_text()


def test_the_run_view_says_why_a_task_waits() -> None:
    assert f"charge waits: {HINT}" in shown(run_view(run("QUEUED", HINT)))
    assert "waits:" not in shown(run_view(run("RUNNING", None)))


def test_watch_prints_the_hint_once_when_it_appears() -> None:
    first = changes(None, run("QUEUED", HINT))
    assert f"charge waits: {HINT}" in first
    assert changes(run("QUEUED", HINT), run("QUEUED", HINT)) == []
    done = changes(run("QUEUED", HINT), run("COMPLETED", None, "SUCCEEDED"))
    assert not any("waits:" in line for line in done)


def test_the_workers_table_shows_queues_status_and_load() -> None:
    text = "\n".join(
        workers_table(
            [
                {
                    "worker_id": "host-1-42-abc",
                    "host": "host-1",
                    "queues": ["mail", "payments"],
                    "status": "LOST",
                    "last_seen_seconds_ago": 125.0,
                    "concurrency": 8,
                    "in_flight": 3,
                    "sdk_version": "0.1.0",
                }
            ],
            width=200,
        )
    )
    row = next(line for line in text.splitlines() if "host-1-42-abc" in line)
    for part in ("mail, payments", "LOST", "2m ago", "3/8", "0.1.0"):
        assert part in row


def test_at_80_columns_the_workers_table_cuts_no_queue_and_no_status() -> None:
    worker = {
        "worker_id": "payments-host-7-31337-1a2b3c",
        "host": "payments-host-7.eu-west.example.internal",
        "queues": ["payments", "refunds", "invoices"],
        "status": "DRAINING",
        "last_seen_seconds_ago": 3.0,
        "concurrency": 16,
        "in_flight": 12,
        "sdk_version": "0.1.0",
    }
    lines = workers_table([worker], width=80)
    assert all(len(line) <= 80 for line in lines), lines
    assert "payments-host-7-31337-1a2b3c  payments, refunds, invoices  DRAINING" in lines[1]
    assert "…" not in lines[1]  # the host and SDK columns go before anything is cut
