"""The budget of a template: bounded depth, work and size (docs/architecture.md §8).

A template is evaluated inside the engine's transaction loop, on every step
that reaches its node: one that recurses without end or loops quadratically
would stall every run the service handles. Too deep is refused when the
definition is published; too much work fails that node, and only it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from composer_core.errors import TemplateBudgetExceeded, TemplateError
from composer_core.model import RunStatus, TaskState, parse_definition, validate
from composer_core.statemachine import FinishRun, Transition
from composer_core.templates import (
    MAX_EXPRESSION_DEPTH,
    MAX_STEPS,
    CelEngine,
    _budget,
    compile_value,
)

from .harness import Harness, edge, make_dag, node, of_type, task

R = TypeVar("R")
ENGINE = CelEngine()


def problems(doc: dict[str, Any]) -> list[str]:
    return [str(p) for p in validate(parse_definition(doc))]


def failed_run(tr: Transition) -> FinishRun:
    [finish] = of_type(tr, FinishRun)
    assert finish.status is RunStatus.FAILED
    return finish


# -- depth: refused when published ---------------------------------------------


def test_a_template_nested_too_deep_is_refused_at_publish_with_its_path() -> None:
    deep = "{{" + "-" * 2000 + "1}}"
    found = problems({"id": "wf", "nodes": [task("x", {"input": {"y": deep}})]})
    assert len(found) == 1
    assert found[0].startswith("nodes[0].spec.input.y: ")
    assert f"nested too deep (2009 levels, the limit is {MAX_EXPRESSION_DEPTH})" in found[0]


def test_deep_conditions_and_outputs_are_refused_with_their_paths() -> None:
    deep = "{{" + "(" * 50 + "true" + ")" * 50 + "}}"
    found = problems(
        {
            "id": "wf",
            "nodes": [node("s", "SWITCH"), task("a")],
            "edges": [edge("s", "a", deep)],
            "output": {"r": deep},
        }
    )
    assert [p.split(": ", 1)[0] for p in found] == ["edges[0].condition", "output.r"]
    assert all("nested too deep" in p for p in found)


def test_a_long_chain_of_operators_is_as_deep_as_its_nesting() -> None:
    # The grammar is left-recursive: 1 + 1 + … nests one level per operator.
    chain = "{{" + " + ".join(["1"] * 300) + "}}"
    found = problems({"id": "wf", "nodes": [task("x", {"n": chain})]})
    assert len(found) == 1 and "nested too deep" in found[0]


def test_templates_as_deep_as_real_ones_are_accepted() -> None:
    nested = (
        '{{ input.orders.map(o, {"id": o.id, "lines": o.lines.map(l, '
        '{"sku": l.sku, "amount": double(l.qty) * (l.price - l.discount)})}) }}'
    )
    assert problems({"id": "wf", "nodes": [task("x", {"v": nested})]}) == []


# -- depth at evaluation: a template error of that node ------------------------


def _with_little_stack(call: Callable[[], R], spare: int) -> R:
    """Run ``call`` with only ``spare`` frames left below the recursion limit, as in
    a service whose stack is already deep when it evaluates a template."""

    def descend(depth: int) -> R:
        return call() if depth <= 0 else descend(depth - 1)

    here = _stack_depth()
    return descend(sys.getrecursionlimit() - here - spare)


def _stack_depth() -> int:
    frame, n = sys._getframe(), 0
    while frame is not None:
        n, frame = n + 1, frame.f_back  # type: ignore[assignment]
    return n


def test_recursion_while_evaluating_fails_the_node_instead_of_escaping() -> None:
    nested = "{{" + "-" * 60 + "input.n}}"
    h = Harness(make_dag([task("x", {"v": nested}), task("after")], [edge("x", "after")]), {"n": 1})
    tr = _with_little_stack(h.start, spare=150)
    assert h.state("x") is TaskState.FAILED
    error = failed_run(tr).error or ""
    assert error.startswith("node x failed: input of x could not be resolved: ")
    assert "nested too deep to evaluate" in error


def test_an_input_nested_too_deep_for_the_evaluator_fails_the_node() -> None:
    deep: Any = 1
    for _ in range(5000):
        deep = [deep]
    h = Harness(make_dag([task("x", {"v": "{{input.d}}"})]), {"d": deep})
    tr = h.start()
    assert h.state("x") is TaskState.FAILED
    assert "nested too deep to evaluate" in (failed_run(tr).error or "")


def test_running_out_of_memory_while_evaluating_fails_the_node() -> None:
    class Exhausting(dict[str, Any]):
        """A run input whose conversion runs out of memory (as a huge one would)."""

        def items(self) -> Any:
            raise MemoryError

    h = Harness(make_dag([task("x", {"v": "{{input.a}}"})]), Exhausting(a=1))
    tr = h.start()
    assert h.state("x") is TaskState.FAILED
    assert "ran out of memory" in (failed_run(tr).error or "")


# -- work: over budget the node fails -----------------------------------------


def test_a_quadratic_template_fails_its_node_with_template_exceeded_its_budget() -> None:
    template = "{{input.l.map(x, input.l.filter(y, y == x).size())}}"
    h = Harness(
        make_dag([task("x", {"counts": template}), task("after")], [edge("x", "after")]),
        {"l": list(range(300))},
    )
    tr = h.start()
    assert h.state("x") is TaskState.FAILED
    assert h.state("after") is None
    error = failed_run(tr).error or ""
    assert f"template exceeded its budget (more than {MAX_STEPS} evaluation steps" in error


#: Budgets lowered for the tests below, so that each runs out in milliseconds; the
#: quadratic template above shows the real limits at work.
STEPS, BUILT = 2_000, 20_000


@pytest.fixture
def small_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_budget, "MAX_STEPS", STEPS)
    monkeypatch.setattr(_budget, "MAX_BUILT", BUILT)


def evaluate(source: str, input: Any) -> Any:
    return ENGINE.compile(source).evaluate({"input": ENGINE.to_native(input)})


def over_budget(source: str, input: Any) -> str:
    with pytest.raises(TemplateBudgetExceeded) as caught:
        evaluate(source, input)
    message = str(caught.value)
    assert "template exceeded its budget (" in message
    return message


@pytest.mark.usefixtures("small_budget")
def test_steps_count_each_element_a_comprehension_visits_times_its_body() -> None:
    # One element of a ten-node body (``x``) costs ten steps.
    assert evaluate("input.l.map(x, x)", {"l": list(range(STEPS // 10))}) == list(
        range(STEPS // 10)
    )
    message = over_budget("input.l.map(x, x)", {"l": list(range(STEPS // 10 + 1))})
    assert f"more than {STEPS} evaluation steps" in message
    over_budget("input.l.exists(x, x < 0)", {"l": list(range(STEPS))})
    over_budget("input.l.exists_one(x, x < 0)", {"l": list(range(STEPS))})
    over_budget("input.l.reduce(r, x, 0, r + x)", {"l": list(range(STEPS))})


@pytest.mark.usefixtures("small_budget")
def test_scanning_a_long_list_costs_steps_too() -> None:
    few, big = list(range(20)), list(range(2_000))  # 20 scans of 2,000: 5,000 steps
    over_budget("input.few.map(x, x in input.big)", {"few": few, "big": big})
    over_budget("input.few.all(x, input.big == input.big)", {"few": few, "big": big})
    over_budget("input.few.map(x, input.big.min())", {"few": few, "big": big})
    text = "x" * (16 * 1024 * 200)  # each scan of it: 200 steps
    over_budget("input.few.filter(x, input.text.contains('y'))", {"few": few, "text": text})


@pytest.mark.usefixtures("small_budget")
def test_building_more_than_the_budget_fails() -> None:
    message = over_budget(
        "input.l.reduce(s, x, '', s + input.text)", {"l": [0] * 20, "text": "x" * 1_000}
    )
    assert f"it built more than {BUILT} characters and list or map elements" in message
    over_budget("input.l.reduce(acc, x, [], acc + [x])", {"l": list(range(200))})
    over_budget("input.l.map(x, string(input.text))", {"l": [0] * 20, "text": "x" * 1_000})


@pytest.mark.usefixtures("small_budget")
def test_a_result_holding_one_value_many_times_is_charged_for_every_copy() -> None:
    # Few steps, but written out it is 150 lists of 150 elements.
    message = over_budget("input.l.map(x, input.l)", {"l": list(range(150))})
    assert "it built more than" in message


@pytest.mark.usefixtures("small_budget")
def test_one_budget_covers_every_template_of_a_node() -> None:
    each = "{{input.l.map(x, x).size()}}"  # about a third of the budget
    n = STEPS // 30
    h = Harness(
        make_dag([task("x", {"a": each, "b": each, "c": [each, each]})]), {"l": list(range(n))}
    )
    tr = h.start()
    assert h.state("x") is TaskState.FAILED
    assert "template exceeded its budget" in (failed_run(tr).error or "")
    # One alone is within the budget, every time: the budget is per evaluation.
    single = compile_value({"a": each}, ENGINE)
    activation = {"input": ENGINE.to_native({"l": list(range(n))})}
    assert single.evaluate(activation) == single.evaluate(activation) == {"a": n}


@pytest.mark.usefixtures("small_budget")
def test_a_condition_over_budget_fails_its_switch() -> None:
    h = Harness(
        make_dag(
            [node("s", "SWITCH"), task("a")],
            [edge("s", "a", "{{input.l.map(x, input.l.filter(y, y == x).size()).size() > 0}}")],
        ),
        {"l": list(range(50))},
    )
    tr = h.start()
    assert h.state("s") is TaskState.FAILED
    assert "template exceeded its budget" in (failed_run(tr).error or "")


@pytest.mark.usefixtures("small_budget")
def test_a_run_output_over_budget_fails_the_run() -> None:
    h = Harness(
        make_dag([task("a")], output={"r": "{{input.l.map(x, input.l)}}"}), {"l": list(range(150))}
    )
    h.start()
    error = failed_run(h.complete("a")).error or ""
    assert error.startswith("run output: ") and "template exceeded its budget" in error


# -- what stays free -----------------------------------------------------------


def test_ordinary_templates_are_well_within_the_budget() -> None:
    orders = [
        {
            "id": i,
            "lines": [{"sku": f"s{j}", "qty": j, "price": 2.5, "discount": 0.5} for j in range(5)],
        }
        for i in range(200)
    ]
    result = evaluate(
        'input.orders.filter(o, o.id % 2 == 0).map(o, {"id": o.id, "lines": o.lines.map(l, '
        '{"sku": l.sku, "amount": double(l.qty) * (l.price - l.discount)})})',
        {"orders": orders},
    )
    assert len(result) == 100 and result[1]["lines"][4] == {"sku": "s4", "amount": 8.0}
    assert evaluate("input.l.map(x, x * 2).size()", {"l": list(range(2000))}) == 2000


@pytest.mark.usefixtures("small_budget")
def test_a_large_value_passed_through_costs_nothing() -> None:
    # Size limits on inputs and outputs bound these; the budget counts what is built.
    text, items = "x" * (2 * BUILT), [{"k": i} for i in range(BUILT)]
    value = compile_value({"t": "{{input.t}}", "i": "{{input.i}}", "x": "{{input.t}}"}, ENGINE)
    activation = {"input": ENGINE.to_native({"t": text, "i": items})}
    assert value.evaluate(activation) == {"t": text, "i": items, "x": text}


@pytest.mark.usefixtures("small_budget")
def test_the_budget_error_is_a_template_error_naming_the_expression() -> None:
    with pytest.raises(TemplateError, match=r"^'input\.l\.map\(x, input\.l\)': template exceeded"):
        evaluate("input.l.map(x, input.l)", {"l": list(range(200))})


def test_depth_limit_is_the_documented_constant() -> None:
    at_limit = ENGINE.compile("-" * (MAX_EXPRESSION_DEPTH - 9) + "1")
    assert at_limit.evaluate({}) == (-1) ** (MAX_EXPRESSION_DEPTH - 9)
    with pytest.raises(TemplateError, match="nested too deep"):
        ENGINE.compile("-" * (MAX_EXPRESSION_DEPTH - 8) + "1")
