"""Workflow definitions: loading, validation (every problem at once) and the WorkflowDAG."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from composer_core.errors import DefinitionInvalid, InvalidRequest
from composer_core.model import (
    DEFAULT_LIMITS,
    DEFAULT_RETRY,
    MAX_SECONDS,
    Limits,
    NodeType,
    RetryPolicy,
    WorkflowDAG,
    WorkflowSpec,
    build_dag,
    hide_credentials,
    parse_definition,
    parse_seconds,
    parse_time,
    validate,
)

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "order-fulfilment.yaml"


def task(node_id: str, **extra: Any) -> dict[str, Any]:
    return {"id": node_id, "type": "TASK", "queue": "q", **extra}


def definition(nodes: list[dict[str, Any]], edges: list[Any] = (), **top: Any) -> dict[str, Any]:  # type: ignore[assignment]
    doc: dict[str, Any] = {"id": "wf", "nodes": nodes, **top}
    doc["edges"] = [e if isinstance(e, dict) else {"from": e[0], "to": e[1]} for e in edges]
    return doc


def problems(doc: dict[str, Any] | str, *, limits: Limits | None = None) -> list[str]:
    """Every problem as ``path: message``; [] when the definition builds."""
    limits = limits or DEFAULT_LIMITS
    try:
        spec = parse_definition(doc, limits=limits)
    except DefinitionInvalid as exc:
        return [str(p) for p in exc.problems]
    return [str(p) for p in validate(spec, limits=limits)]


def dag_of(doc: dict[str, Any] | str) -> WorkflowDAG:
    return build_dag(parse_definition(doc))


def chain(*ids: str) -> list[tuple[str, str]]:
    return list(itertools.pairwise(ids))


# -- loading ----------------------------------------------------------------------


def test_the_example_definition_builds() -> None:
    dag = build_dag(parse_definition(EXAMPLE.read_text()))
    assert dag.workflow_id == "order-fulfilment"
    assert dag.version == 1
    assert dag.start_node().id == "reserve"
    assert len(dag.nodes) == 10
    assert {n.id for n in dag.successors("route")} == {"charge", "wait_payment"}


def test_yaml_and_json_give_the_same_spec() -> None:
    data = yaml.safe_load(EXAMPLE.read_text())
    from_json = parse_definition(json.dumps(data))
    from_bytes = parse_definition(EXAMPLE.read_bytes())
    from_mapping = parse_definition(data)
    assert from_json == from_bytes == from_mapping
    assert isinstance(from_json, WorkflowSpec)


def test_edges_use_from_and_to() -> None:
    spec = parse_definition(definition([task("a"), task("b")], [("a", "b")]))
    assert (spec.edges[0].source, spec.edges[0].target) == ("a", "b")


def test_yaml_timestamps_stay_strings() -> None:
    # An unquoted RFC 3339 time is what the user wrote; a definition holds JSON values only.
    spec = parse_definition(
        "id: wf\nnodes:\n  - id: w\n    type: WAIT\n    spec: {until: 2026-01-01T00:00:00Z}\n"
        "  - id: t\n    type: TASK\n    queue: q\n    spec: {day: 2026-01-01}\n"
        "edges:\n  - {from: w, to: t}\n"
    )
    assert spec.nodes[0].spec == {"until": "2026-01-01T00:00:00Z"}
    assert spec.nodes[1].spec == {"day": "2026-01-01"}
    assert validate(spec) == []


def test_malformed_yaml_names_line_and_column() -> None:
    (problem,) = problems("id: wf\nname: a: b\nnodes: []\n")
    # libyaml and the pure-Python parser word the reason differently
    assert problem.startswith(
        "not valid YAML or JSON (line 2, column 8): mapping values are not allowed"
    )


def test_malformed_json_names_line_and_column() -> None:
    [problem] = problems('{"id": "wf",\n "nodes": [}')
    assert "not valid YAML or JSON (line 2, column" in problem


@pytest.mark.parametrize(
    ("text", "kind"),
    [("- 1\n- 2\n", "list"), ("just text", "str"), ("", "NoneType"), ("42", "int")],
)
def test_a_document_that_is_not_a_mapping_is_refused(text: str, kind: str) -> None:
    assert problems(text) == [f"a definition is a mapping with id and nodes, not {kind}"]


def test_unknown_and_missing_fields_are_reported_with_their_paths() -> None:
    doc = definition([{"id": "a", "type": "TASK", "queue": "q", "colour": "red"}], [{"from": "a"}])
    doc["owner"] = "me"
    assert sorted(problems(doc)) == [
        "edges[0].to: required",
        "nodes[0].colour: unknown field",
        "owner: unknown field",
    ]
    assert problems({"nodes": []}) == ["id: required"]


def test_an_unknown_node_type_lists_the_known_ones() -> None:
    [problem] = problems(definition([{"id": "a", "type": "LAMBDA"}]))
    assert problem.startswith("nodes[0].type: unknown value 'LAMBDA'; expected 'HTTP'")
    assert "'WAIT_FOR_EVENT'" in problem


def test_an_unknown_node_type_is_reported_with_every_other_problem() -> None:
    # A typo in one node's type must not hide the graph and spec problems elsewhere:
    # the user fixes them all in one round instead of one per apply.
    doc = definition(
        [
            {"id": "fetch", "type": "HTTPS", "spec": {"url": "https://example.com"}},
            {"id": "shout", "type": "PYTHON", "spec": {}},
            task("done", timeout_seconds=-1),
        ],
        [("fetch", "shout"), ("shout", "done"), ("done", "nowhere")],
    )
    found = problems(doc)
    assert found[0].startswith("nodes[0].type: unknown value 'HTTPS'; expected 'HTTP'")
    assert sorted(found[1:]) == [
        "edges[2].to: no node 'nowhere'",
        "nodes[1].spec.code: required for PYTHON: a module that defines main(input)",
        "nodes[2].timeout_seconds: Input should be greater than 0",
    ]


def test_the_unknown_typed_node_adds_no_guesses_about_its_type() -> None:
    # Its spec, queue and edge conditions depend on the type nobody knows: none is judged.
    doc = definition(
        [
            {"id": "a", "type": "LAMBDA", "spec": {"anything": "{{ input.x }}"}, "queue": "q"},
            task("b"),
        ],
        [{"from": "a", "to": "b", "condition": "{{ true }}"}],
    )
    assert [p.split(":")[0] for p in problems(doc)] == ["nodes[0].type"]


def test_a_shape_error_where_the_graph_needs_a_field_reports_the_shape_alone() -> None:
    # With an edge's end or a node's id missing there is no graph to judge.
    doc = definition([{"type": "LAMBDA"}, task("b")], [{"from": "b"}])
    assert sorted(p.split(":")[0] for p in problems(doc)) == [
        "edges[0].to",
        "nodes[0].id",
        "nodes[0].type",
    ]


def test_checking_beyond_the_shape_leaves_the_callers_mapping_alone() -> None:
    doc = definition([{"id": "a", "type": "LAMBDA", "colour": "red"}, task("b")], [("a", "b")])
    before = json.dumps(doc, sort_keys=True)
    assert len(problems(doc)) == 2
    assert json.dumps(doc, sort_keys=True) == before


def test_a_definition_larger_than_the_limit_is_refused_before_parsing() -> None:
    text = EXAMPLE.read_text()
    [problem] = problems(text, limits=Limits(max_definition_bytes=100))
    assert problem == f"definition is {len(text.encode())} bytes; the limit is 100"


@pytest.mark.parametrize("depth", [100, 5000])
def test_deep_nesting_is_a_problem_not_a_crash(depth: int) -> None:
    text = f"id: wf\nnodes:\n  - {{id: a, type: TASK, queue: q, spec: {{x: {'[' * depth}{']' * depth}}}}}\n"
    assert problems(text) == ["nested deeper than 64 levels"]
    deep: Any = 1
    for _ in range(depth):
        deep = [deep]
    assert problems(definition([task("a", spec={"x": deep})])) == ["nested deeper than 64 levels"]


def test_deep_nesting_in_a_built_spec_is_reported_at_its_path() -> None:
    deep: Any = "{{input.x}}"
    for _ in range(70):
        deep = {"k": deep}
    spec = WorkflowSpec.model_validate(
        {"id": "wf", "nodes": [task("a", spec=deep)], "output": deep}
    )
    assert [str(p) for p in validate(spec)] == [
        "output: nested deeper than 64 levels",
        "nodes[0].spec: nested deeper than 64 levels",
    ]


# -- validation: every problem at once --------------------------------------------------


def test_every_problem_is_reported_at_once_with_its_path() -> None:
    doc = definition(
        [
            {"id": "a", "type": "HTTP", "spec": {"method": "POST"}},
            {"id": "a", "type": "TASK", "queue": "q"},
            {"id": "c", "type": "PYTHON", "spec": {"code": "x = 1"}},
            {"id": "d", "type": "WAIT", "spec": {}},
        ],
        [("a", "c"), ("c", "d"), ("c", "nowhere")],
    )
    assert problems(doc) == [
        "nodes[1].id: duplicate node id 'a' (first at nodes[0])",
        "edges[2].to: no node 'nowhere'",
        "nodes[0].spec.url: required for HTTP",
        "nodes[2].spec.code: must define a top-level function main(input)",
        "nodes[3].spec: WAIT needs exactly one of duration_seconds or until",
    ]


def test_the_error_lists_every_problem_in_its_message() -> None:
    with pytest.raises(DefinitionInvalid) as info:
        dag_of(definition([{"id": "a", "type": "HTTP"}, {"id": "b", "type": "TASK"}], [("a", "b")]))
    assert len(info.value.problems) == 2
    assert "(2 problem(s))" in str(info.value)
    assert "  - nodes[0].spec.url: required for HTTP" in str(info.value)
    assert "  - nodes[1].queue: required for TASK" in str(info.value)


@pytest.mark.parametrize("node_id", ["1st", "has-dash", "has space", "", "ünï", "a.b", "x" * 65])
def test_node_ids_are_identifiers(node_id: str) -> None:
    [problem] = problems(definition([task(node_id)]))
    assert problem.startswith(f"nodes[0].id: {node_id!r} is not a node id")


@pytest.mark.parametrize("node_id", ["a", "_x", "Step_2", "x" * 64])
def test_identifier_node_ids_are_fine(node_id: str) -> None:
    assert problems(definition([task(node_id)])) == []


@pytest.mark.parametrize("workflow_id", ["", "-x", "has space", "a/b", "w" * 65])
def test_workflow_ids_are_slugs(workflow_id: str) -> None:
    doc = definition([task("a")])
    doc["id"] = workflow_id
    [problem] = problems(doc)
    assert problem.startswith(f"id: {workflow_id!r} is not a workflow id")


def test_edges_must_name_existing_nodes_and_be_unique() -> None:
    doc = definition([task("a"), task("b")], [("a", "b"), ("ghost", "b"), ("a", "b"), ("a", "a")])
    assert problems(doc) == [
        "edges[1].from: no node 'ghost'",
        "edges[2]: duplicate edge a → b (first at edges[0])",
        "edges[3]: edge from 'a' to itself",
    ]


def test_a_cycle_is_named() -> None:
    doc = definition(
        [task("a"), task("b"), task("c"), task("d")], [*chain("a", "b", "c", "d"), ("d", "b")]
    )
    assert problems(doc) == ["edges: the graph has a cycle: b → c → d → b"]


def test_a_graph_that_is_one_cycle_reports_the_cycle_only() -> None:
    assert problems(definition([task("a"), task("b")], [("a", "b"), ("b", "a")])) == [
        "edges: the graph has a cycle: a → b → a"
    ]


def test_several_roots_need_a_start() -> None:
    assert problems(definition([task("a"), task("b"), task("c")], [("a", "c"), ("b", "c")])) == [
        "start: 2 nodes have no incoming edge (a, b): connect them or name the one to start at in `start`"
    ]


def test_start_picks_the_root_and_unreachable_nodes_are_named() -> None:
    doc = definition([task("a"), task("b"), task("c")], [("a", "c"), ("b", "c")], start="a")
    assert problems(doc) == ["nodes[1]: node 'b' cannot be reached from the start node 'a'"]


def test_start_may_name_a_node_with_incoming_edges_if_all_are_reachable() -> None:
    doc = definition([task("a"), task("b")], [("a", "b")], start="b")
    assert problems(doc) == ["nodes[0]: node 'a' cannot be reached from the start node 'b'"]


def test_start_must_exist() -> None:
    assert problems(definition([task("a")], start="zz")) == ["start: no node 'zz'"]


def test_a_workflow_needs_nodes() -> None:
    assert problems(definition([])) == [
        "nodes: a workflow needs at least one node",
        "start: every node has an incoming edge: there is no node to start at",
    ]


def test_conditions_only_out_of_a_switch() -> None:
    doc = definition(
        [task("a"), {"id": "s", "type": "SWITCH"}, task("b"), task("c")],
        [
            {"from": "a", "to": "s", "condition": "{{true}}"},
            {"from": "s", "to": "b", "condition": "{{tasks.a.output.ok}}"},
            {"from": "s", "to": "c", "condition": "!tasks.a.output.ok"},
        ],
    )
    assert problems(doc) == [
        "edges[0].condition: conditions belong on edges out of a SWITCH; 'a' is TASK"
    ]


def test_a_switch_needs_an_outgoing_edge() -> None:
    doc = definition([task("a"), {"id": "s", "type": "SWITCH"}], [("a", "s")])
    assert problems(doc) == ["nodes[1]: SWITCH 's' has no outgoing edge"]


# -- per-type spec rules ----------------------------------------------------------------


def spec_problems(node: dict[str, Any]) -> list[str]:
    return problems(definition([node]))


def http(**spec: Any) -> dict[str, Any]:
    return {"id": "h", "type": "HTTP", "spec": spec}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({}, ["nodes[0].spec.url: required for HTTP"]),
        ({"url": 5}, ["nodes[0].spec.url: must be a string"]),
        ({"url": "ftp://x"}, ["nodes[0].spec.url: 'ftp://x' is not an http:// or https:// URL"]),
        (
            {"url": "/relative"},
            ["nodes[0].spec.url: '/relative' is not an http:// or https:// URL"],
        ),
        (
            {"url": "http://x", "method": "FETCH"},
            [
                "nodes[0].spec.method: 'FETCH' is not one of DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT"
            ],
        ),
        ({"url": "http://x", "method": 1}, ["nodes[0].spec.method: must be a string"]),
        (
            {"url": "http://x", "headers": [1]},
            ["nodes[0].spec.headers: must be a mapping of names to values"],
        ),
        (
            {"url": "http://x", "query": "a=b"},
            ["nodes[0].spec.query: must be a mapping of names to values"],
        ),
        (
            {"url": "http://x", "bogus": 1},
            [
                "nodes[0].spec.bogus: unknown field; HTTP takes accept_status, body, headers, method, query, url"
            ],
        ),
        (
            {"url": "https://x", "method": "post", "headers": {"a": "b"}, "query": {}, "body": [1]},
            [],
        ),
        ({"url": "{{input.url}}", "method": "{{input.method}}", "headers": "{{input.h}}"}, []),
    ],
)
def test_http_spec_rules(spec: dict[str, Any], expected: list[str]) -> None:
    assert spec_problems(http(**spec)) == expected


def python(code: Any, **spec: Any) -> dict[str, Any]:
    return {"id": "p", "type": "PYTHON", "spec": {"code": code, **spec}}


def test_python_code_must_parse_and_define_main() -> None:
    assert spec_problems({"id": "p", "type": "PYTHON"}) == [
        "nodes[0].spec.code: required for PYTHON: a module that defines main(input)"
    ]
    assert spec_problems(python(3)) == ["nodes[0].spec.code: must be a string of Python source"]
    assert spec_problems(python("def main(:\n  pass")) == [
        "nodes[0].spec.code: not valid Python: invalid syntax (line 1)"
    ]
    assert spec_problems(python("main = lambda input: input")) == [
        "nodes[0].spec.code: must define a top-level function main(input)"
    ]
    assert spec_problems(python("class X:\n    def main(self): pass")) == [
        "nodes[0].spec.code: must define a top-level function main(input)"
    ]
    assert spec_problems(python("def main(input):\n    return input")) == []
    assert spec_problems(python("async def main(input):\n    return 1")) == []
    assert spec_problems(python("def main(i): return i", other=1)) == [
        "nodes[0].spec.other: unknown field; PYTHON takes code, input"
    ]


def test_python_code_is_kept_verbatim_not_templated() -> None:
    code = 'def main(input):\n    return f"{{x}} {{ not cel }}" + "{{ 1 + }}"\n'
    dag = dag_of(definition([python(code, input={"n": "{{input.n}}"})]))
    compiled = dag.compiled_spec("p")
    assert compiled.evaluate({"input": dag.engine.to_native({"n": 2})}) == {
        "code": code,
        "input": {"n": 2},
    }


def wait(**spec: Any) -> dict[str, Any]:
    return {"id": "w", "type": "WAIT", "spec": spec}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({}, ["nodes[0].spec: WAIT needs exactly one of duration_seconds or until"]),
        (
            {"duration_seconds": 5, "until": "2026-01-01T00:00:00Z"},
            ["nodes[0].spec: WAIT needs exactly one of duration_seconds or until"],
        ),
        (
            {"duration_seconds": -1},
            [
                f"nodes[0].spec.duration_seconds: must be a number of seconds from 0 to {MAX_SECONDS}, got -1"
            ],
        ),
        (
            {"duration_seconds": "soon"},
            [
                f"nodes[0].spec.duration_seconds: must be a number of seconds from 0 to {MAX_SECONDS}, got 'soon'"
            ],
        ),
        (
            {"duration_seconds": True},
            [
                f"nodes[0].spec.duration_seconds: must be a number of seconds from 0 to {MAX_SECONDS}, got True"
            ],
        ),
        (
            {"duration_seconds": 10**400},
            [
                f"nodes[0].spec.duration_seconds: must be a number of seconds from 0 to {MAX_SECONDS}, got {10**400!r}"
            ],
        ),
        (
            {"duration_seconds": MAX_SECONDS + 1},
            [
                f"nodes[0].spec.duration_seconds: must be a number of seconds from 0 to {MAX_SECONDS}, got {MAX_SECONDS + 1}"
            ],
        ),
        ({"until": 5}, ["nodes[0].spec.until: must be an RFC 3339 time string"]),
        (
            {"until": "tomorrow"},
            ["nodes[0].spec.until: 'tomorrow' is not an RFC 3339 time with a time zone"],
        ),
        (
            {"until": "2026-01-01T00:00:00"},
            ["nodes[0].spec.until: '2026-01-01T00:00:00' is not an RFC 3339 time with a time zone"],
        ),
        (
            {"until": "9999-12-31T23:00:00-05:00"},
            [
                "nodes[0].spec.until: '9999-12-31T23:00:00-05:00' is not an RFC 3339 time with a time zone"
            ],
        ),
        (
            {"duration_seconds": 5, "extra": 1},
            ["nodes[0].spec.extra: unknown field; WAIT takes duration_seconds, until"],
        ),
        ({"duration_seconds": 0}, []),
        ({"duration_seconds": 2.5}, []),
        ({"duration_seconds": "30"}, []),
        ({"duration_seconds": "{{input.delay}}"}, []),
        ({"until": "2026-01-01T00:00:00+02:00"}, []),
        ({"until": "{{input.when}}"}, []),
    ],
)
def test_wait_spec_rules(spec: dict[str, Any], expected: list[str]) -> None:
    assert spec_problems(wait(**spec)) == expected


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({}, ["nodes[0].spec.event: required for WAIT_FOR_EVENT: the signal name to wait for"]),
        ({"event": "  "}, ["nodes[0].spec.event: must be a non-empty string"]),
        ({"event": 3}, ["nodes[0].spec.event: must be a non-empty string"]),
        (
            {"event": "paid", "timeout_seconds": "never"},
            [
                f"nodes[0].spec.timeout_seconds: must be a number of seconds from 0 to {MAX_SECONDS}, got 'never'"
            ],
        ),
        ({"event": "paid"}, []),
        ({"event": "paid", "timeout_seconds": 86400}, []),
        ({"event": "{{input.event}}"}, []),
        ({"event": "paid", "timeout_seconds": 60, "on_timeout": "continue"}, []),
        ({"event": "paid", "on_timeout": "fail"}, []),
        (
            {"event": "paid", "on_timeout": "skip"},
            ["nodes[0].spec.on_timeout: must be one of 'fail', 'continue', got 'skip'"],
        ),
        (
            {"event": "paid", "on_timeout": "{{input.policy}}"},
            ["nodes[0].spec.on_timeout: must be one of 'fail', 'continue', got '{{input.policy}}'"],
        ),
    ],
)
def test_wait_for_event_spec_rules(spec: dict[str, Any], expected: list[str]) -> None:
    assert spec_problems({"id": "e", "type": "WAIT_FOR_EVENT", "spec": spec}) == expected


def test_task_needs_a_valid_queue() -> None:
    assert spec_problems({"id": "t", "type": "TASK"}) == [
        "nodes[0].queue: required for TASK: the queue your workers read"
    ]
    assert spec_problems(task("t", queue="bad queue")) == [
        "nodes[0].queue: 'bad queue' is not a queue name: use letters, digits, '_', '-', '.'"
    ]
    assert spec_problems(task("t", queue="payments.eu-1", spec={"anything": {"goes": 1}})) == []


def test_the_builtin_queues_take_their_own_node_type_only() -> None:
    # Found by an attack: a TASK node on queue python with spec {code: "{{input.code}}"}
    # ran whoever started it's code on the built-in workers.
    assert spec_problems(task("t", queue="python", spec={"code": "{{input.code}}"})) == [
        "nodes[0].queue: 'python' is reserved for PYTHON nodes (the built-in workers run "
        "every task on it as Python code), and this node's type is TASK: name a queue of "
        "your own that your workers read (e.g. 't-tasks'); http and python are the "
        "built-in workers'"
    ]
    assert spec_problems(task("t", queue="http")) == [
        "nodes[0].queue: 'http' is reserved for HTTP nodes (the built-in workers run every "
        "task on it as an HTTP request), and this node's type is TASK: name a queue of your "
        "own that your workers read (e.g. 't-tasks'); http and python are the built-in "
        "workers'"
    ]
    code = {"code": "def main(input):\n    return 1\n"}
    assert spec_problems({"id": "p", "type": "PYTHON", "queue": "http", "spec": code}) == [
        "nodes[0].queue: 'http' is reserved for HTTP nodes (the built-in workers run every "
        "task on it as an HTTP request), and this node's type is PYTHON: leave queue unset "
        "(PYTHON nodes go to 'python')"
    ]
    assert spec_problems(http(url="https://x") | {"queue": "python"}) == [
        "nodes[0].queue: 'python' is reserved for PYTHON nodes (the built-in workers run "
        "every task on it as Python code), and this node's type is HTTP: leave queue unset "
        "(HTTP nodes go to 'http')"
    ]
    # their own type may name them, or another queue (served by your own workers)
    assert spec_problems({"id": "p", "type": "PYTHON", "queue": "python", "spec": code}) == []
    assert spec_problems(http(url="https://x") | {"queue": "http"}) == []
    assert spec_problems(http(url="https://x") | {"queue": "egress-eu"}) == []
    assert spec_problems(task("t", queue="python-jobs")) == []


def test_a_stored_version_on_a_reserved_queue_still_builds_to_run() -> None:
    # A version stored before the queues were reserved: its runs still load (the
    # workers refuse to run its task: docs/architecture.md §6.1).
    spec = parse_definition(definition([task("t", queue="python")]))
    with pytest.raises(DefinitionInvalid):
        build_dag(spec)
    assert build_dag(spec, stored=True).queue("t") == "python"


@pytest.mark.parametrize("node_type", ["SWITCH", "FORK", "JOIN", "WAIT", "WAIT_FOR_EVENT"])
def test_retry_timeout_and_queue_only_on_worker_nodes(node_type: str) -> None:
    node = {
        "id": "n",
        "type": node_type,
        "queue": "q",
        "timeout_seconds": 3,
        "retry": {"max_attempts": 2},
    }
    doc = definition([task("a"), node, task("b")], [("a", "n"), ("n", "b")])
    found = problems(doc)
    for field in ("queue", "timeout_seconds"):
        assert (
            f"nodes[1].{field}: applies only to HTTP, PYTHON and TASK nodes, not {node_type}"
            in found
        )
    assert (
        f"nodes[1].retry: applies only to HTTP, PYTHON, TASK and SUB_WORKFLOW nodes, "
        f"not {node_type}" in found
    )


@pytest.mark.parametrize("node_type", ["SWITCH", "FORK", "JOIN"])
def test_control_nodes_take_no_spec(node_type: str) -> None:
    doc = definition(
        [task("a"), {"id": "n", "type": node_type, "spec": {"x": 1}}, task("b")],
        [("a", "n"), ("n", "b")],
    )
    assert problems(doc) == [f"nodes[1].spec.x: unknown field; {node_type} takes no spec"]


def test_retry_and_timeout_bounds() -> None:
    assert problems(definition([task("a", retry={"initial_seconds": 10, "max_seconds": 5})])) == [
        "nodes[0].retry.max_seconds: must be at least initial_seconds"
    ]
    found = problems(
        definition(
            [
                task(
                    "a",
                    timeout_seconds=float("inf"),
                    retry={"max_attempts": 0, "multiplier": float("nan")},
                ),
                task("b", timeout_seconds=0),
            ],
            [("a", "b")],  # else "start" is a problem too: every problem is reported at once
        )
    )
    assert sorted(p.split(":")[0] for p in found) == [
        "nodes[0].retry.max_attempts",
        "nodes[0].retry.multiplier",
        "nodes[0].timeout_seconds",
        "nodes[1].timeout_seconds",
    ]


# -- templates in definitions -------------------------------------------------------------


def test_templates_must_compile_and_problems_point_at_the_key() -> None:
    doc = definition(
        [task("a", spec={"x": "{{ input.n + }}", "y": ["ok", "{{ foo(1) }}"], "z": "{{ input"})],
        output={"r": "{{ ) }}"},
    )
    assert problems(doc) == [
        "nodes[0].spec.x: 'input.n +' is not a valid CEL expression at column 9",
        "nodes[0].spec.y[1]: 'foo(1)' calls unknown function(s) foo",
        "nodes[0].spec.z: unclosed template in '{{ input': a '{{' has no '}}'",
        "output.r: ')' is not a valid CEL expression at column 1",
    ]


def test_templates_name_only_known_roots() -> None:
    doc = definition(
        [
            task("a", spec={"ok": "{{input.a}} {{config.b}} {{run.id}} {{system.now}}"}),
            task(
                "b",
                spec={"body": {"token": "{{secrets.token}}"}, "n": "{{ [1].all(x, x > 0) && x }}"},
            ),
        ],
        [("a", "b")],
    )
    assert problems(doc) == [
        "nodes[1].spec.body.token: unknown name 'secrets': expressions start from config, input, run, system, tasks",
        "nodes[1].spec.n: unknown name 'x': expressions start from config, input, run, system, tasks",
    ]


def test_templates_name_existing_nodes_upstream_of_the_reader() -> None:
    doc = definition(
        [
            task("a"),
            task("b", spec={"x": "{{tasks.a.output}}"}),
            task("c", spec={"x": "{{tasks.d.output}}", "y": "{{tasks.ghost.output}}"}),
            task("d", spec={"x": "{{tasks.d.output}}"}),
        ],
        [("a", "b"), ("a", "c"), ("c", "d")],
        output={"all": "{{tasks.b.output}} {{tasks.d.output}}", "bad": "{{tasks.nope.output}}"},
    )
    assert problems(doc) == [
        "nodes[2].spec.x: tasks.d: 'd' is not upstream of 'c', so its output is not there yet when 'c' runs",
        "nodes[2].spec.y: tasks.ghost: no node 'ghost' in this workflow",
        "nodes[3].spec.x: tasks.d: 'd' is not upstream of 'd', so its output is not there yet when 'd' runs",
        "output.bad: tasks.nope: no node 'nope' in this workflow",
    ]


def test_a_condition_may_read_only_upstream_of_its_switch() -> None:
    doc = definition(
        [task("a"), {"id": "s", "type": "SWITCH"}, task("b"), task("c")],
        [
            ("a", "s"),
            {"from": "s", "to": "b", "condition": "{{tasks.a.output.ok}}"},
            {"from": "s", "to": "c", "condition": "{{tasks.b.output.ok || flag}}"},
        ],
    )
    assert problems(doc) == [
        "edges[2].condition: unknown name 'flag': expressions start from config, input, run, system, tasks",
        "edges[2].condition: tasks.b: 'b' is not upstream of 's', so its output is not there yet when 's' runs",
    ]


def test_a_broken_condition_is_reported_on_its_edge() -> None:
    doc = definition(
        [task("a"), {"id": "s", "type": "SWITCH"}, task("b")],
        [("a", "s"), {"from": "s", "to": "b", "condition": "tasks.a.output.ok &&"}],
    )
    assert problems(doc) == [
        "edges[1].condition: 'tasks.a.output.ok &&' is not a valid CEL expression at column 19"
    ]


def test_size_limits() -> None:
    limits = Limits(
        max_nodes=3, max_edges=2, max_spec_bytes=40, max_expression_length=12, max_id_length=8
    )
    doc = definition(
        [task(f"n{i}") for i in range(4)]
        + [
            task("long_identifier"),
            task("big", spec={"x": "y" * 50}),
            task("e", spec={"x": "{{input.abcdefghijk}}"}),
        ],
        chain("n0", "n1", "n2", "n3", "long_identifier", "big", "e"),
    )
    found = problems(doc, limits=limits)
    assert "nodes: 7 nodes; the limit is 3" in found
    assert "edges: 6 edges; the limit is 2" in found
    assert "nodes[5].spec: 59 bytes; the limit is 40" in found
    assert "nodes[6].spec.x: expression of 17 characters; the limit is 12" in found
    assert any(p.startswith("nodes[4].id: 'long_identifier' is not a node id") for p in found)


def test_webhook_url_must_be_http() -> None:
    assert problems(definition([task("a")], webhook_url="mailto:x@y")) == [
        "webhook_url: must be an http:// or https:// URL"
    ]
    assert problems(definition([task("a")], webhook_url="https://hooks.example/x")) == []


# -- the WorkflowDAG ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def example() -> WorkflowDAG:
    return build_dag(parse_definition(EXAMPLE.read_text()), version=7)


def test_node_lookup(example: WorkflowDAG) -> None:
    node = example.node("charge")
    assert node is not None
    assert (node.type, node.queue) == (NodeType.TASK, "payments")
    assert example.node("nope") is None
    assert "charge" in example
    assert "nope" not in example
    assert example.version == 7
    assert repr(example) == "WorkflowDAG('order-fulfilment', version=7, nodes=10)"


def test_successors_predecessors_and_edges(example: WorkflowDAG) -> None:
    assert [n.id for n in example.successors("notify")] == ["email", "ledger"]
    assert [n.id for n in example.predecessors("cool_off")] == ["charge", "wait_payment"]
    assert [n.id for n in example.predecessors("reserve")] == []
    assert [n.id for n in example.successors("done")] == []
    assert [(e.source, e.target) for e in example.incoming("done")] == [
        ("email", "done"),
        ("ledger", "done"),
    ]
    assert [(e.source, e.target) for e in example.outgoing("route")] == [
        ("route", "charge"),
        ("route", "wait_payment"),
    ]
    assert example.successors("nope") == ()
    assert example.incoming("nope") == ()


def test_descendants_in_topological_order(example: WorkflowDAG) -> None:
    assert example.descendants("score") == ("notify", "email", "ledger", "done")
    assert example.descendants("done") == ()
    order = example.descendants("reserve")
    assert set(order) == {n.id for n in example.nodes} - {"reserve"}
    for edge in example.spec.edges:
        if edge.source in order:
            assert order.index(edge.source) < order.index(edge.target)
    assert example.descendants("score") is example.descendants("score")  # cached


def test_descendants_of_a_diamond_come_once_each() -> None:
    dag = dag_of(
        definition(
            [task(n) for n in "abcde"], [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d"), ("d", "e")]
        )
    )
    assert dag.descendants("a")[-2:] == ("d", "e")
    assert sorted(dag.descendants("a")) == ["b", "c", "d", "e"]


def test_start_node_and_its_override(example: WorkflowDAG) -> None:
    assert example.start_node().id == "reserve"
    assert example.start_node("score").id == "score"
    with pytest.raises(
        InvalidRequest, match="start node 'nope' is not in workflow 'order-fulfilment' version 7"
    ):
        example.start_node("nope")
    explicit = dag_of(definition([task("a"), task("b")], [("b", "a")], start="b"))
    assert explicit.start_node().id == "b"


def test_task_refs_are_exact(example: WorkflowDAG) -> None:
    assert example.task_refs("reserve") == frozenset()
    assert example.task_refs("charge") == frozenset()
    assert example.task_refs("email") == frozenset({"score"})
    assert example.task_refs("ledger") == frozenset({"score"})
    assert example.task_refs("notify") == frozenset()
    # A SWITCH passes on its predecessor's output and reads its conditions' refs.
    assert example.task_refs("route") == frozenset({"reserve"})
    assert example.output_refs == frozenset({"reserve", "score"})
    assert example.task_refs("nope") == frozenset()


def test_switch_refs_include_predecessors_and_condition_refs() -> None:
    dag = dag_of(
        definition(
            [task("a"), task("b"), task("c"), {"id": "s", "type": "SWITCH"}, task("x"), task("y")],
            [
                ("a", "b"),
                ("a", "c"),
                ("b", "s"),
                ("c", "s"),
                {"from": "s", "to": "x", "condition": "tasks.a.output.go"},
                {"from": "s", "to": "y", "condition": "{{!tasks.a.output.go}}"},
            ],
        )
    )
    assert dag.task_refs("s") == frozenset({"a", "b", "c"})
    condition = dag.condition(dag.outgoing("s")[0])
    assert condition is not None
    assert condition.source == "tasks.a.output.go"


def test_task_refs_are_unknown_when_tasks_is_indexed_dynamically() -> None:
    dag = dag_of(
        definition(
            [
                task("a"),
                task("b", spec={"x": "{{tasks[input.which].output}}"}),
                {"id": "s", "type": "SWITCH"},
                task("c"),
            ],
            [
                ("a", "b"),
                ("b", "s"),
                {"from": "s", "to": "c", "condition": "tasks[input.k].output.ok"},
            ],
            output="{{tasks}}",
        )
    )
    assert dag.task_refs("b") is None
    assert dag.task_refs("s") is None
    assert dag.output_refs is None
    assert dag.task_refs("a") == frozenset()


def test_no_output_template_reads_nothing() -> None:
    dag = dag_of(definition([task("a")]))
    assert dag.output_template is None
    assert dag.output_refs == frozenset()


def test_retry_policy_defaults_and_overrides(example: WorkflowDAG) -> None:
    assert example.retry_policy("charge") == DEFAULT_RETRY
    assert (DEFAULT_RETRY.max_attempts, DEFAULT_RETRY.initial_seconds) == (3, 1.0)
    assert (DEFAULT_RETRY.multiplier, DEFAULT_RETRY.max_seconds) == (2.0, 300.0)
    assert example.retry_policy("reserve") == RetryPolicy(
        max_attempts=5, initial_seconds=1, multiplier=2, max_seconds=300
    )


def test_retry_delay_grows_exponentially_and_is_capped() -> None:
    policy = RetryPolicy()
    assert [policy.delay(n) for n in range(11)] == [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 300]
    assert policy.delay(-1) == 0.0
    assert RetryPolicy(initial_seconds=0.5, multiplier=3, max_seconds=10).delay(3) == 4.5
    assert RetryPolicy(multiplier=1).delay(50) == 1.0


@pytest.mark.parametrize("attempt", [1_000, 10_000, 10**9])
def test_retry_delay_never_overflows(attempt: int) -> None:
    assert RetryPolicy(max_attempts=1000).delay(attempt) == 300.0
    assert RetryPolicy(multiplier=1e300, max_seconds=MAX_SECONDS).delay(attempt) == MAX_SECONDS
    assert RetryPolicy(initial_seconds=0, multiplier=10).delay(attempt) == 0.0


def test_queue_routing(example: WorkflowDAG) -> None:
    assert example.queue("reserve") == "http"
    assert example.queue("score") == "python"
    assert example.queue("charge") == "payments"
    assert example.queue("ledger") == "accounting"
    for node_id in ("route", "notify", "done", "cool_off", "wait_payment"):
        assert example.queue(node_id) is None


def test_node_type_helpers(example: WorkflowDAG) -> None:
    assert example.is_type("route", NodeType.SWITCH)
    assert not example.is_type("route", NodeType.FORK)
    assert not example.is_type("nope", NodeType.SWITCH)
    # at least these (a new kind joins its category: tests/unit/core/test_kinds.py)
    assert {t for t in NodeType if t.is_worker} >= {NodeType.HTTP, NodeType.PYTHON, NodeType.TASK}
    assert {t for t in NodeType if t.is_control} >= {NodeType.SWITCH, NodeType.FORK, NodeType.JOIN}
    assert {t for t in NodeType if t.is_wait} >= {NodeType.WAIT, NodeType.WAIT_FOR_EVENT}


def test_compiled_specs_evaluate(example: WorkflowDAG) -> None:
    engine = example.engine
    spec = example.compiled_spec("reserve").evaluate(
        {"input": engine.to_native({"base_url": "https://x", "order_id": 9})}
    )
    assert spec == {"method": "POST", "url": "https://x/reserve", "body": {"order_id": 9}}


# -- parse helpers ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [(5, 5.0), (2.5, 2.5), ("7", 7.0), (" 1.5 ", 1.5), (0, 0.0), (MAX_SECONDS, float(MAX_SECONDS))],
)
def test_parse_seconds_accepts(value: Any, expected: float) -> None:
    assert parse_seconds(value) == expected


@pytest.mark.parametrize(
    "value",
    [-1, True, None, "x", float("nan"), float("inf"), 10**400, MAX_SECONDS + 1, [1], "1e400"],
)
def test_parse_seconds_refuses(value: Any) -> None:
    assert parse_seconds(value) is None


def test_parse_time() -> None:
    parsed = parse_time("2026-01-01T10:00:00+02:00")
    assert parsed is not None
    assert parsed.isoformat() == "2026-01-01T08:00:00+00:00"
    assert parse_time("2026-01-01T10:00:00Z") is not None
    assert parse_time("2026-01-01T10:00:00") is None
    assert parse_time("nonsense") is None
    assert parse_time("9999-12-31T23:00:00-05:00") is None  # past datetime.max in UTC


def test_yaml_alias_bomb_is_refused_before_it_is_built() -> None:
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(8)
    )
    (problem,) = problems(bomb)
    assert problem == "the definition expands to more than 200000 values (through YAML aliases)"


_any_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
_node_fields = ("id", "type", "spec", "queue", "timeout_seconds", "retry", "name", "colour")
_edge_fields = ("from", "to", "condition", "colour")


@settings(max_examples=200, deadline=None)
@given(
    nodes=st.lists(
        st.fixed_dictionaries(
            {
                "id": st.sampled_from(["a", "b", "c", "1x"]),
                "type": st.sampled_from(["TASK", "HTTP", "SWITCH", "LAMBDA", 3]),
            },
            optional=dict.fromkeys(_node_fields[2:], _any_json),
        ),
        max_size=4,
    ),
    edges=st.lists(
        st.fixed_dictionaries(
            {}, optional={f: st.sampled_from(["a", "b", "zz", 1]) | _any_json for f in _edge_fields}
        ),
        max_size=3,
    ),
    start=st.none() | _any_json,
)
def test_a_broken_definition_always_gets_a_list_of_problems(
    nodes: list[dict[str, Any]], edges: list[dict[str, Any]], start: Any
) -> None:
    # Checking beyond a failed shape must never crash on what the shape let through.
    doc: dict[str, Any] = {"id": "wf", "nodes": nodes, "edges": edges}
    if start is not None:
        doc["start"] = start
    if not problems(doc):  # DefinitionInvalid is caught there; any other error fails
        build_dag(parse_definition(doc))  # no problem: it builds


def test_a_version_names_the_signals_its_waits_take() -> None:
    def wait(node_id: str, event: str) -> dict[str, Any]:
        return {"id": node_id, "type": "WAIT_FOR_EVENT", "spec": {"event": event}}

    dag = build_dag(
        parse_definition(
            definition(
                [
                    task("a"),
                    wait("paid", "paid"),
                    wait("again", "paid"),
                    wait("approved", "approval-{{input.order}}-{{ config.team }}"),
                ],
                [("a", "paid"), ("paid", "again"), ("again", "approved")],
            )
        )
    )
    assert dag.signal_names == ("approval-{{input.order}}-{{ config.team }}", "paid")
    assert dag.waits_for_signal("paid")
    assert dag.waits_for_signal("approval-7-ops") and dag.waits_for_signal("approval--")
    for unknown in ("pay", "paid ", "PAID", "approval-7", "x-approval-7-ops", ""):
        assert not dag.waits_for_signal(unknown), unknown

    none = build_dag(parse_definition(definition([task("a")])))
    assert none.signal_names == () and not none.waits_for_signal("paid")
    anything = build_dag(parse_definition(definition([wait("w", "{{input.signal}}")])))
    assert anything.waits_for_signal("whatever the input says")


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://u:p@hooks.example.com/x?y=1@2", "https://***@hooks.example.com/x?y=1@2"),
        ("https://token@hooks.example.com", "https://***@hooks.example.com"),  # a user alone
        ("http://a@b@hooks.example.com/x", "http://***@hooks.example.com/x"),
        ("https://hooks.example.com/a@b?c=@#@", "https://hooks.example.com/a@b?c=@#@"),
    ],
)
def test_a_webhook_url_is_shown_without_its_credentials(url: str, shown: str) -> None:
    assert hide_credentials(url) == shown
