"""CEL through cel-python.

Measured cost (tests/bench): the grammar is built once per process (~80 ms),
each expression is compiled once per definition version, and one evaluation
takes tens of microseconds. cel-python raises internal texts
(``found no matching overload for Token('RULE', 'addition_add')…``); they
are rewritten here into messages that name the expression.
"""

from __future__ import annotations

import base64
import datetime as dt
import re
from collections.abc import Mapping
from functools import cache
from typing import Any

import celpy
import lark
from celpy import celtypes
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError

from composer_core.errors import TemplateError
from composer_core.templates._engine import Json, References

# Macros whose first argument names a variable bound inside the call.
_BINDING_MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
_OVERLOAD = re.compile(r"found no matching overload for Token\('RULE', '(\w+)'\)")
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


@cache
def _environment() -> Any:
    # One Environment per process: building the grammar is the expensive part.
    return celpy.Environment()


class CelExpression:
    __slots__ = ("_program", "_references", "_source")

    def __init__(self, source: str, program: Any, references: References) -> None:
        self._source = source
        self._program = program
        self._references = references

    @property
    def source(self) -> str:
        return self._source

    @property
    def references(self) -> References:
        return self._references

    def evaluate(self, activation: Mapping[str, object]) -> Json:
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
        return CelExpression(source, env.program(tree), _references(tree))

    def to_native(self, value: Json) -> object:
        return to_cel(value)

    def map_of(self, entries: Mapping[str, object]) -> object:
        return celtypes.MapType({celtypes.StringType(k): v for k, v in entries.items()})


def to_cel(value: Json) -> Any:
    """Plain JSON (and datetimes) to CEL values; faster than celpy.adapter for our shapes."""
    if value is None:
        return None
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int):
        return celtypes.IntType(value)
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
    """CEL values back to plain JSON types (a bool stays a bool, not 1)."""
    if value is None or isinstance(value, celtypes.NullType):
        return None
    if isinstance(value, bool | celtypes.BoolType):
        return bool(value)
    if isinstance(value, int):  # IntType, UintType
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, dt.timedelta):
        return f"{value.total_seconds():g}s"
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    raise TemplateError(f"expression produced a {type(value).__name__}, which has no JSON form")


def _describe(exc: Exception) -> str:
    text = str(exc.args[0]) if exc.args else str(exc)
    if match := _OVERLOAD.search(text):
        op = _OPERATOR_NAMES.get(match.group(1), match.group(1))
        types = re.findall(r"celtypes\.(\w+)Type", text)
        kinds = " and ".join(t.lower() for t in types) if types else "these values"
        return f"operator {op} cannot be applied to {kinds}"
    if text.startswith("no such member in mapping"):
        key = text.split(":", 1)[1].strip() if ":" in text else text
        return f"no such key {key} (use has() to test for an optional key)"
    return text


def _references(tree: lark.Tree[Any]) -> References:
    """Roots and ``tasks.<id>`` names an expression reads, from its parse tree."""
    bound: set[str] = set()
    for node in tree.iter_subtrees():
        if node.data == "member_dot_arg" and len(node.children) >= 3:
            name = node.children[1]
            args = node.children[2]
            if str(name) in _BINDING_MACROS and isinstance(args, lark.Tree) and args.children:
                first = args.children[0]
                ident = _lone_ident(first) if isinstance(first, lark.Tree) else None
                if ident:
                    bound.add(ident)

    roots: set[str] = set()
    task_ids: set[str] | None = set()
    for parents in _ident_paths(tree):
        ident_tree = parents[-1]
        name = str(ident_tree.children[0])
        if name in bound:
            continue
        roots.add(name)
        if name != "tasks" or task_ids is None:
            continue
        task = _task_selected(parents)
        if task is None:
            task_ids = None
        else:
            task_ids.add(task)
    return References(frozenset(roots), None if task_ids is None else frozenset(task_ids))


def _ident_paths(tree: lark.Tree[Any]) -> list[list[lark.Tree[Any]]]:
    """Every ``ident`` subtree with the chain of its ancestors (root first)."""
    found: list[list[lark.Tree[Any]]] = []
    stack: list[list[lark.Tree[Any]]] = [[tree]]
    while stack:
        path = stack.pop()
        node = path[-1]
        if node.data == "ident":
            found.append(path)
            continue
        for child in node.children:
            if isinstance(child, lark.Tree):
                stack.append([*path, child])
    return found


def _task_selected(path: list[lark.Tree[Any]]) -> str | None:
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
