"""Reading a definition from YAML or JSON text into a WorkflowSpec."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml
from pydantic import ValidationError

from composer_core.errors import DefinitionInvalid, Problem
from composer_core.model._limits import DEFAULT_LIMITS, Limits, nesting_depth
from composer_core.model._spec import WorkflowSpec

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
        raise DefinitionInvalid([_problem(e) for e in exc.errors()]) from exc


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
