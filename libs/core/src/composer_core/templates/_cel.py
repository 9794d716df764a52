"""CEL through cel-python.

Measured cost (tests/bench): the grammar is built once per process (~80 ms),
each expression is compiled once per definition version, and one evaluation
takes tens of microseconds. cel-python raises internal texts
(``found no matching overload for Token('RULE', 'addition_add')…``); they
are rewritten here into messages that name the expression.

cel-python has no limits of its own, so its interpreter is subclassed to
spend from the event's Budget (templates/_budget.py): each comprehension
element, each concatenation and each long scan is charged as it happens, each
result as it is written out, and compiling refuses an expression nested
deeper than the interpreter can recurse.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
import re
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

import celpy
import lark
from celpy import celtypes
from celpy.celparser import CELParseError
from celpy.evaluation import Activation, CELEvalError, Evaluator, base_functions

from composer_core.errors import TemplateBudgetExceeded, TemplateError
from composer_core.templates import _budget
from composer_core.templates._budget import (
    CHARACTERS_PER_STEP,
    ELEMENTS_PER_STEP,
    MAX_EXPRESSION_DEPTH,
    Budget,
)
from composer_core.templates._engine import Json, References

#: Macros and how many leading arguments name variables bound inside the call
#: (``reduce`` and ``min`` are cel-python extensions).
_BINDING_MACROS = {"all": 1, "exists": 1, "exists_one": 1, "map": 1, "filter": 1, "reduce": 2}
#: Functions an expression may call: cel-python's standard library and the macros.
_FUNCTIONS = frozenset(name for name in base_functions if name[:1].isalpha()) | {
    "has",
    "dyn",
    "min",
    *_BINDING_MACROS,
}
#: Names CEL resolves without the activation (``type(x) == int``): not roots.
_TYPE_NAMES = frozenset(
    {
        "bool",
        "bytes",
        "double",
        "duration",
        "dyn",
        "int",
        "list",
        "map",
        "null_type",
        "string",
        "timestamp",
        "type",
        "uint",
    }
)
_OVERLOAD = re.compile(r"found no matching overload for Token\('RULE', '(\w+)'\)")
_APPLIED_TO = re.compile(r"applied to '\((.*)\)'", re.DOTALL)
_CLASS = re.compile(r"<class '([\w.]+)'>")
_CEL_VALUE = re.compile(r"\b[A-Z][a-z]+Type\(([^()]*)\)")
_UNDECLARED = re.compile(r"undeclared reference to '([^']*)'")
_OPERATOR_NAMES = {
    "addition_add": "+",
    "addition_sub": "-",
    "multiplication_mul": "*",
    "multiplication_div": "/",
    "multiplication_mod": "%",
    "relation_lt": "<",
    "relation_le": "<=",
    "relation_gt": ">",
    "relation_ge": ">=",
    "relation_eq": "==",
    "relation_ne": "!=",
    "relation_in": "in",
    "unary_neg": "-",
    "unary_not": "!",
}
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
#: The longest message taken over from cel-python: some embed whole activations.
_MAX_MESSAGE = 300
#: The longest quote of an expression in a message about its depth or budget.
_MAX_QUOTE = 80
#: Macros whose body runs once per element, and the index of the body among their arguments.
_COMPREHENSIONS = {"map": 1, "filter": 1, "all": 1, "exists": 1, "exists_one": 1, "reduce": 3}
#: Conversions that copy their argument.
_COPYING_CONVERSIONS = frozenset({"string", "bytes", "list", "map"})
_RECURSION = "nested too deep to evaluate (Python's recursion limit was reached)"
_MEMORY = "ran out of memory while evaluating"


class _Runner(celpy.InterpretedRunner):
    """Runs a program with the budgeted interpreter; knows what each comprehension costs."""

    def __init__(
        self,
        environment: celpy.Environment,
        ast: lark.Tree[Any],
        functions: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(environment, ast, functions)
        self.costs = _comprehension_costs(ast)
        # The environment's names and functions, loaded once: an evaluation binds its
        # context onto a clone of it (Evaluator.set_activation), never onto it.
        self._base = self.new_activation()

    def evaluate(self, context: Mapping[str, Any]) -> Any:
        evaluator = _Evaluator(self.ast, self._base, self.costs)
        return evaluator.evaluate(context)


class _Evaluator(Evaluator):
    """cel-python's interpreter, charging the current Budget for what it repeats or builds."""

    def __init__(self, ast: lark.Tree[Any], activation: Activation, costs: dict[int, int]) -> None:
        super().__init__(ast, activation)
        self.costs = costs

    def sub_evaluator(self, ast: lark.Tree[Any]) -> Evaluator:
        return _Evaluator(ast, self.activation, self.costs)

    def build_macro_eval(self, child: lark.Tree[Any]) -> Callable[[Any], Any]:
        return _charged(super().build_macro_eval(child), self.costs.get(id(child), 1))

    def build_ss_macro_eval(self, child: lark.Tree[Any]) -> Callable[[Any], Any]:
        return _charged(super().build_ss_macro_eval(child), self.costs.get(id(child), 1))

    def build_reduce_macro_eval(
        self, child: lark.Tree[Any]
    ) -> tuple[Callable[[Any, Any], Any], lark.Tree[Any]]:
        body, initial = super().build_reduce_macro_eval(child)
        return _charged(body, self.costs.get(id(child), 1)), initial

    def member_dot_arg(self, tree: lark.Tree[Any]) -> Any:
        name = tree.children[1]
        if name == "min":
            # Python's min() walks the whole list: charge it before it runs.
            target = self.visit(tree.children[0])
            if isinstance(target, CELEvalError):
                return target
            _scan(target)
            try:
                return min(target)
            except ValueError as exc:  # as cel-python answers it
                err = "Attempt to reduce an empty sequence or a sequence with a None value"
                return CELEvalError(err, exc.__class__, exc.args, tree=tree)
        result = super().member_dot_arg(tree)
        if name in {"map", "filter"} and isinstance(result, list):
            _build(len(result))
        return result

    def function_eval(self, name_token: lark.Token, exprlist: Any = None) -> Any:
        result = super().function_eval(name_token, exprlist)
        if name_token.value in _COPYING_CONVERSIONS and isinstance(
            result, str | bytes | list | dict
        ):
            _build(len(result))
        return result


