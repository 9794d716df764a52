"""``{{ secret.NAME }}``: rendered as a reference the workers resolve, refused wherever its
value would be stored (docs/secrets.md)."""

from __future__ import annotations

from typing import Any

import pytest

from composer_core.errors import DefinitionInvalid
from composer_core.model import (
    build_dag,
    default_engine,
    literal_origin,
    parse_definition,
    validate,
)
from composer_core.templates import ORIGIN_KEY, SECRETS_KEY, SecretReference, compile_value
from tests.unit.core.harness import Harness, dispatched_input, edge, make_dag, node, task

ENGINE = default_engine()


def render(spec: dict[str, Any], **roots: Any) -> Any:
    activation = {k: ENGINE.to_native(v) for k, v in roots.items()}
    return compile_value(spec, ENGINE).evaluate(activation)


def problems(doc: dict[str, Any]) -> list[str]:
    try:
        spec = parse_definition({"id": "wf", **doc})
    except DefinitionInvalid as exc:
        return [str(p) for p in exc.problems]
    return [str(p) for p in validate(spec)]


def http(spec: dict[str, Any], node_id: str = "call") -> dict[str, Any]:
    return node(node_id, "HTTP", {"url": "https://api.example.com/", **spec})


# -- rendering ---------------------------------------------------------------


def test_a_reference_is_written_as_its_text_and_its_place_listed() -> None:
    rendered = render(
        {
            "url": "https://api.example.com/{{ input.path }}",
            "headers": {"Authorization": "Bearer {{ secret.API_TOKEN }}", "X-Key": "{{secret.K}}"},
            "body": {"items": ["plain", "{{secret.K}}-{{ input.path }}-{{secret . K}}"]},
        },
        input={"path": "orders"},
    )
    assert rendered == {
        "url": "https://api.example.com/orders",
        "headers": {"Authorization": "Bearer {{secret.API_TOKEN}}", "X-Key": "{{secret.K}}"},
        "body": {"items": ["plain", "{{secret.K}}-orders-{{secret.K}}"]},
        SECRETS_KEY: [
            {"path": ["headers", "Authorization"], "at": 7, "name": "API_TOKEN"},
            {"path": ["headers", "X-Key"], "at": 0, "name": "K"},
            {"path": ["body", "items", 1], "at": 0, "name": "K"},
            {"path": ["body", "items", 1], "at": 20, "name": "K"},
        ],
    }


def test_the_same_text_in_user_data_is_data_and_listed_nowhere() -> None:
    """A run input holding "{{secret.X}}" must not make a worker resolve X: only the places
    the definition's templates wrote are listed, at offsets counted after the user's text."""
    rendered = render(
        {"body": "{{ input.note }} then {{ secret.MINE }}", "echo": "{{ input }}"},
        input={"note": "{{secret.OTHER}} and more", SECRETS_KEY: [{"name": "OTHER"}]},
    )
    assert rendered["body"] == "{{secret.OTHER}} and more then {{secret.MINE}}"
    assert rendered[SECRETS_KEY] == [{"path": ["body"], "at": 31, "name": "MINE"}]
    assert rendered["body"][31:].startswith("{{secret.MINE}}")
    # a user's "$secrets" below the top is plain data; the workers read only the top one
    assert rendered["echo"][SECRETS_KEY] == [{"name": "OTHER"}]


def test_a_spec_without_references_gets_no_list() -> None:
    assert render({"url": "https://x/{{input.a}}"}, input={"a": 1}) == {"url": "https://x/1"}


def test_a_reference_is_no_expression_and_reads_nothing() -> None:
    compiled = compile_value({"h": "Bearer {{ secret.T }} for {{ input.who }}"}, ENGINE)
    assert [e.source for e in compiled.expressions] == ["input.who"]
    assert compiled.references.roots == frozenset({"input"})
    assert list(compiled.located_secrets("spec")) == [("spec.h", SecretReference("T"))]
    assert SecretReference("T").text == "{{secret.T}}"


def test_a_dispatched_node_stores_the_reference_never_a_value() -> None:
    dag = make_dag([http({"headers": {"Authorization": "Bearer {{ secret.API_TOKEN }}"}})])
    stored = dispatched_input(Harness(dag).start())
    assert stored["headers"] == {"Authorization": "Bearer {{secret.API_TOKEN}}"}
    assert stored[SECRETS_KEY] == [
        {"path": ["headers", "Authorization"], "at": 7, "name": "API_TOKEN"}
    ]


# -- where references are allowed ------------------------------------------------


