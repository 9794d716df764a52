"""The budget of an event's templates: bounded depth, work and size (docs/architecture.md §8).

Templates are evaluated inside the services' event loops, on every step that
reaches their node: one that recurses without end or loops quadratically, or
a FORK into many modest ones, would stall every run the service handles. Too
deep is refused when the definition is published; too much work in one event
fails the node that ran past it; a node's input is measured as it is rendered.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from composer_core.errors import TemplateBudgetExceeded, TemplateError, WorkPaused
from composer_core.memory import sequential_ids
from composer_core.model import RunStatus, TaskState, WorkflowDAG, parse_definition, validate
from composer_core.statemachine import (
    CreateTask,
    Deps,
    FinishRun,
    InputLimit,
    Machine,
    Run,
    RunStarted,
    Transition,
)
from composer_core.templates import (
    MAX_EXPRESSION_DEPTH,
    MAX_STEPS,
    Budget,
    CelEngine,
    _budget,
    compile_value,
)

from .harness import (
    T0,
    Harness,
    created,
    dispatched,
    dispatched_input,
    edge,
    make_dag,
    node,
    of_type,
    task,
)

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
STEPS, BUILT, RESULTS = 2_000, 20_000, 200_000


@pytest.fixture
def small_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_budget, "MAX_STEPS", STEPS)
    monkeypatch.setattr(_budget, "MAX_BUILT", BUILT)
    monkeypatch.setattr(_budget, "MAX_RESULTS", RESULTS)


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
    assert f"built more than {BUILT} characters and list or map elements" in message
    over_budget("input.l.reduce(acc, x, [], acc + [x])", {"l": list(range(200))})
    over_budget("input.l.map(x, string(input.text))", {"l": [0] * 20, "text": "x" * 1_000})


@pytest.mark.usefixtures("small_budget")
def test_a_result_holding_one_value_many_times_is_charged_for_every_copy() -> None:
    # Few steps, but written out it is 150 lists of 150 elements.
    message = over_budget("input.l.map(x, input.l)", {"l": list(range(150))})
    assert "built more than" in message


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
    # One alone is within the budget, every time: evaluated by itself, a value has its own.
    single = compile_value({"a": each}, ENGINE)
    activation = {"input": ENGINE.to_native({"l": list(range(n))})}
    assert single.evaluate(activation) == single.evaluate(activation) == {"a": n}


@pytest.mark.usefixtures("small_budget")
def test_one_budget_covers_every_template_an_event_reaches() -> None:
    # A FORK into branches that each take 40 % of the budget: two fit in one event, the
    # third fails naming the limit; a branch that spends no steps still starts.
    each = "{{input.l.map(x, x).size()}}"
    dag = make_dag(
        [
            node("fan", "FORK"),
            *(task(f"b{i}", {"n": each}) for i in range(3)),
            task("cheap", {"n": "{{input.n}}"}),
        ],
        [edge("fan", f"b{i}") for i in range(3)] + [edge("fan", "cheap")],
    )
    h = Harness(dag, {"l": list(range(STEPS * 4 // 100)), "n": 1})
    tr = h.start()
    assert dispatched(tr) == ["b0", "b1", "cheap"]
    assert h.state("b2") is TaskState.FAILED
    [failed] = [a for a in of_type(tr, CreateTask) if a.state is TaskState.FAILED]
    assert f"template exceeded its budget (more than {STEPS} evaluation steps" in (
        failed.error or ""
    )
    # the next event has a budget of its own
    h.complete("b0")
    assert h.state("b1") is TaskState.PENDING


@pytest.mark.usefixtures("small_budget")
def test_what_the_results_hold_counts_once_per_template_for_the_whole_event() -> None:
    # Passed through, a value costs what it holds: once is free, a hundred times is not.
    dag = make_dag([task("x", {"parts": ["{{input.s}}"] * 100})])
    h = Harness(dag, {"s": "x" * (RESULTS // 10)})
    tr = h.start()
    assert h.state("x") is TaskState.FAILED
    assert f"the results of one event's templates hold more than {RESULTS} characters" in (
        failed_run(tr).error or ""
    )
    ok = Harness(dag, {"s": "x" * (RESULTS // 200)})
    ok.start()
    assert ok.state("x") is TaskState.PENDING


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


# -- the pause mark: where a decision stops to be made elsewhere -----------------


def heavy_fork() -> tuple[WorkflowDAG, Run]:
    each = "{{input.l.map(x, x).size()}}"
    dag = make_dag(
        [node("fan", "FORK"), *(task(f"b{i}", {"n": each}) for i in range(3))],
        [edge("fan", f"b{i}") for i in range(3)],
    )
    return dag, Run("run-1", "wf", 1, RunStatus.RUNNING, {"l": list(range(100))}, None)


def test_past_its_pause_mark_a_decision_stops_and_decides_nothing() -> None:
    dag, run = heavy_fork()
    # 3 times 1,000 steps; the mark is at 2 % of the budget, 2,000 steps
    paused = Machine(dag, Deps(T0, sequential_ids()), budget=Budget(pause_at=0.02))
    with pytest.raises(WorkPaused):
        paused.apply(run, RunStarted())
    # decided again from the start on a budget of its own, it is what it would have been
    again = Machine(dag, Deps(T0, sequential_ids())).apply(run, RunStarted())
    unpaused = Machine(dag, Deps(T0, sequential_ids())).apply(run, RunStarted())
    assert isinstance(again, Transition) and again == unpaused
    assert dispatched(again) == ["b0", "b1", "b2"]


def test_within_its_pause_mark_a_decision_is_made_as_without_one() -> None:
    dag, run = heavy_fork()
    budget = Budget(pause_at=0.05)
    marked = Machine(dag, Deps(T0, sequential_ids()), budget=budget).apply(run, RunStarted())
    assert marked == Machine(dag, Deps(T0, sequential_ids())).apply(run, RunStarted())
    assert 0.02 < budget.used < 0.05


def test_the_pause_mark_is_not_a_template_error() -> None:
    # nothing in the machine may catch it as a node's failure
    assert not issubclass(WorkPaused, TemplateError)
    assert not issubclass(WorkPaused, ValueError)


# -- the node input limit, checked as the input is rendered ------------------------

#: What an InputLimit's ``describe`` was called with.
Described = list[tuple[int, bool]]


def limited(max_bytes: int, said: Described) -> Deps:
    def describe(size: int, exact: bool) -> str:
        said.append((size, exact))
        return f"node input is {'' if exact else 'at least '}{size} bytes, over {max_bytes}"

    return Deps(T0, sequential_ids(), InputLimit(max_bytes, "INPUT_TOO_LARGE", describe))


def start(dag: WorkflowDAG, input: Any, deps: Deps) -> Transition:
    run = Run("run-1", "wf", 1, RunStatus.RUNNING, input, None)
    tr = Machine(dag, deps).apply(run, RunStarted())
    assert isinstance(tr, Transition)
    return tr


def test_a_node_input_over_the_limit_fails_for_good_as_soon_as_it_is_certain() -> None:
    said: Described = []
    dag = make_dag([task("x", {"parts": ["{{input.s}}"] * 100})])
    tr = start(dag, {"s": "y" * 300}, limited(1_000, said))
    [created] = of_type(tr, CreateTask)
    assert created.state is TaskState.FAILED and dispatched(tr) == []
    assert created.input is None  # nothing of it is kept
    assert created.error_code == "INPUT_TOO_LARGE"
    # rendering stopped at the 4th template of 100: 4 times 300 characters held by then
    assert said == [(1_200, False)]
    assert created.error == "node input is at least 1200 bytes, over 1000"
    assert failed_run(tr).error == "node x failed: node input is at least 1200 bytes, over 1000"


def test_a_node_input_is_measured_as_the_json_it_is() -> None:
    # 100 numbers of 7 digits hold 100 elements but are 800 bytes of JSON: the exact
    # size, measured once all is rendered, is what is refused
    said: Described = []
    dag = make_dag([task("x", {"l": "{{input.l}}"})])
    numbers = [1_000_000 + i for i in range(100)]
    tr = start(dag, {"l": numbers}, limited(500, said))
    exact = len(json.dumps({"l": numbers}, separators=(",", ":")))
    assert said == [(exact, True)] and created(tr, TaskState.FAILED) == ["x"]
    # at the limit it goes
    fits = start(dag, {"l": numbers}, limited(exact, []))
    assert dispatched(fits) == ["x"] and dispatched_input(fits) == {"l": numbers}


def test_a_wait_node_input_over_the_limit_fails_too() -> None:
    said: Described = []
    dag = make_dag([node("w", "WAIT_FOR_EVENT", {"event": "{{input.name}}"})])
    tr = start(dag, {"name": "n" * 2_000}, limited(1_000, said))
    assert created(tr, TaskState.FAILED) == ["w"] and said == [(2_000, False)]


def test_a_spec_without_templates_is_not_measured_again() -> None:
    # as large as its definition allows (64 KiB); the lease checks it again
    dag = make_dag([task("x", {"text": "z" * 2_000})])
    assert dispatched(start(dag, {}, limited(1_000, []))) == ["x"]


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
def test_a_large_value_passed_through_costs_only_what_it_holds() -> None:
    # Size limits on inputs and outputs bound one such value; the budget counts what is
    # built, and what the results hold for the whole event.
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
