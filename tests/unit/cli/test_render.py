"""How the CLI lays out runs: a multi-line error (a traceback) never breaks a table's
rows, and is printed in full once."""

from __future__ import annotations

import datetime as dt
import io
import json
from typing import Any

from rich.console import Console

from composer_cli.render import changes, json_text, printable, run_view, runs_table, summary
from tests.unit.cli.runner import invoke

TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "handler.py", line 3, in charge\n'
    "    raise ValueError('card declined')\n"
    "ValueError: card declined"
)


def rendered(thing: Any, width: int = 200) -> str:
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(thing)
    return console.export_text()


def a_run(run_id: str, status: str, error: str | None, **extra: Any) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "workflow_id": "payment",
        "version": 2,
        "status": status,
        "created_at": "2026-12-01T09:00:00Z",
        "completed_at": "2026-12-01T09:00:03Z",
        "error": error,
        **extra,
    }


def test_summary_is_the_first_line_with_an_ellipsis_when_something_was_left_out() -> None:
    assert summary("card declined") == "card declined"
    assert summary(TRACEBACK) == "Traceback (most recent call last):…"
    assert summary("\n\n  first  \nsecond") == "first…"
    assert summary("x" * 50, 10) == "x" * 9 + "…"
    assert summary("") == ""


def test_a_multi_line_error_keeps_the_runs_table_one_row_per_run() -> None:
    runs = [
        a_run("0190a000-0000-7000-8000-000000000001", "FAILED", f"node charge failed: {TRACEBACK}"),
        a_run("0190a000-0000-7000-8000-000000000002", "SUCCEEDED", None),
        a_run("0190a000-0000-7000-8000-000000000003", "FAILED", "x" * 300),
    ]
    lines = runs_table(runs, width=200)
    assert len(lines) == 4  # the header and one line per run
    header, failed, succeeded, long = lines
    # every column starts where the header says it does
    for column in ("workflow", "status", "created", "error"):
        at = header.index(column)
        assert failed[at - 1] == " " and failed[at] != " ", column
    assert failed.rstrip().endswith("node charge failed: Traceback (most recent call last):…")
    assert "SUCCEEDED" in succeeded
    assert long.rstrip().endswith("…") and "x" * 300 not in long


def test_at_80_columns_the_runs_table_cuts_no_name_and_no_status() -> None:
    runs = [
        a_run("0190a000-0000-7000-8000-000000000001", "SUCCEEDED", None),
        a_run("0190a000-0000-7000-8000-000000000002", "FAILED", "the bank said no " * 5),
    ]
    runs[1]["workflow_id"] = "order-fulfilment"
    lines = runs_table(runs, width=80, today=dt.date(2026, 12, 1))
    assert all(len(line) <= 80 for line in lines), lines
    assert lines[1].split()[:3] == ["0190a000-0000-7000-8000-000000000001", "payment", "v2"]
    assert lines[1].split()[3] == "SUCCEEDED"
    assert lines[2].split()[:4] == [
        "0190a000-0000-7000-8000-000000000002",
        "order-fulfilment",
        "v2",
        "FAILED",
    ]
    assert "…" not in "".join(lines[1:])  # the error is left out before anything is cut
    assert lines[0].split() == ["run", "workflow", "status", "created"]
    # a day later the date takes room, and "created" goes before anything is cut
    later = runs_table(runs, width=80, today=dt.date(2026, 12, 2))
    assert later[0].split() == ["run", "workflow", "status"]
    assert all(len(line) <= 80 for line in later) and "…" not in "".join(later[1:])
    # wider, the error and the duration come back
    assert runs_table(runs, width=120)[0].split() == [
        "run",
        "workflow",
        "status",
        "created",
        "took",
        "error",
    ]


def test_created_is_the_time_today_and_the_day_before() -> None:
    run = a_run("r", "SUCCEEDED", None)
    today = runs_table([run], today=dt.date(2026, 12, 1), width=200)[1]
    later = runs_table([run], today=dt.date(2026, 12, 2), width=200)[1]
    assert " 09:00:00 " in today and " 12-01 09:00 " in later


def test_a_failed_run_shows_its_error_in_full_once() -> None:
    run = a_run(
        "r1",
        "FAILED",
        f"node charge failed: {TRACEBACK}",
        tasks=[
            {
                "node_id": "charge",
                "type": "TASK",
                "state": "FAILED",
                "attempt": 2,  # the third: the API counts from 0
                "created_at": "2026-12-01T09:00:00Z",
                "finished_at": "2026-12-01T09:00:03Z",
                "error": TRACEBACK,
            }
        ],
    )
    text = rendered(run_view(run))
    assert text.count("ValueError: card declined") == 1
    assert "error: node charge failed: Traceback (most recent call last):" in text
    progress = changes(None, run)
    assert progress == [
        "charge FAILED (attempt 3): Traceback (most recent call last):…",
        "run FAILED",
    ]


def test_version_prints_the_package_version() -> None:
    result = invoke(["--version"])
    assert result.exit_code == 0
    assert result.output == "composer 0.1.0\n"


def test_printable_keeps_tabs_and_line_feeds_and_drops_every_other_control() -> None:
    controls = "".join(chr(c) for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)])
    assert printable(f"a{controls}b\r\nc") == "a\t\nb\nc"
    assert printable("\x1b]0;title\x07\x1b[2Jclear\x9b31m") == "]0;title[2Jclear31m"
    assert printable("é ü 日本 \u2028 ok") == "é ü 日本 \u2028 ok"  # not controls: kept


def test_json_text_escapes_every_control_and_means_the_same() -> None:
    value = {"e\x1bk": ["\x00\x1b[2J\x7f\x85\x9b", "é\tx\n"]}
    text = json_text(value)
    assert json.loads(text) == value
    assert not [c for c in text if c not in "\n" and (ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0)]
    assert "\\u009b" in text and "\\u007f" in text and "\\u001b" in text