def test_http_fields_and_python_input_take_references() -> None:
    assert (
        problems(
            {
                "nodes": [
                    http(
                        {
                            "url": "https://api.example.com/v1?key={{secret.KEY}}",
                            "method": "POST",
                            "headers": {"Authorization": "Bearer {{ secret.API_TOKEN }}"},
                            "query": {"sig": "{{secret.SIG}}"},
                            "body": {"password": "{{secret.DB_PASSWORD}}", "l": ["{{secret.A}}"]},
                        }
                    ),
                    node(
                        "py",
                        "PYTHON",
                        {
                            "code": "def main(input):\n    return len(input['token'])\n",
                            "input": {"token": "{{ secret.TOKEN }}", "n": "{{ input.n }}"},
                        },
                    ),
                ],
                "edges": [edge("call", "py")],
            }
        )
        == []
    )


# -- where an HTTP node that carries one may go ------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "https://api.example.com/v1/{{ input.path }}",
        "https://api.example.com",
        "HTTPS://API.example.com:8443?q={{ input.q }}",
        "http://127.0.0.1:8080#{{ input.f }}",
        "http://[::1]:8080/{{ input.p }}",
        "https://api.example.com/{{ secret.PATH }}",
    ],
)
def test_a_node_with_a_secret_may_template_what_follows_a_literal_host(url: str) -> None:
    found = problems({"nodes": [http({"url": url, "headers": {"X": "{{ secret.T }}"}})]})
    assert found == []


@pytest.mark.parametrize(
    "url",
    [
        "http://api.example.invalid{{ input.path }}",  # the attacker's: the path finishes the host
        "{{ input.url }}",
        "https://{{ input.host }}/v1",
        "https://{{ secret.HOST }}/v1",
        "https://api.example.com:{{ input.port }}/",
        "{{ input.scheme }}://api.example.com/",
        "https://user:{{ secret.PW }}@api.example.com/",
        "https://user:pw@api.example.com/",
        "https://api.example.com@{{ input.host }}/",
    ],
)
def test_a_node_with_a_secret_must_spell_out_scheme_host_and_port(url: str) -> None:
    for secret_place in (
        {"headers": {"Authorization": "Bearer {{ secret.T }}"}},
        {"body": {"deep": ["x", {"password": "{{secret.T}}"}]}},
        {"query": {"sig": "{{ secret.T }}"}},
        {},  # the url's own reference, when it has one, is enough
    ):
        if not secret_place and "secret." not in url:
            continue
        found = problems({"nodes": [http({"url": url, **secret_place})]})
        assert len(found) == 1 and found[0].startswith("nodes[0].spec.url: an HTTP node that "), (
            url,
            secret_place,
            found,
        )
        assert "user:password@" in found[0] and "https://api.example.com/v1/" in found[0]
        assert "pw" not in found[0]  # the url (and a password in it) is not quoted back


def test_a_node_without_a_secret_may_template_its_host() -> None:
    assert problems({"nodes": [http({"url": "{{ input.url }}", "body": "{{ input }}"})]}) == []


def test_a_stored_definition_that_breaks_the_rule_still_builds_and_names_its_origin() -> None:
    """Its runs finish: the worker holds each request to the origin its url starts with."""
    doc = parse_definition(
        {
            "id": "wf",
            "nodes": [
                http(
                    {
                        "url": "http://api.example.invalid{{ input.path }}",
                        "headers": {"Authorization": "Bearer {{ secret.T }}"},
                    }
                )
            ],
        }
    )
    with pytest.raises(DefinitionInvalid):
        build_dag(doc)
    dag = build_dag(doc, stored=True)
    stored = dispatched_input(Harness(dag, input={"path": "@127.0.0.2:9911/x"}).start())
    assert stored["url"] == "http://api.example.invalid@127.0.0.2:9911/x"
    assert stored[ORIGIN_KEY] == "http://api.example.invalid"


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("https://api.example.com/v1/{{ input.p }}", "https://api.example.com"),
        ("http://api.example.invalid{{ input.path }}", "http://api.example.invalid"),
        ("https://api.example.com:{{ input.port }}/", "https://api.example.com"),
        ("http://[::1]:8080", "http://[::1]:8080"),
        ("{{ input.url }}", None),
        ("https://{{ secret.HOST }}/", None),
        ("ftp://files.example.com/", None),
    ],
)
def test_the_origin_is_what_the_url_spells_out_before_any_template(
    url: str, origin: str | None
) -> None:
    assert literal_origin(url) == origin


def test_only_an_http_node_that_carries_a_secret_gets_an_origin() -> None:
    dag = make_dag(
        [
            http({"headers": {"X": "{{ secret.T }}"}}, "with_secret"),
            http({"headers": {"X": "{{ input.x }}"}}, "without"),
            node(
                "py",
                "PYTHON",
                {"code": "def main(input):\n    return 1\n", "input": {"t": "{{secret.T}}"}},
            ),
        ],
        [edge("with_secret", "without"), edge("without", "py")],
    )
    activation = {"input": dag.engine.to_native({"x": 1})}
    assert dag.render_input("with_secret", activation)[ORIGIN_KEY] == "https://api.example.com"
    assert ORIGIN_KEY not in dag.render_input("without", activation)
    assert ORIGIN_KEY not in dag.render_input("py", activation)


