"""Reading a definition from YAML or JSON text into a WorkflowSpec."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml
from pydantic import ValidationError

from composer_core.errors import DefinitionInvalid, Problem
from composer_core.model._build import graph_problems
from composer_core.model._limits import DEFAULT_LIMITS, Limits, nesting_depth
from composer_core.model._spec import WorkflowSpec
from composer_core.model._states import NodeType

# libyaml's parser when PyYAML was built with it: several times faster on large definitions.
_SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_SafeLoader):  # type: ignore[valid-type,misc]
    """A SafeLoader that leaves timestamps as text: a definition holds JSON values only,
    and ``until: 2026-01-01T00:00:00Z`` is the RFC 3339 string the user wrote."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def parse_definition(
    source: str | bytes | Mapping[str, Any], *, limits: Limits = DEFAULT_LIMITS
) -> WorkflowSpec:
    """Parse YAML or JSON text (JSON is YAML) or an already-decoded mapping.

    Raises DefinitionInvalid listing every shape problem with its path.
    """
    if isinstance(source, Mapping):
        data: Any = source
    else:
        raw = source.encode() if isinstance(source, str) else source
        if len(raw) > limits.max_definition_bytes:
            raise DefinitionInvalid(
                [
                    Problem(
                        "",
                        f"definition is {len(raw)} bytes; the limit is "
                        f"{limits.max_definition_bytes}",
                    )
                ]
            )
        expansion = _alias_expansion_problem(raw, limits)
        if expansion:
            raise DefinitionInvalid([Problem("", expansion)])
        try:
            data = yaml.load(raw, Loader=_Loader)  # a SafeLoader
        except RecursionError as exc:
            raise DefinitionInvalid(
                [Problem("", f"nested deeper than {limits.max_depth} levels")]
            ) from exc
        except yaml.YAMLError as exc:
            if "maximum nesting depth" in str(exc):  # libyaml's own guard against the same crash
                raise DefinitionInvalid(
                    [Problem("", f"nested deeper than {limits.max_depth} levels")]
                ) from exc
            mark = getattr(exc, "problem_mark", None)
            where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
            reason = getattr(exc, "problem", None) or str(exc)
            raise DefinitionInvalid(
                [Problem("", f"not valid YAML or JSON{where}: {reason}")]
            ) from exc
    if not isinstance(data, Mapping):
        raise DefinitionInvalid(
            [Problem("", f"a definition is a mapping with id and nodes, not {type(data).__name__}")]
        )
    if nesting_depth(data) > limits.max_depth + 3:  # + definition, nodes, node
        raise DefinitionInvalid([Problem("", f"nested deeper than {limits.max_depth} levels")])
    try:
        return WorkflowSpec.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        problems = [_problem(e) for e in errors]
        raise DefinitionInvalid(problems + _beyond_shape(data, errors, problems, limits)) from exc


#: The fields a definition cannot do without: a shape error there leaves no graph to check.
_REQUIRED: dict[str, frozenset[str]] = {
    "": frozenset({"id", "nodes"}),
    "nodes": frozenset({"id"}),
    "edges": frozenset({"from", "to"}),
}
#: What an unknown node type stands in as while the rest of the definition is checked.
_STAND_IN = NodeType.TASK.value


def _beyond_shape(
    data: Mapping[str, Any], errors: list[Any], shape: list[Problem], limits: Limits
) -> list[Problem]:
    """The graph, spec and template problems of a definition whose shape failed.

    The shape errors are set aside (an optional field that failed is left out, a node
    of an unknown type stands in as a TASK its type-specific checks skip) and the
    rest is validated as usual, so one answer lists every problem. When a required
    field failed (an id, the nodes, an edge's ends) there is no graph to check, and
    the shape problems are all there is.
    """
    top = dict(data)
    copied: dict[str, list[Any]] = {}
    copies: set[tuple[str, int]] = set()
    untyped: set[int] = set()

    def entry(kind: str, i: Any) -> dict[str, Any] | None:
        """Item ``i`` of ``kind``, copied so the caller's mapping stays as it was."""
        items = copied.get(kind)
        if items is None:
            found = top.get(kind)
            if not isinstance(found, list):
                return None
            items = copied[kind] = top[kind] = list(found)
        if not isinstance(i, int) or not 0 <= i < len(items) or not isinstance(items[i], Mapping):
            return None
        if (kind, i) not in copies:
            items[i] = dict(items[i])
            copies.add((kind, i))
        found_item: dict[str, Any] = items[i]
        return found_item

    for error in errors:
        loc = error["loc"]
        if not loc or not isinstance(loc[0], str):
            return []
        if loc[0] in ("nodes", "edges"):
            kind = loc[0]
            if len(loc) < 3 or not isinstance(loc[2], str) or loc[2] in _REQUIRED[kind]:
                return []
            found = entry(kind, loc[1])
            if found is None:
                return []
            if kind == "nodes" and loc[2] == "type":
                found["type"] = _STAND_IN
                untyped.add(loc[1])
            else:
                found.pop(loc[2], None)
        elif loc[0] in _REQUIRED[""]:
            return []
        else:
            top.pop(loc[0], None)
    try:
        spec = WorkflowSpec.model_validate(top)
    except ValidationError:
        return []
    said = {p.path for p in shape}
    return [
        p
        for p in graph_problems(spec, untyped=frozenset(untyped), limits=limits)
        if not any(p.path == s or p.path.startswith((f"{s}.", f"{s}[")) for s in said if s)
    ]


def _problem(error: Any) -> Problem:
    path = ""
    for part in error["loc"]:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    message = str(error["msg"])
    if error["type"] == "extra_forbidden":
        message = "unknown field"
    elif error["type"] == "missing":
        message = "required"
    elif error["type"] == "enum":
        expected = error.get("ctx", {}).get("expected", "")
        message = f"unknown value {error.get('input')!r}; expected {expected}"
    return Problem(path, message)


def _alias_expansion_problem(raw: bytes, limits: Limits) -> str | None:
    """Why a YAML document expands too far through its aliases, or None.

    Walks the parser's events (libyaml when present: fast) sizing each anchored
    node, so that ``*alias`` costs what it expands to, without building anything.
    """
    limit = limits.max_yaml_values
    sizes: dict[str, int] = {}
    open_nodes: list[tuple[str | None, int]] = []
    total = 0

    def add(n: int) -> int:
        nonlocal total
        if open_nodes:
            anchor, count = open_nodes[-1]
            open_nodes[-1] = (anchor, count + n)
        else:
            total += n
        return total + sum(c for _, c in open_nodes)

    try:
        for event in yaml.parse(raw, Loader=_SafeLoader):
            if isinstance(event, yaml.ScalarEvent):
                if event.anchor:
                    sizes[event.anchor] = 1
                seen = add(1)
            elif isinstance(event, yaml.AliasEvent):
                seen = add(sizes.get(event.anchor or "", 1))
            elif isinstance(event, yaml.SequenceStartEvent | yaml.MappingStartEvent):
                open_nodes.append((event.anchor, 1))
                seen = 0
            elif isinstance(event, yaml.SequenceEndEvent | yaml.MappingEndEvent):
                anchor, count = open_nodes.pop()
                if anchor:
                    sizes[anchor] = count
                seen = add(count)
            else:
                continue
            if seen > limit:
                return f"the definition expands to more than {limit} values (through YAML aliases)"
    except (yaml.YAMLError, RecursionError):
        return None  # loading reports the syntax error (or the depth) with its position
    return None
