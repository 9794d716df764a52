"""The named SQL statements of sql/queries.sql, loaded once.

Statements live in one file, each under a ``-- name: <name>`` line, so the
whole database surface can be read (and reviewed for partition pruning and
fencing) in one place. Code refers to them by name; no SQL is built from
strings at run time.
"""

from __future__ import annotations

import re
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
