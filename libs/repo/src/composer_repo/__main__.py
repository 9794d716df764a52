"""``python -m composer_repo migrate``: create the database if missing, migrate it,
and make sure this month's partitions and the next ones exist (what `make migrate` runs)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from composer_repo._admin import create_database_if_missing
from composer_repo._db import connect
from composer_repo._errors import RepoError
from composer_repo._migrate import migrate, schema_version
from composer_repo._partitions import ensure_partitions

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/composer"


async def _migrate(url: str, directory: Path | None, months_ahead: int) -> None:
    if await create_database_if_missing(url):
        print(f"created database {url.rsplit('/', 1)[-1]}")
    conn = await connect(url)
    try:
        applied = await migrate(conn, directory)
        for m in applied:
            print(f"applied {m.filename}")
        created = await ensure_partitions(conn, months_ahead=months_ahead)
        version = await schema_version(conn)
    finally:
        await conn.close()
    state = f"{len(applied)} migration(s) applied" if applied else "already up to date"
    print(f"schema version {version}: {state}; {created} partition table(s) created")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m composer_repo")
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("migrate", help="create the database if missing and migrate it")
    up.add_argument(
        "--url",
        default=os.environ.get("COMPOSER_DATABASE_URL", DEFAULT_URL),
        help="database URL (default: $COMPOSER_DATABASE_URL, else %(default)s)",
    )
    up.add_argument("--dir", type=Path, default=None, help="migrations directory")
    up.add_argument("--months-ahead", type=int, default=3, help="partitions to keep ahead")
    args = parser.parse_args(argv)
    try:
        asyncio.run(_migrate(args.url, args.dir, args.months_ahead))
    except RepoError as exc:
        print(f"migrate: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
