"""The migration runner and the schema-version check every service runs at start.

Migrations are files ``V<n>__<what>.sql`` (n = 1, 2, … with no gaps), applied
in order, each in its own transaction together with its row in
``composer_schema_migrations`` (version, name, SHA-256 of the file). They are
forward only: an applied file never changes — the runner refuses one whose
checksum differs — and a change is a new file, shipped expand-then-contract.
Several processes may migrate at once: a session advisory lock lets one apply
while the others wait, then find nothing left to do.
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import asyncpg

from composer_repo._db import Connection, translate_errors
from composer_repo._errors import MigrationError, SchemaOutdated

#: The schema version this code needs: the highest migration it was written for.
#: Raise it with every new migration file (a test checks they agree).
SCHEMA_VERSION = 28

_FILE = re.compile(r"^V(?P<version>\d+)__(?P<name>[a-z0-9_]+)\.sql$")

_CREATE_TABLE = """
CREATE TABLE IF NOT EXISTS composer_schema_migrations (
    version      INT PRIMARY KEY,
    name         TEXT NOT NULL,
    checksum     TEXT NOT NULL,
    applied_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    execution_ms INT NOT NULL
)"""
_LOCK = "SELECT pg_advisory_lock(hashtext('composer_migrations'))"
_UNLOCK = "SELECT pg_advisory_unlock(hashtext('composer_migrations'))"
_APPLIED = (
    "SELECT version, name, checksum, applied_at FROM composer_schema_migrations ORDER BY version"
)
_RECORD = (
    "INSERT INTO composer_schema_migrations (version, name, checksum, execution_ms) "
    "VALUES ($1, $2, $3, $4)"
)
_VERSION = "SELECT COALESCE(max(version), 0) FROM composer_schema_migrations"
_HAS_TABLE = "SELECT to_regclass('composer_schema_migrations') IS NOT NULL"


@dataclass(frozen=True, slots=True)
class Migration:
    """One migration file."""

    version: int
    name: str
    path: Path
    sql: str
    checksum: str

    @property
    def filename(self) -> str:
        return self.path.name


def default_migrations_dir() -> Path:
    """Where the migrations are: inside the installed wheel (service images), else the
    repository's ``migrations/`` folder above this source tree (development)."""
    packaged = resources.files("composer_repo").joinpath("migrations")
    if packaged.is_dir():
        return Path(str(packaged))
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "migrations"
        if (candidate / "V001__init.sql").is_file():
            return candidate
    raise MigrationError(
        "cannot find the migrations: no composer_repo/migrations in the installed package and "
        "no migrations/V001__init.sql above the source tree; pass the directory explicitly"
    )


def load_migrations(directory: Path | None = None) -> list[Migration]:
    """Read and check the migration files of ``directory``, in version order."""
    directory = directory or default_migrations_dir()
    found: dict[int, Migration] = {}
    for path in sorted(directory.glob("*.sql")):
        match = _FILE.match(path.name)
        if match is None:
            raise MigrationError(
                f"{path}: a migration file is named V<number>__<lower_snake_name>.sql"
            )
        version = int(match["version"])
        if version in found:
            raise MigrationError(
                f"{path.name} and {found[version].filename} both claim version {version}"
            )
        data = path.read_bytes()
        found[version] = Migration(
            version=version,
            name=match["name"],
            path=path,
            sql=data.decode("utf-8"),
            checksum=hashlib.sha256(data).hexdigest(),
        )
    migrations = [found[v] for v in sorted(found)]
    for expected, migration in enumerate(migrations, start=1):
        if migration.version != expected:
            raise MigrationError(
                f"migration version {expected} is missing in {directory} "
                f"(next file is {migration.filename}): versions run 1, 2, … without gaps"
            )
    return migrations


async def migrate(conn: Connection, directory: Path | None = None) -> list[Migration]:
    """Apply the pending migrations in order; returns those applied now (none: up to date).

    Takes a session advisory lock for the duration, so concurrent runners
    apply each file once. Raises MigrationError when an applied file changed
    or the database has a version these files do not know (newer code
    migrated it), before applying anything.
    """
    migrations = load_migrations(directory)
    applied_now: list[Migration] = []
    with translate_errors():
        await conn.execute(_LOCK)
        try:
            await conn.execute(_CREATE_TABLE)
            applied = {r["version"]: r for r in await conn.fetch(_APPLIED)}
            by_version = {m.version: m for m in migrations}
            for version, row in applied.items():
                migration = by_version.get(version)
                if migration is None:
                    raise MigrationError(
                        f"the database has migration V{version:03d} ({row['name']}), which is not "
                        f"among these files (up to V{len(migrations):03d}): it was migrated by newer "
                        "code; run that code's migrations, or update this checkout"
                    )
                if migration.checksum != row["checksum"]:
                    raise MigrationError(
                        f"{migration.filename} changed after it was applied on "
                        f"{row['applied_at']:%Y-%m-%d %H:%M} (checksum {row['checksum'][:12]}… in "
                        f"the database, {migration.checksum[:12]}… on disk): restore the file as it "
                        "was and put the change in a new migration file"
                    )
            for migration in migrations:
                if migration.version in applied:
                    continue
                started = time.monotonic()
                async with conn.transaction():
                    try:
                        await conn.execute(migration.sql)
                    except asyncpg.PostgresError as exc:
                        raise MigrationError(
                            f"{migration.filename} failed and was rolled back: {exc}",
                            sqlstate=exc.sqlstate,
                        ) from exc
                    elapsed_ms = int((time.monotonic() - started) * 1000)
                    await conn.execute(
                        _RECORD, migration.version, migration.name, migration.checksum, elapsed_ms
                    )
                applied_now.append(migration)
        finally:
            if not conn.is_closed():
                await conn.execute(_UNLOCK)
    return applied_now


async def schema_version(conn: Connection) -> int:
    """The highest migration applied to the database (0 for a database never migrated)."""
    with translate_errors():
        if not await conn.fetchval(_HAS_TABLE):
            return 0
        version: int = await conn.fetchval(_VERSION)
        return version


async def require_schema(conn: Connection, expected: int = SCHEMA_VERSION) -> int:
    """Refuse to run on a database behind the schema this code needs.

    Every service calls this once at start, before serving. A database ahead
    of the code is fine (migrations only add, so older code keeps working
    during a rolling deploy). Returns the database's version; raises
    SchemaOutdated naming the fix.
    """
    current = await schema_version(conn)
    if current < expected:
        with translate_errors():
            database = await conn.fetchval("SELECT current_database()")
        raise SchemaOutdated(
            f"database {database!r} is at schema version {current}, but this code needs version "
            f"{expected}: run `make migrate` (python -m composer_repo migrate) against it first",
            current=current,
            expected=expected,
        )
    return current
