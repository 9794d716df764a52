"""A definition's ``input_schema``: JSON Schema 2020-12, checked by ``jsonschema``.

Checked as a schema when the definition is published (its problems are the
definition's, at ``input_schema…``), compiled once with the version's DAG, and
applied to a run's input at start, so a bad input is refused at the door with
every problem and its JSON path rather than failing a node halfway through.

``jsonschema`` (python-jsonschema, the reference implementation for Python) is
used rather than a validator of our own: 2020-12 has dynamic references,
unevaluated properties and vocabularies that only a maintained library gets
right. It does no I/O here: a ``$ref`` resolves only inside the schema itself
(no registry of remote schemas is given), and ``format`` is an annotation, as
2020-12 says by default.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from composer_core.errors import Problem

#: A start names at most this many problems of its input (and says how many more).
MAX_INPUT_PROBLEMS = 50


def schema_problems(schema: Any, path: str = "input_schema") -> list[Problem]:
    """What is wrong with ``schema`` as a JSON Schema 2020-12 (empty: nothing).

    Every problem is reported, each at its place inside the schema, and a ``$schema``
    naming another dialect is refused, since 2020-12 is what it is applied as.
    """
    if not isinstance(schema, (Mapping, bool)):
        return [
            Problem(path, f"must be a JSON Schema (an object or a boolean), not {_kind(schema)}")
        ]
    problems: list[Problem] = []
    if isinstance(schema, Mapping):
        dialect = schema.get("$schema")
        if dialect is not None and (
            not isinstance(dialect, str) or dialect.rstrip("#") != _DIALECT
        ):
            problems.append(
                Problem(
                    f"{path}.$schema",
                    f"input schemas are JSON Schema 2020-12: write {_DIALECT!r} or leave "
                    f"$schema out, not {dialect!r}",
                )
            )
    meta = Draft202012Validator(Draft202012Validator.META_SCHEMA)
    for error in sorted(meta.iter_errors(schema), key=_order):
        problems.append(Problem(_join(path, error.absolute_path), _schema_message(error)))
    if not problems:
        try:
            Draft202012Validator.check_schema(schema)  # what iter_errors may not (formats)
        except SchemaError as exc:
            problems.append(Problem(_join(path, exc.absolute_path), _schema_message(exc)))
    if not problems:
        problems.extend(_unresolvable_refs(schema, path))
    return problems


class InputSchema:
    """A checked ``input_schema``, compiled once; ``problems`` applies it to an input."""

    def __init__(self, schema: Mapping[str, Any] | bool) -> None:
        self.schema = schema
        self._validator = Draft202012Validator(schema)

    def problems(self, value: Any) -> list[Problem]:
        """Every way ``value`` fails the schema, at JSON paths into it (``$`` is the
        input itself), in document order; at most MAX_INPUT_PROBLEMS of them, the last
        saying how many more there were."""
        found: list[Problem] = []
        try:
            errors = sorted(self._validator.iter_errors(value), key=_order)
        except Unresolvable as exc:  # schema_problems refuses these at publish
            return [Problem("$", f"the input schema's reference cannot be resolved: {exc}")]
        for error in errors[:MAX_INPUT_PROBLEMS]:
            found.append(Problem(error.json_path, _input_message(error)))
        if len(errors) > MAX_INPUT_PROBLEMS:
            found.append(
                Problem("$", f"and {len(errors) - MAX_INPUT_PROBLEMS} more problem(s) not listed")
            )
        return found


_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _order(error: ValidationError) -> tuple[tuple[str, ...], str]:
    """Document order: by path (an array's items by index), the input itself first."""
    path = tuple(f"{p:012d}" if isinstance(p, int) else f"~{p}" for p in error.absolute_path)
    return path, str(error.validator)


def _join(path: str, parts: Iterator[Any] | Any) -> str:
    out = path
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _schema_message(error: ValidationError | SchemaError) -> str:
    return f"not a valid JSON Schema 2020-12: {_short(error.message)}"


def _input_message(error: ValidationError) -> str:
    message = _short(error.message)
    if error.context:  # anyOf, oneOf: say what each alternative wanted
        reasons = sorted({_short(sub.message) for sub in error.context})[:5]
        message += f" ({'; '.join(reasons)})"
    return message


def _short(text: str, limit: int = 300) -> str:
    """jsonschema quotes the offending value whole: keep a message readable."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _kind(value: Any) -> str:
    return {list: "an array", str: "a string", int: "a number", float: "a number"}.get(
        type(value), "null" if value is None else type(value).__name__
    )


def _unresolvable_refs(schema: Mapping[str, Any] | bool, path: str) -> list[Problem]:
    """Each ``$ref`` that points outside the schema (nothing is fetched) or nowhere in
    it. A subschema with an ``$id`` of its own is a base of its own: its references are
    left to the start, which reports one it cannot resolve."""
    resolver = Registry().resolver_with_root(DRAFT202012.create_resource(schema))
    problems: list[Problem] = []

    def walk(node: Any, where: str, root: bool) -> None:
        if isinstance(node, Mapping):
            if not root and "$id" in node:
                return
            ref = node.get("$ref")
            if isinstance(ref, str):
                try:
                    resolver.lookup(ref)
                except Unresolvable:
                    problems.append(
                        Problem(
                            f"{where}.$ref",
                            f"{ref!r} cannot be resolved: a reference must point inside "
                            "the schema (nothing is fetched)",
                        )
                    )
            for key, value in node.items():
                if key in _SCHEMA_MAPS and isinstance(value, Mapping):
                    for name, sub in value.items():  # names, not keywords: each is a schema
                        walk(sub, f"{where}.{key}.{name}", False)
                elif key not in _NOT_SCHEMAS:
                    walk(value, f"{where}.{key}", False)
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{where}[{i}]", False)

    walk(schema, path, True)
    return problems


#: Keywords whose values are data, not subschemas: a "$ref" key inside them is not one.
_NOT_SCHEMAS = frozenset({"const", "enum", "examples", "default"})

#: Keywords whose values map names (any name, "const" too) to subschemas.
_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "dependentSchemas"})
