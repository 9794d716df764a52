"""The named SQL statements of sql/queries.sql, loaded once.

Statements live in one file, each under a ``-- name: <name>`` line, so the
whole database surface can be read (and reviewed for partition pruning and
fencing) in one place. Code refers to them by name; no SQL is built from
strings at run time: values always go as parameters, and the one composed
text, ``together``, is put together from named statements alone.
"""

from __future__ import annotations

import functools
import re
from importlib import resources
from typing import Final

_NAME = re.compile(r"^-- name: (?P<name>[a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_PARAMETER = re.compile(r"\$(\d+)")
#: The column ``together`` adds to the main statement's rows (true): NULL on the one
#: row that carries the sides' answers and the transaction's id.
TOGETHER_ROW: Final = "together_row"


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


def _shifted(statement: str, by: int) -> str:
    """``statement`` with each ``$n`` renumbered ``$(n + by)``."""
    return _PARAMETER.sub(lambda m: f"${int(m[1]) + by}", statement)


def parameters(statement: str) -> int:
    """How many parameters ``statement`` takes (its highest ``$n``)."""
    return max((int(n) for n in _PARAMETER.findall(statement)), default=0)


@functools.cache
def together(main: str, sides: tuple[tuple[str, bool], ...]) -> str:
    """One statement that runs the named statement ``main`` and each side, a (name,
    returns) pair, in one round trip: each side a data-modifying CTE, their
    parameters numbered after main's, in the order given.

    Its rows are main's, each with ``together_row`` (true), and one more, the
    answers' row: its main columns and ``together_row`` NULL, ``xid`` (the
    transaction's id when a write of the transaction gave it one: read here, it
    spares ``tracked_transaction`` a round trip) and, per side that ``returns``, a
    column ``side_<i>`` (its index in ``sides``): that side's rows, an array of
    records (tuples, in its RETURNING's order), NULL when it returned none. (On
    every main row instead, a side's array was decoded once a row: 100 tasks and
    their 100 outbox rows took 10,000 records and 10 to 30 ms.) Every part sees the
    snapshot the statement began with (PostgreSQL runs data-modifying CTEs
    together): none may read or write what another writes, so only writes of
    different rows go together.
    """
    ctes: list[str] = []
    arrays: list[str] = []
    offset = parameters(q(main))
    for i, (name, returns) in enumerate(sides):
        text = _shifted(q(name), offset)
        ctes.append(f"side_{i} AS (\n{text}\n)")
        if returns:
            arrays.append(f"(SELECT array_agg(s) FROM side_{i} AS s) AS side_{i}")
        offset += parameters(q(name))
    ctes.append(f"main AS (\n{q(main)}\n)")
    answers = ", ".join([*arrays, "pg_current_xact_id_if_assigned()::text AS xid"])
    return (
        "WITH " + ",\n".join(ctes) + "\n"
        f"SELECT m.*, s.* FROM (SELECT *, true AS {TOGETHER_ROW} FROM main) m\n"
        f"  FULL JOIN (SELECT {answers}) s ON false"
    )
