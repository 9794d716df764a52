"""composer get links a run to its parent and its children (SUB_WORKFLOW): each with
the run id to get next."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from composer_cli.render import run_view


def run(**extra: Any) -> dict[str, Any]:
    return {
        "run_id": "r1",
        "status": "RUNNING",
        "workflow_id": "orders",
        "version": 2,
        "created_at": "2030-01-01T00:00:00Z",
        "tasks": [],
        **extra,
    }


def shown(renderable: Any) -> str:
    console = Console(width=200, record=True, highlight=False)
    console.print(renderable)
    return console.export_text()


def test_a_child_names_its_parent_and_the_node_attempt_that_started_it() -> None:
    parent = {"run_id": "p1", "node_id": "fulfil", "task_id": "t1", "attempt": 1}
    assert "parent: run p1 (node fulfil, attempt 2)" in shown(run_view(run(parent=parent)))


def test_a_parent_lists_its_children_with_status_and_policy() -> None:
    children = [
        {
            "run_id": "c1",
            "workflow_id": "line",
            "version": 3,
            "status": "FAILED",
            "node_id": "fulfil",
            "attempt": 0,
            "on_parent_cancel": "cancel",
        },
        {
            "run_id": "c2",
            "workflow_id": "audit",
            "version": 1,
            "status": "RUNNING",
            "node_id": "log",
            "attempt": 0,
            "on_parent_cancel": "abandon",
        },
    ]
    text = shown(run_view(run(children=children)))
    assert "child: run c1 FAILED  line v3 (node fulfil, attempt 1)" in text
    assert "child: run c2 RUNNING  audit v1 (node log, attempt 1, abandoned on cancel)" in text
    assert "parent:" not in text
