"""composer_service.serving on the real PostgreSQL and Redis: it opens the pool (schema
checked) and the client, reports both on /readyz, and closes what it opened — also
when the database is not migrated and it refuses to serve."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import aiohttp
import pytest

import composer_repo as repo
from composer_service import RuntimeConfig, serving
from tests.integration.databases import scratch_database

pytestmark = pytest.mark.integration


def config(database_url: str, redis_url: str, *, admin_port: int = 0) -> RuntimeConfig:
    return RuntimeConfig(
        "test-service",
        database_url=database_url,
        pool_size=2,
        redis_url=redis_url,
        admin_port=admin_port,
        logs=False,  # the test's log capture stays
        telemetry=False,
    )


async def readyz(port: int | None) -> tuple[int, dict[str, object]]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/readyz") as response,
    ):
        return response.status, await response.json()


async def connections_to(pg_admin_url: str, database_url: str) -> int:
    name = database_url.rsplit("/", 1)[1]
    conn = await repo.connect(pg_admin_url)
    try:
        count: int = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", name
        )
        return count
    finally:
        await conn.close()


@pytest.fixture
def empty_database(pg_admin_url: str) -> Iterator[str]:
    with scratch_database(pg_admin_url) as url:
        yield url


async def test_opens_the_pool_and_redis_reports_them_and_closes_them(
    database_url: str, redis_url: str, pg_admin_url: str
) -> None:
    async with serving(config(database_url, redis_url)) as rt:
        async with repo.transaction(rt.pool) as conn:
            assert await repo.schema_version(conn) >= repo.SCHEMA_VERSION
        await rt.queue.ping()
        assert await readyz(rt.admin_port) == (
            200,
            {"ready": True, "checks": {"database": "ok", "redis": "ok"}},
        )
        assert await connections_to(pg_admin_url, database_url) >= 1
        pool = rt.pool
    assert pool.is_closing()
    assert await connections_to(pg_admin_url, database_url) == 0


async def test_redis_down_is_not_ready_while_the_database_is(database_url: str) -> None:
    async with serving(config(database_url, "redis://127.0.0.1:9/0")) as rt:
        status, body = await readyz(rt.admin_port)
    assert status == 503
    checks = body["checks"]
    assert isinstance(checks, dict)
    assert checks["database"] == "ok" and str(checks["redis"]).startswith("failed:")


async def test_an_unmigrated_database_is_refused_before_anything_serves(
    empty_database: str, redis_url: str, pg_admin_url: str
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    with pytest.raises(repo.SchemaOutdated, match="make migrate"):
        async with serving(config(empty_database, redis_url, admin_port=port)):
            pytest.fail("served on a database behind the schema")
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0, "the admin port was left open"
    assert await connections_to(pg_admin_url, empty_database) == 0, "the pool was left open"
