"""Scratch databases for integration tests: created per use, dropped after."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import composer_repo as repo


def new_database_name(prefix: str = "composer_t") -> str:
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


@contextmanager
def scratch_database(admin_url: str, *, template: str | None = None) -> Iterator[str]:
    """A new database (a copy of ``template``, or empty) for the block; yields its URL.

    Synchronous so it works in fixtures of any scope without sharing an event
    loop with the tests; the database is dropped (connections and all) after.
    """
    name = new_database_name()
    asyncio.run(repo.create_database(admin_url, name, template=template))
    try:
        yield repo.database_url(admin_url, name)
    finally:
        asyncio.run(repo.drop_database(admin_url, name))
