"""A worker node's limit keys may be templates (docs/architecture.md §4.12): each task's
keys are rendered when it is created, as its input is, and stored with it; a MAP's
inner node may carry limits, rendered per item (with ``item`` and ``index``)."""

from __future__ import annotations

from typing import Any

import pytest

from composer_core.errors import DefinitionInvalid
from composer_core.model import RenderedKeys, TaskState, WorkflowSpec, validate
from composer_core.statemachine import CreateTask, DispatchTask
from tests.unit.core.harness import Harness, edge, make_dag, node, of_type, task


def _problems(nodes: list[dict[str, Any]]) -> dict[str, str]:
    spec = WorkflowSpec.model_validate({"id": "calls", "nodes": nodes})
    return {p.path: p.message for p in validate(spec)}


def test_a_templated_key_is_rendered_from_the_input_when_the_task_is_created() -> None:
    dag = make_dag(
        [
            task(
                "call",
                concurrency={"key": "{{input.customer}}", "max": 1, "scope": "global"},
                rate_limit={"key": "partner-{{input.partner}}", "limit": 5, "per_seconds": 1},
            )
        ]
    )
    line = dag.node_line("call")
    assert line is not None and line.templated and line.max == 1
    assert line.rate is not None and (line.rate.limit, line.rate.per_seconds) == (5, 1)
    h = Harness(dag, input={"customer": "acme", "partner": 7})
    tr = h.start()
    (created,) = of_type(tr, CreateTask)
    assert created.keys == RenderedKeys("global:acme", "rate:partner-7")
    assert len(of_type(tr, DispatchTask)) == 1
    rendered = line.with_keys(created.keys)
    assert not rendered.templated and rendered.key == "global:acme"
    assert rendered.rate is not None and rendered.rate.key == "rate:partner-7"


def test_plain_names_render_nothing_and_a_workflow_key_is_scoped() -> None:
    dag = make_dag(
        [
            task(
                "call",
                concurrency={"key": "{{input.customer}}", "max": 2},
                rate_limit={"key": "partner", "limit": 5, "per_seconds": 1},
            ),
            task("plain", concurrency={"key": "k", "max": 1}),
        ],
        [edge("call", "plain")],
    )
    h = Harness(dag, input={"customer": 42})
    tr = h.start()
    (created,) = of_type(tr, CreateTask)
    # the rate key is a name: only the templated key is rendered
    assert created.keys == RenderedKeys(f"workflow:{dag.workflow_id}:42", None)
    line = dag.node_line("call")
    assert line is not None
    rate = line.with_keys(created.keys).rate
    assert rate is not None and rate.key == "rate:partner"
    (plain,) = of_type(h.complete("call"), CreateTask)
    assert plain.keys is None
    # a templated line names no stored key: releases after a cancel leave it alone
    assert [n.key for n in dag.node_lines] == [f"workflow:{dag.workflow_id}:k"]


@pytest.mark.parametrize(
    ("input", "why"),
    [
        ({}, "concurrency.key"),
        ({"customer": ""}, "concurrency.key rendered empty"),
        ({"customer": {"a": 1}}, "must render to a string or a number"),
        ({"customer": "x" * 129}, "rendered 129 characters; the limit is 128"),
    ],
)
def test_a_key_that_does_not_render_fails_the_task_saying_why(input: Any, why: str) -> None:
    dag = make_dag([task("call", concurrency={"key": "{{input.customer}}", "max": 1})])
    h = Harness(dag, input=input)
    tr = h.start()
    assert h.state("call") is TaskState.FAILED
    assert not of_type(tr, DispatchTask)
    error = h.mem.tasks["call"].error
    assert error is not None and "limit key of call could not be resolved" in error
    assert why in error


def test_key_templates_are_checked_at_publish() -> None:
    problems = _problems(
        [
            task("a", concurrency={"key": "{{nope.x}}", "max": 1}),
            task("b", rate_limit={"key": "{{item}}", "limit": 1, "per_seconds": 1}),
            task("c", rate_limit={"key": "{{secret.k}}", "limit": 1, "per_seconds": 1}),
            task("d", concurrency={"key": "a b", "max": 1}),
        ]
    )
    assert "unknown name 'nope'" in problems["nodes[0].concurrency.key"]
    assert "unknown name 'item'" in problems["nodes[1].rate_limit.key"]
    assert "cannot hold a secret" in problems["nodes[2].rate_limit.key"]
    assert "or a {{ template }}" in problems["nodes[3].concurrency.key"]


def test_a_map_items_limits_are_rendered_per_item() -> None:
    inner = {
        "type": "TASK",
        "queue": "work",
        "spec": {"v": "{{item.id}}"},
        "concurrency": {"key": "{{item.customer}}", "max": 1, "scope": "global"},
        "rate_limit": {"key": "partner", "limit": 2, "per_seconds": 1},
    }
    dag = make_dag([node("m", "MAP", {"items": "{{input.items}}", "node": inner})])
    line = dag.node_line("m")  # the MAP's items go through its inner node's limits
    assert line is not None and line.templated and line.rate is not None
    items = [{"id": 1, "customer": "a"}, {"id": 2, "customer": "b"}, {"id": 3, "customer": "a"}]
    h = Harness(dag, input={"items": items})
    tr = h.start()
    created = [a for a in of_type(tr, CreateTask) if a.item is not None]
    assert [a.keys for a in created] == [
        RenderedKeys("global:a", None),
        RenderedKeys("global:b", None),
        RenderedKeys("global:a", None),
    ]


def test_a_map_of_sub_workflows_takes_no_limits() -> None:
    inner = {
        "type": "SUB_WORKFLOW",
        "spec": {"workflow": "child"},
        "rate_limit": {"key": "k", "limit": 1, "per_seconds": 1},
    }
    with pytest.raises(DefinitionInvalid) as exc:
        make_dag([node("m", "MAP", {"items": [1], "node": inner})])
    assert any(
        p.path == "nodes[0].spec.node.rate_limit" and "applies only to" in p.message
        for p in exc.value.problems
    ), exc.value.problems
