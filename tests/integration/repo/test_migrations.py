"""The migration runner and the schema-version check."""

from __future__ import annotations

import asyncio
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

import composer_repo as repo
from tests.integration.databases import new_database_name, scratch_database

#: The version a new migration file would take after the real ones.
NEXT = repo.SCHEMA_VERSION + 1


@pytest.fixture
def empty_database_url(pg_admin_url: str) -> Iterator[str]:
    """A database nobody migrated yet (its own per test: migrating changes it)."""
    with scratch_database(pg_admin_url) as url:
        yield url


@pytest.fixture
def migrations_copy(tmp_path: Path) -> Path:
    """A copy of the real migrations a test may edit."""
    target = tmp_path / "migrations"
    shutil.copytree(repo.default_migrations_dir(), target)
    return target


async def schema_snapshot(conn: repo.Connection) -> list[tuple[str, str]]:
    """Every table, index and function with its definition: what 'the schema' is."""
    rows = await conn.fetch(
        """
        SELECT 'table ' || c.relname, string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ', ' ORDER BY a.attnum)
          FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0
         WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p')
         GROUP BY c.relname
        UNION ALL
        SELECT 'index ' || indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'
        UNION ALL
        SELECT 'function ' || proname, md5(prosrc) FROM pg_proc
         WHERE pronamespace = 'public'::regnamespace
        ORDER BY 1
        """
    )
    return [(r[0], r[1]) for r in rows]


def test_schema_version_matches_the_newest_migration_file() -> None:
    migrations = repo.load_migrations()
    assert migrations[-1].version == repo.SCHEMA_VERSION, (
        "raise SCHEMA_VERSION in libs/repo/src/composer_repo/_migrate.py with each new migration"
    )


async def test_migrate_is_idempotent(empty_database_url: str) -> None:
    conn = await repo.connect(empty_database_url)
    try:
        first = await repo.migrate(conn)
        schema = await schema_snapshot(conn)
        second = await repo.migrate(conn)

        assert [m.version for m in first] == [m.version for m in repo.load_migrations()]
        assert second == []
        assert await schema_snapshot(conn) == schema
        assert await repo.schema_version(conn) == repo.SCHEMA_VERSION
    finally:
        await conn.close()


async def test_two_concurrent_runners_apply_each_file_once(empty_database_url: str) -> None:
    a = await repo.connect(empty_database_url)
    b = await repo.connect(empty_database_url)
    try:
        applied_a, applied_b = await asyncio.gather(repo.migrate(a), repo.migrate(b))

        versions = [m.version for m in applied_a + applied_b]
        assert sorted(versions) == [m.version for m in repo.load_migrations()]
        rows = await a.fetch("SELECT version FROM composer_schema_migrations ORDER BY version")
        assert [r["version"] for r in rows] == sorted(versions)
    finally:
        await a.close()
        await b.close()


async def test_a_changed_applied_file_is_refused(
    empty_database_url: str, migrations_copy: Path
) -> None:
    conn = await repo.connect(empty_database_url)
    try:
        await repo.migrate(conn, migrations_copy)
        first = migrations_copy / "V001__init.sql"
        first.write_text(first.read_text() + "\n-- an innocent edit\n")

        with pytest.raises(
            repo.MigrationError, match=r"V001__init\.sql changed after it was applied"
        ):
            await repo.migrate(conn, migrations_copy)
    finally:
        await conn.close()


async def test_pending_files_apply_in_order_each_in_a_transaction(
    empty_database_url: str, migrations_copy: Path
) -> None:
    conn = await repo.connect(empty_database_url)
    try:
        await repo.migrate(conn, migrations_copy)
        note, broken = NEXT, NEXT + 1
        (migrations_copy / f"V{note:03d}__add_note.sql").write_text(
            "ALTER TABLE workflow_definitions ADD COLUMN note TEXT;"
        )
        (migrations_copy / f"V{broken:03d}__broken.sql").write_text(
            "ALTER TABLE workflow_definitions ADD COLUMN other TEXT;\nSELECT no_such_function();"
        )

        with pytest.raises(
            repo.MigrationError, match=rf"V{broken:03d}__broken\.sql failed and was rolled back"
        ):
            await repo.migrate(conn, migrations_copy)

        assert await repo.schema_version(conn) == note
        columns = {
            r["column_name"]
            for r in await conn.fetch(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_name = 'workflow_definitions'"
            )
        }
        assert "note" in columns
        assert "other" not in columns  # V003's first statement rolled back with it
    finally:
        await conn.close()


@pytest.mark.parametrize(
    ("filename", "message"),
    [
        (f"V{NEXT + 1:03d}__skipped_one.sql", f"migration version {NEXT} is missing"),
        ("V2-bad.sql", "is named V<number>__<lower_snake_name>.sql"),
        ("V001__again.sql", "both claim version 1"),
    ],
)
def test_malformed_migration_sets_are_refused(
    migrations_copy: Path, filename: str, message: str
) -> None:
    (migrations_copy / filename).write_text("SELECT 1;")
    with pytest.raises(repo.MigrationError, match=re.escape(message)):
        repo.load_migrations(migrations_copy)


async def test_a_database_ahead_of_the_files_is_refused(
    empty_database_url: str, migrations_copy: Path
) -> None:
    conn = await repo.connect(empty_database_url)
    try:
        newer = migrations_copy / f"V{NEXT:03d}__newer.sql"
        newer.write_text("SELECT 1;")
        await repo.migrate(conn, migrations_copy)
        newer.unlink()

        with pytest.raises(repo.MigrationError, match="migrated by newer code"):
            await repo.migrate(conn, migrations_copy)
    finally:
        await conn.close()


async def test_require_schema_refuses_an_outdated_database(empty_database_url: str) -> None:
    conn = await repo.connect(empty_database_url)
    try:
        with pytest.raises(repo.SchemaOutdated, match="run `make migrate`") as caught:
            await repo.require_schema(conn)
        assert (caught.value.current, caught.value.expected) == (0, repo.SCHEMA_VERSION)

        await repo.migrate(conn)
        assert await repo.require_schema(conn) == repo.SCHEMA_VERSION
        with pytest.raises(repo.SchemaOutdated, match=f"schema version {repo.SCHEMA_VERSION}, but"):
            await repo.require_schema(conn, expected=repo.SCHEMA_VERSION + 1)
    finally:
        await conn.close()


async def test_create_database_if_missing(pg_admin_url: str) -> None:
    url = repo.database_url(pg_admin_url, new_database_name())
    try:
        assert await repo.create_database_if_missing(url) is True
        assert await repo.create_database_if_missing(url) is False
    finally:
        await repo.drop_database(pg_admin_url, url.rsplit("/", 1)[-1])
