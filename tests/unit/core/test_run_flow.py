"""A definition's run-level ``concurrency`` and ``priority``: checked at publish,
rendered from a run's input at start (docs/architecture.md §4.13)."""

from __future__ import annotations

from typing import Any

import pytest

from composer_core.model import FlowError, RunLimit, Strategy, WorkflowSpec, build_dag, validate


def _spec(**header: Any) -> WorkflowSpec:
    return WorkflowSpec.model_validate(
        {"id": "charge", **header, "nodes": [{"id": "a", "type": "TASK", "queue": "q"}]}
    )


def _problems(**header: Any) -> dict[str, str]:
    return {p.path: p.message for p in validate(_spec(**header))}


def test_a_workflow_without_flow_control_compiles_none() -> None:
    assert build_dag(_spec()).flow is None


def test_key_limit_and_priority_render_from_the_input() -> None:
    dag = build_dag(
        _spec(
            concurrency={
                "key": "{{input.customer}}",
                "max_runs": "{{input.tier == 'premium' ? 10 : 1}}",
                "strategy": "cancel_newest",
            },
            priority="{{input.urgent ? 1 : 4}}",
        )
    )
    assert dag.flow is not None
    flow = dag.flow.render(dag.engine, {"customer": 42, "tier": "premium", "urgent": True}, None)
    assert flow.limit == RunLimit("42", 10, Strategy.CANCEL_NEWEST)
    assert flow.priority == 1
    flow = dag.flow.render(dag.engine, {"customer": "acme", "tier": "free", "urgent": False}, None)
    assert flow.limit == RunLimit("acme", 1, Strategy.CANCEL_NEWEST)
    assert flow.priority == 4


def test_without_a_key_every_run_shares_one_and_priority_defaults_to_3() -> None:
    dag = build_dag(_spec(concurrency={"max_runs": 2}))
    assert dag.flow is not None
    flow = dag.flow.render(dag.engine, {}, None)
    assert flow.limit == RunLimit("", 2, Strategy.QUEUE)
    assert flow.priority == 3


def test_priority_alone_limits_nothing() -> None:
    dag = build_dag(_spec(priority=2))
    assert dag.flow is not None
    assert dag.flow.render(dag.engine, {}, None).limit is None


@pytest.mark.parametrize(
    ("header", "path", "message"),
    [
        ({"concurrency": {"max_runs": 0}}, "concurrency.max_runs", "at least 1"),
        ({"concurrency": {"max_runs": "two"}}, "concurrency.max_runs", "neither a whole number"),
        ({"priority": 6}, "priority", "from 1 to 5"),
        ({"priority": "{{tasks.a.output}}"}, "priority", "input and config only"),
        (
            {"concurrency": {"key": "{{run.id}}", "max_runs": 1}},
            "concurrency.key",
            "'run' is not known when a run starts",
        ),
        ({"concurrency": {"key": " ", "max_runs": 1}}, "concurrency.key", "is empty"),
    ],
)
def test_bad_flow_control_is_refused_at_publish_naming_the_field(
    header: dict[str, Any], path: str, message: str
) -> None:
    problems = _problems(**header)
    assert path in problems, problems
    assert message in problems[path]


def test_an_unknown_strategy_is_a_shape_error() -> None:
    with pytest.raises(ValueError, match="strategy"):
        _spec(concurrency={"max_runs": 1, "strategy": "drop"})


@pytest.mark.parametrize(
    ("input", "message"),
    [
        ({}, "concurrency.key could not be rendered"),
        ({"customer": ""}, "rendered empty"),
        ({"customer": {"a": 1}}, "string or a number"),
        ({"customer": "x" * 300}, "the limit is 256"),
        ({"customer": "acme", "limit": 0}, "max_runs must be a whole number of at least 1"),
        ({"customer": "acme", "limit": 1, "priority": "high"}, "priority must be a whole number"),
    ],
)
def test_an_input_that_cannot_render_its_flow_is_named(input: dict[str, Any], message: str) -> None:
    dag = build_dag(
        _spec(
            concurrency={"key": "{{input.customer}}", "max_runs": "{{input.limit}}"},
            priority="{{has(input.priority) ? input.priority : 3}}",
        )
    )
    assert dag.flow is not None
    with pytest.raises(FlowError, match=message):
        dag.flow.render(dag.engine, input, None)


def _node_spec(node: dict[str, Any]) -> WorkflowSpec:
    return WorkflowSpec.model_validate({"id": "calls", "nodes": [node]})


def test_a_worker_nodes_concurrency_key_is_scoped_in_storage() -> None:
    node = {"id": "a", "type": "TASK", "queue": "q", "concurrency": {"key": "partner", "max": 5}}
    dag = build_dag(_node_spec(node))
    line = dag.node_line("a")
    assert line is not None and (line.key, line.max) == ("workflow:calls:partner", 5)
    node["concurrency"] = {"key": "partner", "max": 5, "scope": "global"}
    line = build_dag(_node_spec(node)).node_line("a")
    assert line is not None and line.key == "global:partner"


def test_node_concurrency_is_refused_where_it_cannot_apply() -> None:
    problems = {
        p.path: p.message
        for p in validate(
            WorkflowSpec.model_validate(
                {
                    "id": "calls",
                    "nodes": [
                        {"id": "a", "type": "TASK", "queue": "q",
                         "concurrency": {"key": "a:b", "max": 1}},
                        {"id": "w", "type": "WAIT", "spec": {"duration_seconds": 1},
                         "concurrency": {"key": "x", "max": 1}},
                    ],
                    "edges": [{"from": "a", "to": "w"}],
                }
            )
        )
    }  # fmt: skip
    assert "is not a key name" in problems["nodes[0].concurrency.key"]
    assert "applies only to HTTP, PYTHON and TASK nodes" in problems["nodes[1].concurrency"]
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        _node_spec({"id": "a", "type": "TASK", "queue": "q", "concurrency": {"key": "k", "max": 0}})


def test_a_rate_limit_is_keyed_by_name_and_checked() -> None:
    node = {
        "id": "a",
        "type": "HTTP",
        "spec": {"url": "https://partner.example/x"},
        "rate_limit": {"key": "partner", "limit": 100, "per_seconds": 60, "units": 2},
    }
    line = build_dag(_node_spec(node)).node_line("a")
    assert line is not None and line.key is None and line.rate is not None
    assert (line.rate.key, line.rate.limit, line.rate.per_seconds, line.rate.units) == (
        "rate:partner",
        100,
        60,
        2,
    )
    node["rate_limit"] = {"key": "partner", "limit": 1, "per_seconds": 1, "units": 2}
    problems = {p.path: p.message for p in validate(_node_spec(node))}
    assert "can never fit a bucket of 1" in problems["nodes[0].rate_limit.units"]
