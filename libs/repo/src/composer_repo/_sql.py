"""The named SQL statements of sql/queries.sql, loaded once.

Statements live in one file, each under a ``-- name: <name>`` line, so the
whole database surface can be read (and reviewed for partition pruning and
fencing) in one place. Code refers to them by name; no SQL is built from
strings at run time. ``fuse`` joins named statements into one, once, as they
are loaded: one round trip where there were several, with no second copy of
their text to drift apart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from typing import Final

_NAME = re.compile(r"^-- name: (?P<name>[a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


def parse_queries(text: str) -> dict[str, str]:
    """Split a queries file into {name: statement}; comments before a name are dropped."""
    queries: dict[str, str] = {}
    matches = list(_NAME.finditer(text))
    for i, match in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        lines = [
            line
            for line in text[match.end() : end].splitlines()
            if line.strip() and not line.lstrip().startswith("--")
        ]
        statement = "\n".join(lines).strip().rstrip(";").strip()
        name = match["name"]
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice in queries.sql")
        if not statement:
            raise ValueError(f"query {name!r} in queries.sql has no statement")
        queries[name] = statement
    return queries


QUERIES: Final[dict[str, str]] = parse_queries(
    resources.files("composer_repo").joinpath("sql/queries.sql").read_text(encoding="utf-8")
)


def q(name: str) -> str:
    """The statement called ``name``; a KeyError names a query that does not exist."""
    return QUERIES[name]


_PARAM = re.compile(r"\$(\d+)")
_RETURNING = re.compile(r"\bRETURNING\s+(?P<columns>.*)$", re.DOTALL)
_COLUMN = re.compile(r"(?:\.|\bAS\s+|^)(?P<name>[a-z_][a-z0-9_]*)$")


@dataclass(frozen=True, slots=True)
class Fused:
    """Named statements run as one (``fuse``): ``sql`` takes their parameters one
    statement after another, and answers one row with a column per statement that
    returns rows, named as the statement: the list of its rows, each a tuple of
    ``columns[name]``."""

    sql: str
    columns: dict[str, tuple[str, ...]]


def fuse(*names: str) -> Fused:
    """The statements ``names`` as the data-modifying CTEs of one statement, their
    parameters renumbered to follow each other. They all see the snapshot the
    statement starts with (none sees another's rows): only statements that touch
    different rows may be fused. Each runs to its end, its rows returned or not."""
    parts: list[str] = []
    columns: dict[str, tuple[str, ...]] = {}
    offset = 0
    for name in names:
        statement = QUERIES[name]
        used = [int(n) for n in _PARAM.findall(statement)]
        parts.append(f"{name} AS (\n{_renumbered(statement, offset)}\n)")
        offset += max(used, default=0)
        returning = _RETURNING.search(statement)
        if returning is not None:
            columns[name] = tuple(_column(c) for c in returning["columns"].split(","))
    if not columns:
        raise ValueError(f"fuse: none of {', '.join(names)} returns rows")
    arrays = ", ".join(f"ARRAY(SELECT ROW({n}.*) FROM {n}) AS {n}" for n in columns)
    return Fused(f"WITH {', '.join(parts)}\nSELECT {arrays}", columns)


def _renumbered(statement: str, offset: int) -> str:
    return _PARAM.sub(lambda m: f"${int(m[1]) + offset}", statement)


def _column(expression: str) -> str:
    match = _COLUMN.search(expression.strip())
    if match is None:
        raise ValueError(f"fuse: cannot name the returned column {expression.strip()!r}")
    return match["name"]
