"""Creating and dropping whole databases: test scratch databases and `make migrate`.

Database names cannot be bound as parameters, so these statements are the
one place that composes SQL: with a name PostgreSQL itself quoted
(quote_ident), never raw input.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import asyncpg

from composer_repo._db import translate_errors
from composer_repo._errors import RepoError

_DUPLICATE_DATABASE = "42P04"


def database_url(url: str, name: str) -> str:
    """``url`` pointing at database ``name`` on the same server."""
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


async def create_database(admin_url: str, name: str, *, template: str | None = None) -> None:
    """Create database ``name`` (a copy of ``template`` when given) on ``admin_url``'s server.

    Copying a migrated template is much faster than migrating each scratch
    database; the template must have no open connections while it is copied.
    """
    with translate_errors():
        admin = await asyncpg.connect(admin_url)
        try:
            quoted = await admin.fetchval("SELECT quote_ident($1)", name)
            if template is None:
                await admin.execute(f"CREATE DATABASE {quoted}")
            else:
                source = await admin.fetchval("SELECT quote_ident($1)", template)
                await admin.execute(f"CREATE DATABASE {quoted} TEMPLATE {source}")
        finally:
            await admin.close()


async def drop_database(admin_url: str, name: str) -> None:
    """Drop database ``name`` if it exists, closing its remaining connections."""
    with translate_errors():
        admin = await asyncpg.connect(admin_url)
        try:
            quoted = await admin.fetchval("SELECT quote_ident($1)", name)
            await admin.execute(f"DROP DATABASE IF EXISTS {quoted} WITH (FORCE)")
        finally:
            await admin.close()


async def create_database_if_missing(url: str) -> bool:
    """Create the database ``url`` names when it does not exist; True if it was created.

    Connects to the server's ``postgres`` database to do it, as `make migrate`
    does on a fresh machine. Safe when several runners race to create it.
    """
    with translate_errors():
        try:
            conn = await asyncpg.connect(url)
        except asyncpg.InvalidCatalogNameError:
            pass
        else:
            await conn.close()
            return False
        name = urlsplit(url).path.lstrip("/")
    try:
        await create_database(database_url(url, "postgres"), name)
    except RepoError as exc:
        if exc.sqlstate == _DUPLICATE_DATABASE:
            return False
        raise
    return True