# -- where they are refused, each with its path ------------------------------------


def test_a_task_node_cannot_take_a_secret() -> None:
    assert problems({"nodes": [task("pay", {"auth": "Bearer {{secret.T}}"})]}) == [
        "nodes[0].spec.auth: {{secret.T}}: a TASK node cannot take a secret: its input is "
        "stored in the database and handed as it is to your own worker's code; give your "
        "worker the secret itself (its own environment or secret store)"
    ]


def test_wait_nodes_cannot_read_a_secret() -> None:
    found = problems(
        {
            "nodes": [
                node("w", "WAIT", {"duration_seconds": "{{ secret.D }}"}),
                node("e", "WAIT_FOR_EVENT", {"event": "paid-{{ secret.E }}"}),
            ],
            "edges": [edge("w", "e")],
        }
    )
    assert [p.split(": ", 2)[:2] for p in found] == [
        ["nodes[0].spec.duration_seconds", "{{secret.D}}"],
        ["nodes[1].spec.event", "{{secret.E}}"],
    ]
    assert "a WAIT node cannot read a secret" in found[0]
    assert "a WAIT_FOR_EVENT node cannot read a secret" in found[1]


def test_a_switch_condition_cannot_read_a_secret() -> None:
    found = problems(
        {
            "nodes": [http({}), node("s", "SWITCH"), http({}, "a"), http({}, "b")],
            "edges": [
                edge("call", "s"),
                edge("s", "a", "{{ secret.FLAG }}"),
                edge("s", "b", "{{ secret.FLAG == 'on' }}"),
            ],
        }
    )
    assert found == [
        "edges[1].condition: 'secret.FLAG': a condition cannot read a secret: the branch it "
        "selects is stored with the run, and would tell the secret's value",
        "edges[2].condition: \"secret.FLAG == 'on'\": a condition cannot read a secret: the "
        "branch it selects is stored with the run, and would tell the secret's value",
    ]


def test_the_run_output_cannot_hold_a_secret() -> None:
    found = problems(
        {"nodes": [http({})], "output": {"token": "{{secret.T}}", "n": "{{ size(secret.T) }}"}}
    )
    assert found == [
        "output.token: {{secret.T}}: the run's output is stored with the run: it cannot hold "
        "a secret",
        "output.n: 'size(secret.T)': the run's output is stored with the run: it cannot hold "
        "a secret",
    ]


@pytest.mark.parametrize(
    "template",
    [
        "{{ secret.T + 'x' }}",  # concatenation inside the expression
        "{{ secret.T == 'x' ? 'a' : 'b' }}",  # a comparison deciding the value
        "{{ secret.T.startsWith('sk_') }}",
        "{{ [secret.T].filter(s, s != '') }}",  # a macro
        "{{ size(secret.T) }}",
        "{{ secret }}",  # the whole root
        "{{ secret['T'] }}",  # not the reference form
    ],
)
def test_a_secret_cannot_be_computed_with(template: str) -> None:
    found = problems({"nodes": [http({"headers": {"X": template}})]})
    assert len(found) == 1, found
    assert found[0].startswith("nodes[0].spec.headers.X: ")
    assert "a secret cannot be computed with: write {{ secret.NAME }} alone" in found[0]


def test_a_secret_name_must_be_an_identifier() -> None:
    found = problems({"nodes": [http({"headers": {"X": "{{ secret.api-token }}"}})]})
    assert any("a secret cannot be computed with" in p for p in found), found


def test_python_code_is_never_templated_so_a_reference_there_is_refused() -> None:
    code = "def main(input):\n    return '{{ secret.T }}'\n"
    found = problems({"nodes": [node("py", "PYTHON", {"code": code})]})
    assert found == [
        "nodes[0].spec.code: PYTHON code is never templated, so {{ secret.NAME }} here would "
        "stay that text: pass the secret in the node's input (input: {token: "
        "'{{ secret.NAME }}'}) and read input['token']"
    ]


@pytest.mark.parametrize("kind", ["HTTP", "TASK"])
def test_the_secrets_key_is_reserved_in_every_spec(kind: str) -> None:
    spec = {SECRETS_KEY: [{"path": ["url"], "at": 0, "name": "T"}], "url": "https://x/"}
    doc_node = task("n", spec) if kind == "TASK" else node("n", kind, spec)
    assert problems({"nodes": [doc_node]}) == [
        "nodes[0].spec.$secrets: '$secrets' is reserved: Composer writes it into a node's "
        "input to say where its secret references are"
    ]
