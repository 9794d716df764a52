"""``{{ expr }}`` templates inside JSON values (docs/architecture.md §8).

A string that is exactly one template keeps the expression's type
(``"{{input.n}}"`` → 3); a string with text around templates interpolates to
a string (``"/orders/{{input.id}}"`` → ``"/orders/42"``), where a string
result is inserted as is and any other value as compact JSON. Values are
compiled once into a tree, so evaluation never parses.

``{{ secret.NAME }}`` is no expression: it is written as its text and its
place listed under ``$secrets`` (templates/_secrets.py says why and how).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from composer_core.errors import InputTooLarge, TemplateError
from composer_core.templates import _budget
from composer_core.templates._engine import Expression, ExpressionEngine, Json, References
from composer_core.templates._secrets import SECRETS_KEY, SecretReference

_TEMPLATE = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
#: Where a value is, from its top: map keys and list indexes.
Where = tuple[str | int, ...]
#: Where the engine wrote one secret reference: ``{"path": [...], "at": n, "name": "..."}``.
Spot = dict[str, Json]


class _Limit:
    """The size a value being rendered may reach, watched as its templates return.

    What the templates' results held so far (the budget's result units: one per
    character and per list or map element, each at least a byte of JSON) is a
    lower bound of the value's size, so rendering can stop once that alone is over,
    without writing out what it rendered."""

    __slots__ = ("budget", "max_bytes", "start")

    def __init__(self, max_bytes: int, budget: _budget.Budget, start: int) -> None:
        self.max_bytes, self.budget, self.start = max_bytes, budget, start

    def check(self) -> None:
        held = self.start - self.budget.results
        if held > self.max_bytes:
            raise InputTooLarge(held, self.max_bytes, exact=False)


class CompiledValue:
    """A JSON value whose strings may hold templates, ready to evaluate."""

    __slots__ = ()

    @property
    def references(self) -> References:
        raise NotImplementedError

    @property
    def expressions(self) -> tuple[Expression, ...]:
        raise NotImplementedError

    def evaluate(self, activation: Mapping[str, object], *, max_bytes: int | None = None) -> Json:
        """The value with every template evaluated, under one budget for all of them:
        the decision's (the event's) when there is one, else a budget of its own.

        Secret references are written as their text, and a map that holds any gets
        the ``$secrets`` list of where they are (a value that is no map cannot).
        Raises TemplateError (TemplateBudgetExceeded over budget); a value nested
        too deep to convert, or memory running out, is a TemplateError too, so the
        node fails instead of the service that evaluates it.

        ``max_bytes``: the value, as compact UTF-8 JSON, may be no larger (a node's
        input). Rendering stops with InputTooLarge as soon as what the templates
        returned so far is certain to be over, before the rest is rendered; a value
        with no template is as large as its definition let it be, and is not measured.
        """
        budget, token = _budget.current.get(), None
        if budget is None:
            budget = _budget.Budget()
            token = _budget.current.set(budget)
        limit = None if max_bytes is None else _Limit(max_bytes, budget, budget.results)
        try:
            spots: list[Spot] = []
            value = self._evaluate(activation, spots, limit)
            if spots:
                if not isinstance(value, dict):
                    raise TemplateError(
                        "a secret reference can only be in a node's spec, which is a mapping"
                    )
                value[SECRETS_KEY] = spots
            if limit is not None:
                size = len(_compact(value).encode("utf-8"))
                if size > limit.max_bytes:
                    raise InputTooLarge(size, limit.max_bytes, exact=True)
            return value
        except RecursionError as exc:
            raise TemplateError(
                "nested too deep to evaluate (Python's recursion limit was reached)"
            ) from exc
        except MemoryError as exc:
            raise TemplateError("ran out of memory while evaluating") from exc
        finally:
            if token is not None:
                _budget.current.reset(token)

    def _evaluate(
        self, activation: Mapping[str, object], spots: list[Spot], limit: _Limit | None
    ) -> Json:
        raise NotImplementedError

    def located(self, path: str = "") -> Iterator[tuple[str, Expression]]:
        """Every expression with the path of the string that holds it (``spec.body.id``)."""
        raise NotImplementedError

    def located_secrets(self, path: str = "") -> Iterator[tuple[str, SecretReference]]:
        """Every secret reference with the path of the string that holds it."""
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class _Literal(CompiledValue):
    value: Json

    @property
    def references(self) -> References:
        return References()

    @property
    def expressions(self) -> tuple[Expression, ...]:
        return ()

    def evaluate(self, activation: Mapping[str, object], *, max_bytes: int | None = None) -> Json:
        return self.value

    def _evaluate(
        self, activation: Mapping[str, object], spots: list[Spot], limit: _Limit | None
    ) -> Json:
        return self.value

    def located(self, path: str = "") -> Iterator[tuple[str, Expression]]:
        return iter(())

    def located_secrets(self, path: str = "") -> Iterator[tuple[str, SecretReference]]:
        return iter(())


@dataclass(frozen=True, slots=True)
class _Single(CompiledValue):
    expression: Expression

    @property
    def references(self) -> References:
        return self.expression.references

    @property
    def expressions(self) -> tuple[Expression, ...]:
        return (self.expression,)

    def _evaluate(
        self, activation: Mapping[str, object], spots: list[Spot], limit: _Limit | None
    ) -> Json:
        value = self.expression.evaluate(activation)
        if limit is not None:
            limit.check()
        return value

    def located(self, path: str = "") -> Iterator[tuple[str, Expression]]:
        yield path, self.expression

    def located_secrets(self, path: str = "") -> Iterator[tuple[str, SecretReference]]:
        return iter(())


@dataclass(frozen=True, slots=True)
class _Interpolated(CompiledValue):
    parts: tuple[str | Expression | SecretReference, ...]
    #: Where this string is in the value compiled: a secret reference's ``path``.
    where: Where = ()

    @property
    def references(self) -> References:
        return _union(p.references for p in self._expressions())

    @property
    def expressions(self) -> tuple[Expression, ...]:
        return tuple(self._expressions())

    def _expressions(self) -> Iterator[Expression]:
        for part in self.parts:
            if not isinstance(part, str | SecretReference):
                yield part

    def _evaluate(
        self, activation: Mapping[str, object], spots: list[Spot], limit: _Limit | None
    ) -> Json:
        out: list[str] = []
        length = 0
        for part in self.parts:
            if isinstance(part, str):
                text = part
            elif isinstance(part, SecretReference):
                # Its offset, counted here after the parts before it, cannot be moved by
                # what those parts evaluated to.
                spots.append({"path": list(self.where), "at": length, "name": part.name})
                text = part.text
            else:
                value = part.evaluate(activation)
                if limit is not None:
                    limit.check()
                text = value if isinstance(value, str) else _compact(value)
            out.append(text)
            length += len(text)
        return "".join(out)

    def located(self, path: str = "") -> Iterator[tuple[str, Expression]]:
        for expression in self._expressions():
            yield path, expression

    def located_secrets(self, path: str = "") -> Iterator[tuple[str, SecretReference]]:
        for part in self.parts:
            if isinstance(part, SecretReference):
                yield path, part


@dataclass(frozen=True, slots=True)
class _List(CompiledValue):
    items: tuple[CompiledValue, ...]

    @property
    def references(self) -> References:
        return _union(i.references for i in self.items)

    @property
    def expressions(self) -> tuple[Expression, ...]:
        return tuple(e for i in self.items for e in i.expressions)

    def _evaluate(
        self, activation: Mapping[str, object], spots: list[Spot], limit: _Limit | None
    ) -> Json:
        return [i._evaluate(activation, spots, limit) for i in self.items]

    def located(self, path: str = "") -> Iterator[tuple[str, Expression]]:
        for i, item in enumerate(self.items):
            yield from item.located(f"{path}[{i}]")

    def located_secrets(self, path: str = "") -> Iterator[tuple[str, SecretReference]]:
        for i, item in enumerate(self.items):
            yield from item.located_secrets(f"{path}[{i}]")


@dataclass(frozen=True, slots=True)
class _Map(CompiledValue):
    entries: tuple[tuple[str, CompiledValue], ...]

    @property
    def references(self) -> References:
        return _union(v.references for _, v in self.entries)

    @property
    def expressions(self) -> tuple[Expression, ...]:
        return tuple(e for _, v in self.entries for e in v.expressions)

    def _evaluate(
        self, activation: Mapping[str, object], spots: list[Spot], limit: _Limit | None
    ) -> Json:
        return {k: v._evaluate(activation, spots, limit) for k, v in self.entries}

    def located(self, path: str = "") -> Iterator[tuple[str, Expression]]:
        for key, value in self.entries:
            yield from value.located(_join(path, key))

    def located_secrets(self, path: str = "") -> Iterator[tuple[str, SecretReference]]:
        for key, value in self.entries:
            yield from value.located_secrets(_join(path, key))


def compile_value(
    value: Json,
    engine: ExpressionEngine,
    *,
    path: str = "",
    on_error: Callable[[str, TemplateError], None] | None = None,
    verbatim: frozenset[str] = frozenset(),
) -> CompiledValue:
    """Compile every template in ``value``.

    With ``on_error`` each bad template is reported with its path and compiling
    goes on (so validation can list every problem); without it the first one
    raises. Keys in ``verbatim`` (top level only) are kept as plain text.
    """
    if not verbatim or not isinstance(value, Mapping):
        return _compile(value, engine, path, (), on_error)
    # Verbatim keys are never parsed: Python code is full of ``{{`` that are not templates.
    entries = tuple(
        (
            str(k),
            _Literal(v)
            if k in verbatim
            else _compile(v, engine, _join(path, str(k)), (str(k),), on_error),
        )
        for k, v in value.items()
    )
    if all(isinstance(v, _Literal) for _, v in entries):
        return _Literal(value)
    return _Map(entries)


def compile_condition(source: str, engine: ExpressionEngine) -> Expression:
    """An edge condition: ``"{{ expr }}"``, or a bare CEL expression."""
    text = source.strip()
    match = _TEMPLATE.fullmatch(text)
    return engine.compile((match.group(1) if match else text).strip())


def _compile(
    value: Json,
    engine: ExpressionEngine,
    path: str,
    where: Where,
    on_error: Callable[[str, TemplateError], None] | None,
) -> CompiledValue:
    if isinstance(value, str):
        return _compile_string(value, engine, path, where, on_error)
    if isinstance(value, Mapping):
        entries = tuple(
            (str(k), _compile(v, engine, _join(path, str(k)), (*where, str(k)), on_error))
            for k, v in value.items()
        )
        if all(isinstance(v, _Literal) for _, v in entries):
            return _Literal(value)
        return _Map(entries)
    if isinstance(value, list):
        items = tuple(
            _compile(v, engine, f"{path}[{i}]", (*where, i), on_error) for i, v in enumerate(value)
        )
        if all(isinstance(i, _Literal) for i in items):
            return _Literal(value)
        return _List(items)
    return _Literal(value)


def _compile_string(
    text: str,
    engine: ExpressionEngine,
    path: str,
    where: Where,
    on_error: Callable[[str, TemplateError], None] | None,
) -> CompiledValue:
    if "{{" not in text:
        return _Literal(text)
    parts: list[str | Expression | SecretReference] = []
    cursor = 0
    try:
        for match in _TEMPLATE.finditer(text):
            if match.start() > cursor:
                parts.append(text[cursor : match.start()])
            source = match.group(1).strip()
            if not source:
                raise TemplateError(f"empty template {{{{}}}} in {text!r}")
            parts.append(SecretReference.parse(source) or engine.compile(source))
            cursor = match.end()
        if cursor < len(text):
            rest = text[cursor:]
            if "{{" in rest:
                raise TemplateError(f"unclosed template in {text!r}: a '{{{{' has no '}}}}'")
            parts.append(rest)
    except TemplateError as exc:
        if on_error is None:
            raise
        on_error(path, exc)
        return _Literal(text)
    if len(parts) == 1 and not isinstance(parts[0], str | SecretReference):
        return _Single(parts[0])
    return _Interpolated(tuple(parts), where)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _compact(value: Json) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def _union(refs: Iterable[References]) -> References:
    total = References()
    for r in refs:
        total = total | r
    return total
