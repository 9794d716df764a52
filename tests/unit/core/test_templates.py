"""``{{ }}`` templates and the CEL engine behind them (docs/architecture.md §8)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

import pytest

from composer_core.errors import TemplateError
from composer_core.templates import (
    CelEngine,
    References,
    compile_condition,
    compile_value,
)

ENGINE = CelEngine()
NOW = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)

INPUT: dict[str, Any] = {
    "n": 3,
    "f": 1.5,
    "s": "x",
    "b": True,
    "z": None,
    "m": {"a": 1, "nested": {"k": "v"}},
    "l": [1, 2, 3],
    "base_url": "https://shop.example",
    "id": 42,
}


def activation(
    input: Any = None,
    *,
    tasks: Mapping[str, Any] | None = None,
    config: Any = None,
) -> dict[str, object]:
    """What the machine binds: every root converted once through the engine."""
    return {
        "input": ENGINE.to_native(INPUT if input is None else input),
        "config": ENGINE.to_native(config if config is not None else {"region": "eu"}),
        "run": ENGINE.to_native({"id": "run-1", "workflow_id": "wf", "version": 2}),
        "system": ENGINE.to_native({"now": NOW}),
        "tasks": ENGINE.map_of(
            {k: ENGINE.to_native({"output": v}) for k, v in (tasks or {}).items()}
        ),
    }


def render(value: Any, **kwargs: Any) -> Any:
    return compile_value(value, ENGINE).evaluate(activation(**kwargs))


def evaluate(source: str, **kwargs: Any) -> Any:
    return ENGINE.compile(source).evaluate(activation(**kwargs))


def error_of(source: str, **kwargs: Any) -> str:
    with pytest.raises(TemplateError) as info:
        evaluate(source, **kwargs)
    return str(info.value)


# -- a lone template keeps its type ------------------------------------------


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{{input.n}}", 3),
        ("{{input.f}}", 1.5),
        ("{{input.b}}", True),
        ("{{input.m}}", {"a": 1, "nested": {"k": "v"}}),
        ("{{input.l}}", [1, 2, 3]),
        ("{{input.z}}", None),
        ("{{input.s}}", "x"),
        ("{{ input.n + 1 }}", 4),
        ("  {{input.n}}  ", "  3  "),  # text around it, even blanks: interpolated
        ("{{config.region}}", "eu"),
        ("{{run.id}}", "run-1"),
        ("{{run.version}}", 2),
    ],
)
def test_a_lone_template_keeps_the_expressions_type(template: str, expected: Any) -> None:
    result = render(template)
    assert result == expected
    assert type(result) is type(expected)


def test_a_bool_stays_a_bool_and_is_not_one() -> None:
    assert render("{{input.n > 2}}") is True
    assert render("{{input.n > 5}}") is False
    assert render({"ok": "{{true}}"}) == {"ok": True}
    assert render("{{[true, false]}}") == [True, False]


# -- embedded templates interpolate --------------------------------------------


def test_embedded_templates_interpolate_strings_as_is_and_others_as_compact_json() -> None:
    assert render("{{input.base_url}}/orders/{{input.id}}") == "https://shop.example/orders/42"
    assert render("s={{input.s}} b={{input.b}} z={{input.z}} f={{input.f}}") == (
        "s=x b=true z=null f=1.5"
    )
    assert render("m={{input.m}} l={{input.l}}") == 'm={"a":1,"nested":{"k":"v"}} l=[1,2,3]'
    assert render("{{input.s}}{{input.s}}") == "xx"
    assert render("é {{'ü'}}") == "é ü"  # no \\u escapes


def test_nested_maps_and_lists_compile_and_evaluate() -> None:
    value = {
        "url": "{{input.base_url}}/x",
        "body": {"ids": ["{{input.id}}", 7, {"deep": "{{input.m.nested.k}}"}], "plain": "p"},
        "count": 2,
    }
    assert render(value) == {
        "url": "https://shop.example/x",
        "body": {"ids": [42, 7, {"deep": "v"}], "plain": "p"},
        "count": 2,
    }


@pytest.mark.parametrize(
    "literal", ["plain", "", 0, 1.5, True, None, {"a": [1, "b", {"c": None}]}, [], "{ x }", "}}{"]
)
def test_literals_are_left_untouched(literal: Any) -> None:
    compiled = compile_value(literal, ENGINE)
    assert compiled.evaluate({}) == literal
    assert compiled.references == References()
    assert list(compiled.located()) == []


def test_located_names_the_path_of_every_expression() -> None:
    compiled = compile_value(
        {"url": "{{input.a}}/{{input.b}}", "body": {"ids": ["x", "{{input.c}}"]}},
        ENGINE,
        path="nodes[2].spec",
    )
    assert [(path, e.source) for path, e in compiled.located("nodes[2].spec")] == [
        ("nodes[2].spec.url", "input.a"),
        ("nodes[2].spec.url", "input.b"),
        ("nodes[2].spec.body.ids[1]", "input.c"),
    ]


def test_verbatim_keys_are_neither_parsed_nor_evaluated() -> None:
    code = 'def main(input):\n    return f"{{not a template: {input}}}" + "{{ 1 + }}"\n'
    problems: list[tuple[str, str]] = []
    compiled = compile_value(
        {"code": code, "input": {"n": "{{input.n}}"}},
        ENGINE,
        path="spec",
        on_error=lambda path, exc: problems.append((path, str(exc))),
        verbatim=frozenset({"code"}),
    )
    assert problems == []
    assert compiled.evaluate(activation()) == {"code": code, "input": {"n": 3}}
    assert compiled.references.roots == {"input"}


def test_verbatim_applies_at_the_top_level_only() -> None:
    with pytest.raises(TemplateError):
        compile_value({"input": {"code": "{{ 1 + }}"}}, ENGINE, verbatim=frozenset({"code"}))


# -- conditions ----------------------------------------------------------------


@pytest.mark.parametrize(
    "source", ["{{input.n > 2}}", "input.n > 2", "  {{ input.n > 2 }}  ", "\n input.n > 2 \n"]
)
def test_conditions_take_braces_or_a_bare_expression(source: str) -> None:
    condition = compile_condition(source, ENGINE)
    assert condition.source == "input.n > 2"
    assert condition.evaluate(activation()) is True


def test_a_condition_reads_task_outputs() -> None:
    condition = compile_condition("{{!tasks.reserve.output.body.in_stock}}", ENGINE)
    assert condition.references == References(frozenset({"tasks"}), frozenset({"reserve"}))
    tasks = {"reserve": {"body": {"in_stock": False}}}
    assert condition.evaluate(activation(tasks=tasks)) is True


def test_a_broken_condition_names_the_expression() -> None:
    with pytest.raises(TemplateError, match=r"'input\.n >' is not a valid CEL expression"):
        compile_condition("{{ input.n > }}", ENGINE)


# -- references ------------------------------------------------------------------


def refs(source: str) -> References:
    return ENGINE.compile(source).references


@pytest.mark.parametrize(
    ("source", "roots", "task_ids"),
    [
        ("1 + 2", set(), set()),
        ("input.a", {"input"}, set()),
        (
            "input.a + config.b + run.id + string(system.now)",
            {"input", "config", "run", "system"},
            set(),
        ),
        ("tasks.a.output", {"tasks"}, {"a"}),
        ("tasks['b'].output.x", {"tasks"}, {"b"}),
        ('tasks["c"].output', {"tasks"}, {"c"}),
        ("tasks.a.output.n + tasks.b.output.n", {"tasks"}, {"a", "b"}),
        ("has(tasks.a.output.x) ? tasks.a.output.x : 0", {"tasks"}, {"a"}),
        ("input.l.map(x, x * 2)", {"input"}, set()),
        ("input.l.filter(item, item > input.min)", {"input"}, set()),
        ("input.l.exists(t, tasks.d.output == t)", {"input", "tasks"}, {"d"}),
        ("input.l.all(x, input.l.exists(y, x == y))", {"input"}, set()),
        ("[1, 2].reduce(acc, v, 0, acc + v)", set(), set()),
        ("type(input.n) == int && type(input.s) == string", {"input"}, set()),
        (".input.a", {"input"}, set()),
        (".tasks.e.output", {"tasks"}, {"e"}),
        ("secrets.token", {"secrets"}, set()),
    ],
)
def test_references_name_the_roots_and_task_ids_read(
    source: str, roots: set[str], task_ids: set[str]
) -> None:
    assert refs(source) == References(frozenset(roots), frozenset(task_ids))


@pytest.mark.parametrize(
    "source", ["tasks[input.step].output", "tasks", "tasks.map(k, k)", "size(tasks)"]
)
def test_dynamic_access_to_tasks_makes_task_ids_unknown(source: str) -> None:
    assert refs(source).task_ids is None
    assert "tasks" in refs(source).roots


def test_a_macro_variable_is_bound_only_inside_its_macro() -> None:
    # x after the macro is a free name (unknown root), not the bound variable.
    assert refs("[1].all(x, x > 0) && x") == References(frozenset({"x"}), frozenset())
    # A variable that shadows a root hides it only inside the macro, not in its target.
    assert refs("tasks.a.output.map(tasks, tasks)") == References(
        frozenset({"tasks"}), frozenset({"a"})
    )
    assert refs("input.l.map(input, input)").roots == {"input"}


def test_references_combine_with_or() -> None:
    a = References(frozenset({"input"}), frozenset({"a"}))
    b = References(frozenset({"tasks"}), frozenset({"b"}))
    assert a | b == References(frozenset({"input", "tasks"}), frozenset({"a", "b"}))
    assert (a | References(frozenset({"tasks"}), None)).task_ids is None


def test_a_compiled_value_unions_the_references_of_its_expressions() -> None:
    compiled = compile_value(
        {"a": "{{tasks.x.output}}", "b": ["{{input.n}} and {{tasks.y.output}}"]}, ENGINE
    )
    assert compiled.references == References(frozenset({"tasks", "input"}), frozenset({"x", "y"}))


# -- CEL values back to JSON ---------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("true", True),
        ("false", False),
        ("1 == 1", True),
        ("7", 7),
        ("-7", -7),
        ("7u", 7),
        ("9223372036854775807", 2**63 - 1),
        ("2.5", 2.5),
        ("1.0", 1.0),
        ("'text'", "text"),
        ("null", None),
        ("[1, 'a', 2.5, null, true]", [1, "a", 2.5, None, True]),
        ("{'a': {'b': [1]}}", {"a": {"b": [1]}}),
        ("{1: 'a'}", {"1": "a"}),
        ("{true: 'b'}", {"true": "b"}),
        ("b'abc'", "YWJj"),  # bytes: base64
        ("timestamp('2026-01-01T10:00:00+02:00')", "2026-01-01T08:00:00Z"),
        ("timestamp('2026-01-01T10:00:00.250Z')", "2026-01-01T10:00:00.250000Z"),
        ("system.now", "2026-01-02T03:04:05Z"),
        ("duration('90s')", "90s"),
        ("duration('1h')", "3600s"),
        ("duration('1.5s')", "1.5s"),
        ("duration('1234567s')", "1234567s"),
        ("duration('-2s')", "-2s"),
        ("duration('0s')", "0s"),
    ],
)
def test_cel_values_convert_to_plain_json(source: str, expected: Any) -> None:
    result = evaluate(source)
    assert result == expected
    assert type(result) is type(expected)


def test_conversion_yields_plain_python_types_all_the_way_down() -> None:
    result = evaluate("{'a': [1, true, 'x', 2.5, {'b': null}]}")

    def plain(value: Any) -> bool:
        if isinstance(value, dict):
            return type(value) is dict and all(
                type(k) is str and plain(v) for k, v in value.items()
            )
        if isinstance(value, list):
            return type(value) is list and all(plain(v) for v in value)
        return value is None or type(value) in {bool, int, float, str}

    assert plain(result)


@pytest.mark.parametrize("source", ["1.0 / 0.0", "-1.0 / 0.0", "0.0 / 0.0"])
def test_infinity_and_nan_have_no_json_form(source: str) -> None:
    assert "JSON cannot hold" in error_of(source)


def test_datetimes_in_the_activation_become_cel_timestamps() -> None:
    assert evaluate("system.now + duration('1h') > system.now") is True
    assert evaluate("system.now.getFullYear()") == 2026


def test_values_that_have_no_expression_form_are_refused() -> None:
    with pytest.raises(TemplateError, match="cannot use a value of type object"):
        ENGINE.to_native({"x": object()})


# -- errors ------------------------------------------------------------------------------


def test_a_missing_key_suggests_has() -> None:
    message = error_of("input.missing")
    assert message.startswith("'input.missing': ")
    assert "no such key 'missing'" in message
    assert "has()" in message
    assert "has()" in error_of("input.m['b']")
    assert "'b'" in error_of("input.m['b']")
    assert evaluate("has(input.missing)") is False


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("input.s + 1", "operator + cannot be applied to string and int"),
        ("input.n + 1.5", "operator + cannot be applied to int and double"),
        ("input.n - input.s", "operator - cannot be applied to int and string"),
        ("input.n * input.l", "operator * cannot be applied to int and list"),
        ("input.m / 2", "operator / cannot be applied to map and int"),
        ("input.n < 'a'", "operator < cannot be applied to int and string"),
        ("input.n == 3.0", "operator == cannot be applied to int and double"),
        ("'a' in input.n", "operator in cannot be applied to string and int"),
        ("input.z + 1", "operator + cannot be applied to null and int"),
        ("-input.s", "operator - cannot be applied to string"),
        ("!input.n", "operator ! cannot be applied to int"),
        ("input.l.map(x, x + 'a')", "operator + cannot be applied to int and string"),
    ],
)
def test_a_type_mismatch_names_the_operator_and_the_types(source: str, expected: str) -> None:
    message = error_of(source)
    assert message == f"{source!r}: {expected}"
    assert "Token" not in message and "celtypes" not in message


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("input.l[5]", "list index out of range"),
        ("input.l['a']", "cannot index a list with a string"),
        ("input.s.x", "cannot select a field of a string"),
        ("input.n.x", "cannot select a field of an int"),
        ("input.z.x", "cannot select a field of a null"),
        ("input.n ? 1 : 2", "the condition before ? must be a bool, not int"),
        ("int('abc')", "conversion failed: invalid literal for int() with base 10: 'abc'"),
        ("timestamp('soon')", "conversion failed"),
        ("1 / 0", "divide by zero"),
        ("1 % 0", "divide by zero"),
        ("size(1)", "no such overload"),
    ],
)
def test_evaluation_errors_read_like_messages(source: str, expected: str) -> None:
    message = error_of(source)
    assert message.startswith(f"{source!r}: ")
    assert expected in message
    assert "Type(" not in message and "<class" not in message


def test_an_error_never_dumps_the_activation() -> None:
    secret = {"password": "hunter2", **INPUT}
    for source in ("input.s.x", "input.missing", "input.l[9]", "int(input.s)"):
        message = error_of(source, input=secret)
        assert "hunter2" not in message
        assert len(message) < 400


@pytest.mark.parametrize(
    "source",
    [
        "9223372036854775807 + 1",
        "-9223372036854775808 - 1",
        "9223372036854775807 * 2",
        "int(1e30)",
        "uint(-1)",
        "18446744073709551615u + 1u",
    ],
)
def test_int64_overflow_is_an_error_not_a_big_int(source: str) -> None:
    assert error_of(source) == f"{source!r}: integer overflow: CEL integers are 64-bit"


def test_input_integers_at_the_int64_bounds_stay_ints() -> None:
    assert evaluate("input.big", input={"big": 2**63 - 1}) == 2**63 - 1
    assert evaluate("input.small", input={"small": -(2**63)}) == -(2**63)
    with pytest.raises(TemplateError, match="integer overflow"):
        evaluate("input.big + 1", input={"big": 2**63 - 1})


@pytest.mark.parametrize("big", [2**63, 2**64, -(2**63) - 1, 10**30])
def test_input_integers_beyond_int64_become_doubles_not_a_crash(big: int) -> None:
    # JSON allows them; binding one must not break every template of the run.
    assert evaluate("input.n", input={"n": 1, "big": big}) == 1
    assert evaluate("input.big", input={"big": big}) == float(big)


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{{ 1 + }}", r"'1 \+' is not a valid CEL expression at column"),
        ("{{ foo( }}", r"'foo\(' is not a valid CEL expression"),
        ("{{}}", r"empty template \{\{\}\} in '\{\{\}\}'"),
        ("{{ }}", r"empty template"),
        ("/x/{{ input.a", r"unclosed template in '/x/\{\{ input.a'"),
        ("{{input.a}} and {{ input.b", r"unclosed template"),
        ("{{ foo(1) }}", r"'foo\(1\)' calls unknown function\(s\) foo"),
        ("{{ input.s.shout() }}", r"calls unknown function\(s\) shout"),
    ],
)
def test_compile_errors_name_the_expression(template: str, expected: str) -> None:
    with pytest.raises(TemplateError, match=expected):
        compile_value(template, ENGINE)


def test_known_functions_and_methods_compile() -> None:
    for source in (
        "size(input.s) + input.s.size()",
        "input.s.startsWith('x') && input.s.endsWith('x') && input.s.contains('x')",
        "input.s.matches('^x$')",
        "int('1') + int(2.0) + int(uint(3))",
        "string(1) + string(true)",
        "double(1) + 1.0",
        "has(input.m.a) && dyn(1) == 1",
        "timestamp('2026-01-01T00:00:00Z').getHours()",
        "duration('1s') + duration('2s')",
        "input.l.exists_one(x, x == 2)",
    ):
        ENGINE.compile(source).evaluate(activation())


def test_compile_errors_are_collected_with_their_path_when_asked() -> None:
    problems: list[tuple[str, str]] = []
    compiled = compile_value(
        {"a": "{{ 1 + }}", "b": ["ok", "x {{ y"], "c": "{{input.n}}"},
        ENGINE,
        path="nodes[0].spec",
        on_error=lambda path, exc: problems.append((path, str(exc))),
    )
    assert [p for p, _ in problems] == ["nodes[0].spec.a", "nodes[0].spec.b[1]"]
    assert compiled.evaluate(activation()) == {"a": "{{ 1 + }}", "b": ["ok", "x {{ y"], "c": 3}


def test_an_evaluation_error_inside_an_interpolation_propagates() -> None:
    with pytest.raises(TemplateError, match="no such key 'nope'"):
        render({"url": "https://x/{{input.nope}}"})


def test_a_compiled_expression_is_reusable_across_activations() -> None:
    expression = ENGINE.compile("input.n * 2")
    assert [expression.evaluate(activation({"n": n})) for n in range(4)] == [0, 2, 4, 6]
    assert repr(expression) == "CelExpression('input.n * 2')"


@pytest.mark.xfail(
    strict=True,
    reason="cel-python 0.5 divides int by double as ints (3 / 2.0 == 1); CEL has no such overload",
)
def test_mixed_int_and_double_division_is_an_error() -> None:
    with pytest.raises(TemplateError):
        evaluate("input.n / 2.0")


@pytest.mark.parametrize(
    "path",
    [
        "input",
        "input.n",
        "input.f",
        "input.z",
        "input.m",
        "input.m.nested.k",
        "input.l",
        "system.now",
        "run.version",
        "tasks.charge.output.id",
        "input.missing",  # no such key
        "input.n.more",  # not a map
        "input.z.more",  # null
        "nothing",  # no such variable
        "tasks.absent.output",
    ],
)
def test_a_template_that_names_a_value_is_what_the_interpreter_gives(path: str) -> None:
    # "(path)" is the same expression, which the interpreter evaluates in full: a bare
    # path is looked up directly, and falls back to it where the lookup finds nothing
    tasks = {"charge": {"id": "ch_1"}}

    def outcome(source: str) -> Any:
        try:
            return evaluate(source, tasks=tasks)
        except TemplateError as exc:
            return ("error", str(exc).replace(f"{source!r}:", "SOURCE:", 1))

    assert outcome(path) == outcome(f"({path})")
