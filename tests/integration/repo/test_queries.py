"""Every named statement is valid against the migrated schema, and is used."""

from __future__ import annotations

from pathlib import Path

import pytest

import composer_repo as repo
from composer_repo._sql import QUERIES, parse_queries

SOURCE = Path(repo.__file__).parent


@pytest.mark.parametrize("name", sorted(QUERIES))
async def test_statement_prepares_against_the_schema(conn: repo.Connection, name: str) -> None:
    # PREPARE parses and plans the statement: a wrong column, table or type fails here.
    await conn.prepare(QUERIES[name])


def test_every_statement_is_used() -> None:
    code = "\n".join(p.read_text() for p in SOURCE.glob("*.py"))
    unused = [name for name in QUERIES if f'q("{name}")' not in code]
    assert unused == []


def test_parse_queries_rejects_duplicates() -> None:
    with pytest.raises(ValueError, match="defined twice"):
        parse_queries("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;\n")
