"""Fixtures for tests against a real PostgreSQL (docs/architecture.md §7).

The server comes from COMPOSER_TEST_DATABASE_URL (default: the local one,
its ``postgres`` database, used only for creating and dropping databases).
The session migrates one template database; each test module gets its own
copy of it (``database_url``), dropped after the module, so modules never see
each other's rows and several test runs can share one server. Names are
random per session for the same reason.

Without a reachable server the tests skip — unless CI is set, where they
fail: a misconfigured CI must not pass by skipping.

Other integration suites reuse these: ``database_url`` for a migrated scratch
database, ``conn``/``pool`` for connections to it, ``scratch_database`` for a
database of their own (empty or from the template, in tests/integration/databases.py).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

import composer_queue
import composer_repo as repo
from tests.integration.databases import new_database_name, scratch_database
from tests.integration.redis_cluster import LocalCluster

DEFAULT_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)


def _unavailable(message: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{message} (CI is set, so this fails instead of skipping)", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def pg_admin_url() -> str:
    """The server's admin URL, after checking the server answers."""
    url = os.environ.get("COMPOSER_TEST_DATABASE_URL", DEFAULT_ADMIN_URL)

    async def ping() -> None:
        conn = await repo.connect(url, timeout=5)
        await conn.close()

    try:
        asyncio.run(ping())
    except repo.RepoError as exc:
        _unavailable(f"PostgreSQL at {url} is not reachable: {exc}")
    return url


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The Redis server's URL (COMPOSER_TEST_REDIS_URL, default the local one), after a ping."""
    url = os.environ.get("COMPOSER_TEST_REDIS_URL", DEFAULT_REDIS_URL)

    async def ping() -> None:
        client = composer_queue.connect(url)
        try:
            await client.ping()
        finally:
            await client.close()

    try:
        asyncio.run(ping())
    except composer_queue.QueueError as exc:
        _unavailable(f"Redis at {url} is not reachable: {exc}")
    return url


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[LocalCluster]:
    """A Redis Cluster of three masters (no replicas) started for this session on ports
    of its own, in a temporary directory, and stopped after it (tests/integration/redis_cluster.py)."""
    cluster = LocalCluster().start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def redis_cluster_url(redis_cluster: LocalCluster) -> str:
    """Any node's address of the session's Redis Cluster (COMPOSER_REDIS_URL with
    COMPOSER_REDIS_CLUSTER=true)."""
    return redis_cluster.url


@pytest.fixture(scope="session")
def pg_template(pg_admin_url: str) -> Iterator[str]:
    """The name of a database migrated once per session, to copy scratch databases from."""
    name = new_database_name("composer_tpl")

    async def build() -> None:
        await repo.create_database(pg_admin_url, name)
        conn = await repo.connect(repo.database_url(pg_admin_url, name))
        try:
            await repo.migrate(conn)
        finally:
            await conn.close()

    try:
        asyncio.run(build())
        yield name
    finally:
        asyncio.run(repo.drop_database(pg_admin_url, name))


@pytest.fixture(scope="module")
def database_url(pg_admin_url: str, pg_template: str) -> Iterator[str]:
    """URL of a migrated database private to the test module."""
    with scratch_database(pg_admin_url, template=pg_template) as url:
        yield url


@pytest.fixture
async def conn(database_url: str) -> AsyncIterator[repo.Connection]:
    """A connection (JSON codecs registered) to the module's database, closed after the test."""
    connection = await repo.connect(database_url)
    try:
        yield connection
    finally:
        await connection.close()


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[repo.Pool]:
    """A small pool on the module's database, closed after the test."""
    p = await repo.create_pool(database_url, min_size=1, max_size=4)
    try:
        yield p
    finally:
        await p.close()