def _charged(body: Callable[..., Any], cost: int) -> Callable[..., Any]:
    """``body`` (a comprehension's, run once per element) spending ``cost`` steps per run."""
    budget = _budget.current.get()
    if budget is None:
        return body

    def charged(*args: Any) -> Any:
        budget.spend(cost)
        return body(*args)

    return charged


def _scan(value: Any) -> None:
    """Charge walking ``value``: a list or map element by element, a string at C speed."""
    budget = _budget.current.get()
    if budget is None:
        return
    if isinstance(value, list | dict):
        budget.spend(len(value) // ELEMENTS_PER_STEP)
    elif isinstance(value, str | bytes):
        budget.spend(len(value) // CHARACTERS_PER_STEP)


def _build(units: int) -> None:
    budget = _budget.current.get()
    if budget is not None:
        budget.build(units)


def _concatenating(add: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def charged_add(left: Any, right: Any) -> Any:
        result = add(left, right)
        if isinstance(result, str | bytes | list):
            _build(len(result))
        return result

    return charged_add


def _scanning(function: Callable[..., Any], *, both: bool = False) -> Callable[..., Any]:
    """``function`` charged for walking its first argument (``both``: the longer of two)."""

    def charged(first: Any, second: Any, *rest: Any) -> Any:
        _scan(second if both and _length(second) > _length(first) else first)
        return function(first, second, *rest)

    return charged


def _length(value: Any) -> int:
    return len(value) if isinstance(value, str | bytes | list | dict) else 0


def _contained(operator_in: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def charged_in(item: Any, container: Any) -> Any:
        _scan(container)
        return operator_in(item, container)

    return charged_in


#: Operators and functions whose cost grows with their operands, charged before they run.
_CHARGED_FUNCTIONS: dict[str, Any] = {
    "_+_": _concatenating(base_functions["_+_"]),
    "_in_": _contained(base_functions["_in_"]),
    "_==_": _scanning(base_functions["_==_"], both=True),
    "_!=_": _scanning(base_functions["_!=_"], both=True),
    "contains": _scanning(base_functions["contains"]),
    "startsWith": _scanning(base_functions["startsWith"]),
    "endsWith": _scanning(base_functions["endsWith"]),
    "matches": _scanning(base_functions["matches"]),
}


@cache
def _environment() -> Any:
    # One Environment per process: building the grammar is the expensive part.
    return celpy.Environment(runner_class=_Runner)


def prepare_parser() -> None:
    """Build the process's CEL parser now rather than on the first template compiled.

    cel-python builds its LALR parser from the grammar the first time an
    Environment is made: ~0.4 s of CPU (1.1 s under a profiler) on this machine.
    Left to the first use, a service pays it inside its first transaction that
    compiles a definition: the timer's first due waits fired that much late, the
    first start or report after a deploy stalled. A service calls this while it
    starts, before it says it is ready.
    """
    _environment()


#: A template that only names a value: a variable, or a path of fields into it.
_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_ABSENT = object()


class CelExpression:
    __slots__ = ("_path", "_program", "_references", "_source")

    def __init__(self, source: str, program: Any, references: References) -> None:
        self._source = source
        self._program = program
        self._references = references
        # `{{ index }}`, `{{ item.sku }}`, `{{ input.order.id }}`: looked up directly,
        # without building an interpreter's activation for them (a MAP renders one per item)
        text = source.strip()
        self._path = tuple(text.split(".")) if _PATH.fullmatch(text) else None

    @property
    def source(self) -> str:
        return self._source

    @property
    def references(self) -> References:
        return self._references

    def evaluate(self, activation: Mapping[str, object]) -> Json:
        # Within a decision (or a CompiledValue) the budget is the event's; alone, its own.
        token = _budget.current.set(Budget()) if _budget.current.get() is None else None
        try:
            return self._evaluate(activation)
        except TemplateBudgetExceeded as exc:
            raise TemplateBudgetExceeded(f"{_quote(self._source)}: {exc}") from None
        except RecursionError as exc:
            raise TemplateError(f"{_quote(self._source)}: {_RECURSION}") from exc
        except MemoryError as exc:
            raise TemplateError(f"{_quote(self._source)}: {_MEMORY}") from exc
        finally:
            if token is not None:
                _budget.current.reset(token)

    def _evaluate(self, activation: Mapping[str, object]) -> Json:
        if self._path is not None:
            found = _follow(activation, self._path)
            if found is not _ABSENT:
                return to_json(found)  # charged and its errors named as the interpreter's
        try:
            result = self._program.evaluate(activation)
        except CELEvalError as exc:
            raise TemplateError(f"{self._source!r}: {_describe(exc)}") from exc
        except (ArithmeticError, ValueError, TypeError, KeyError) as exc:
            raise TemplateError(f"{self._source!r}: {exc}") from exc
        if isinstance(result, CELEvalError):
            raise TemplateError(f"{self._source!r}: {_describe(result)}")
        return to_json(result)

    def __repr__(self) -> str:
        return f"CelExpression({self._source!r})"


def _follow(activation: Mapping[str, object], path: tuple[str, ...]) -> Any:
    """What a path of field selections names, selected from maps as CEL selects it;
    _ABSENT where CEL would not simply find it (no such variable or key, not a map):
    the interpreter then evaluates it, and says why it fails."""
    value = activation.get(path[0], _ABSENT)
    for name in path[1:]:
        if not isinstance(value, dict) or name not in value:  # a CEL MapType is a dict
            return _ABSENT
        value = value[name]
    return value


class CelEngine:
    """The cel-python implementation of ExpressionEngine."""

    def compile(self, source: str) -> CelExpression:
        env = _environment()
        try:
            tree = env.compile(source)
        except CELParseError as exc:
            where = f" at column {exc.column}" if getattr(exc, "column", None) else ""
            raise TemplateError(f"{source!r} is not a valid CEL expression{where}") from exc
        except lark.exceptions.LarkError as exc:  # pragma: no cover - celpy wraps most
            raise TemplateError(f"{source!r} is not a valid CEL expression: {exc}") from exc
        depth = _depth(tree)
        if depth > MAX_EXPRESSION_DEPTH:
            # Evaluating it would recurse deeper than Python allows: refuse it now.
            raise TemplateError(
                f"{_quote(source)}: expression nested too deep ({depth} levels, "
                f"the limit is {MAX_EXPRESSION_DEPTH}): use fewer parentheses, "
                "operators or calls inside one another"
            )
        references, unknown = _analyse(tree)
        if unknown:
            raise TemplateError(
                f"{source!r} calls unknown function(s) {', '.join(sorted(unknown))}"
            )
        return CelExpression(source, env.program(tree, _CHARGED_FUNCTIONS), references)

    def to_native(self, value: Json) -> object:
        try:
            return to_cel(value)
        except RecursionError as exc:
            raise TemplateError(f"a value is {_RECURSION}") from exc
        except MemoryError as exc:
            raise TemplateError(f"{_MEMORY} a value") from exc

    def map_of(self, entries: Mapping[str, object]) -> object:
        return celtypes.MapType({celtypes.StringType(k): v for k, v in entries.items()})


def to_cel(value: Json) -> Any:
    """Plain JSON (and datetimes) to CEL values; faster than celpy.adapter for our shapes."""
    if value is None:
        return None
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int):
        if _INT64_MIN <= value <= _INT64_MAX:
            return celtypes.IntType(value)
        # JSON allows any integer but CEL's are 64-bit. A double, as most JSON readers
        # would make of it: refusing it would fail every template of the run, since
        # the whole input is bound whether an expression reads this value or not.
        return celtypes.DoubleType(float(value))
    if isinstance(value, float):
        return celtypes.DoubleType(value)
    if isinstance(value, str):
        return celtypes.StringType(value)
    if isinstance(value, Mapping):
        return celtypes.MapType({celtypes.StringType(str(k)): to_cel(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return celtypes.ListType([to_cel(v) for v in value])
    if isinstance(value, dt.datetime):
        return celtypes.TimestampType(value)
    raise TemplateError(f"cannot use a value of type {type(value).__name__} in an expression")


def to_json(value: Any) -> Json:
    """CEL values back to plain JSON types (a bool stays a bool, not 1).

    Under a budget, each string, list or map is charged as held by the result (its
    length), and one met again (``input.l.map(x, input.l)`` holds one list n
    times) as built: written out, it is a copy.
    """
    return _to_json(value, set(), _budget.current.get())


def _to_json(value: Any, seen: set[int], budget: Budget | None) -> Json:
    if value is None or isinstance(value, celtypes.NullType):
        return None
    if isinstance(value, bool | celtypes.BoolType):
        return bool(value)
    if isinstance(value, int):  # IntType, UintType
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TemplateError(f"expression produced {float(value)}, which JSON cannot hold")
        return float(value)
    if isinstance(value, str):
        if budget is not None:
            _once(value, seen, budget)
        return str(value)
    if isinstance(value, bytes):
        if budget is not None:
            _once(value, seen, budget)
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, dt.timedelta):
        return _duration(value)
    if isinstance(value, Mapping):
        if budget is not None:
            _once(value, seen, budget)
        return {_key(k): _to_json(v, seen, budget) for k, v in value.items()}
    if isinstance(value, list | tuple):
        if budget is not None:
            _once(value, seen, budget)
        return [_to_json(v, seen, budget) for v in value]
    raise TemplateError(f"expression produced a {type(value).__name__}, which has no JSON form")


def _once(value: Any, seen: set[int], budget: Budget) -> None:
    """The first time a value is written out it is held by the result; each further
    time, it is built."""
    key = id(value)  # every value stays alive, held by the result, while it is written
    if key in seen:
        budget.build(len(value))
    else:
        seen.add(key)
        budget.hold(len(value))


def _quote(source: str) -> str:
    return repr(source if len(source) <= _MAX_QUOTE else source[: _MAX_QUOTE - 1] + "…")


def _depth(tree: lark.Tree[Any]) -> int:
    """How many levels the syntax tree has (without recursing)."""
    deepest = 0
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((c, depth + 1) for c in node.children if isinstance(c, lark.Tree))
    return deepest


def _comprehension_costs(tree: lark.Tree[Any]) -> dict[int, int]:
    """For each comprehension (by id of its node), the steps one element costs: the
    number of syntax nodes in its body, which cel-python evaluates once per element."""
    order: list[lark.Tree[Any]] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(c for c in node.children if isinstance(c, lark.Tree))
    sizes: dict[int, int] = {}
    costs: dict[int, int] = {}
    for node in reversed(order):  # children before their parents
        sizes[id(node)] = 1 + sum(sizes[id(c)] for c in node.children if isinstance(c, lark.Tree))
        if node.data != "member_dot_arg" or len(node.children) < 3:
            continue
        body_at = _COMPREHENSIONS.get(str(node.children[1]))
        args = node.children[2]
        if body_at is not None and isinstance(args, lark.Tree) and len(args.children) > body_at:
            body = args.children[body_at]
            costs[id(node)] = sizes[id(body)] if isinstance(body, lark.Tree) else 1
    return costs


def _duration(value: dt.timedelta) -> str:
    """CEL's JSON form of a duration: seconds with the fraction only when there is one."""
    micros = value // dt.timedelta(microseconds=1)
    seconds, fraction = divmod(abs(micros), 1_000_000)
    text = f"{seconds}.{fraction:06d}".rstrip("0") if fraction else str(seconds)
    return f"{'-' if micros < 0 else ''}{text}s"


def _key(key: Any) -> str:
    """A map key as a JSON object key: ``true`` rather than Python's ``True``."""
    if isinstance(key, str):
        return str(key)
    converted = to_json(key)
    return json.dumps(converted) if isinstance(converted, bool) else str(converted)


def _kind(class_name: str) -> str:
    """``celpy.celtypes.IntType`` → ``int``; ``NoneType`` → ``null``."""
    name = class_name.rsplit(".", 1)[-1]
    if name == "NoneType":
        return "null"
    return name.removesuffix("Type").lower() or name


def _a(kind: str) -> str:
    return f"{'an' if kind[:1] in {'a', 'e', 'i', 'o', 'u'} else 'a'} {kind}"


def _kinds(text: str) -> list[str]:
    applied = _APPLIED_TO.search(text)
    return [_kind(c) for c in _CLASS.findall(applied.group(1) if applied else text)]


def _clip(text: str) -> str:
    text = _CLASS.sub(lambda m: _kind(m.group(1)), _CEL_VALUE.sub(r"\1", text))
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 1] + "…"


def _describe(exc: Exception) -> str:
    """cel-python's error texts, rewritten into messages a user can act on.

    A CELEvalError's args are (message, cause type, cause args); the cause
    often says more than the message (``return error for overflow`` is also
    what a failed ``int('abc')`` gives).
    """
    args = exc.args
    text = str(args[0]) if args else str(exc)
    cause_type = args[1] if len(args) > 1 else None
    cause_args = args[2] if len(args) > 2 else None
    detail = str(cause_args[0]) if isinstance(cause_args, tuple) and len(cause_args) == 1 else ""
    if match := _OVERLOAD.search(text):
        op = _OPERATOR_NAMES.get(match.group(1), match.group(1))
        kinds = _kinds(text)
        return f"operator {op} cannot be applied to {' and '.join(kinds) or 'these values'}"
    if text.startswith("found no matching overload for _[_]"):
        kinds = _kinds(text)
        if len(kinds) == 2:
            return f"cannot index {_a(kinds[0])} with {_a(kinds[1])}"
    if text.startswith("found no matching overload for _?_:_"):
        kinds = _kinds(text)
        if kinds:
            return f"the condition before ? must be a bool, not {kinds[0]}"
    if text.startswith("no such member in mapping"):
        key = text.split(":", 1)[1].strip() if ":" in text else text
        return f"no such key {key} (use has() to test for an optional key)"
    if text == "no such key" and isinstance(cause_args, tuple) and len(cause_args) == 1:
        return f"no such key {_clip(repr(cause_args[0]))} (use has() to test for an optional key)"
    if "does not support field selection" in text:
        kinds = [_kind(c) for c in _CLASS.findall(text)]
        return (
            f"cannot select a field of {_a(kinds[0] if kinds else 'value')}: only maps have fields"
        )
    if match := _UNDECLARED.match(text):
        return f"unknown name or function {match.group(1)!r}"
    if text == "return error for overflow":
        if detail == "overflow":
            return "integer overflow: CEL integers are 64-bit"
        if detail:
            return f"conversion failed: {_clip(detail)}"
    if cause_type is IndexError:
        return "list index out of range"
    if detail and text in {"no such overload", "match error", "invalid_argument"}:
        return f"{text}: {_clip(detail)}"
    return _clip(text)


def _analyse(tree: lark.Tree[Any]) -> tuple[References, set[str]]:
    """Roots and ``tasks.<id>`` names an expression reads, and unknown functions it calls.

    A macro's variable (``x`` in ``input.l.map(x, x * 2)``) is bound only inside
    that macro's arguments; a leading dot (``.input``) always names a root.
    """
    roots: set[str] = set()
    task_ids: set[str] | None = set()
    unknown: set[str] = set()
    # (node, its nearest ancestors, innermost last, variables bound here)
    stack: list[tuple[lark.Tree[Any], tuple[lark.Tree[Any], ...], frozenset[str]]] = [
        (tree, (), frozenset())
    ]
    while stack:
        node, parents, bound = stack.pop()
        if node.data in {"ident", "dot_ident"}:
            name = str(node.children[0])
            if node.data == "ident" and (name in bound or name in _TYPE_NAMES):
                continue
            roots.add(name)
            if name == "tasks" and task_ids is not None:
                task = _task_selected((*parents, node))
                if task is None:
                    task_ids = None
                else:
                    task_ids.add(task)
            continue
        inner = bound
        if node.data in {"ident_arg", "dot_ident_arg", "member_dot_arg"}:
            name_token = node.children[1 if node.data == "member_dot_arg" else 0]
            name = str(name_token)
            if name not in _FUNCTIONS:
                unknown.add(name)
            count = _BINDING_MACROS.get(name, 0) if node.data == "member_dot_arg" else 0
            args = node.children[2] if len(node.children) > 2 else None
            if count and isinstance(args, lark.Tree):
                variables = {
                    ident
                    for arg in args.children[:count]
                    if isinstance(arg, lark.Tree) and (ident := _lone_ident(arg))
                }
                inner = bound | variables
        context = (*parents, node)[-4:]
        for i, child in enumerate(node.children):
            if isinstance(child, lark.Tree):
                # The target of ``target.map(x, …)`` is outside the macro's scope.
                scope = bound if node.data == "member_dot_arg" and i == 0 else inner
                stack.append((child, context, scope))
    refs = References(frozenset(roots), None if task_ids is None else frozenset(task_ids))
    return refs, unknown


def _task_selected(path: tuple[lark.Tree[Any], ...]) -> str | None:
    """For ``tasks.x`` or ``tasks["x"]``, the name x; None if it cannot be known."""
    # path: … member_dot|member_index > member > primary > ident
    if len(path) < 4 or path[-2].data != "primary" or path[-3].data != "member":
        return None
    selector = path[-4]
    if selector.data == "member_dot" and len(selector.children) == 2:
        return str(selector.children[1])
    if selector.data == "member_index" and len(selector.children) == 2:
        index = selector.children[1]
        literal = _lone_literal(index) if isinstance(index, lark.Tree) else None
        if literal is not None and literal[:1] in {'"', "'"} and literal[-1:] == literal[:1]:
            return literal[1:-1]
    return None


def _lone_ident(tree: lark.Tree[Any]) -> str | None:
    while isinstance(tree, lark.Tree):
        if tree.data == "ident":
            return str(tree.children[0])
        if len(tree.children) != 1:
            return None
        tree = tree.children[0]
    return None


def _lone_literal(tree: lark.Tree[Any]) -> str | None:
    while isinstance(tree, lark.Tree):
        if tree.data == "literal":
            return str(tree.children[0])
        if len(tree.children) != 1:
            return None
        tree = tree.children[0]
    return None
