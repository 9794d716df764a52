"""composer_service.serving on the real PostgreSQL and Redis: it opens the pool (schema
checked) and the client, reports both on /readyz, and closes what it opened — also
when the database is not migrated and it refuses to serve."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import urllib.parse
from collections.abc import Iterator

import aiohttp
import pytest

import composer_repo as repo
from composer_service import RuntimeConfig, StartupError, serving
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


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


async def test_a_service_started_before_its_database_waits_for_it(
    database_url: str, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # the database "comes up" late: a relay to it starts listening only after the
    # service has been refused at least once
    target = urllib.parse.urlsplit(database_url)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    late_url = database_url.replace(f"{target.hostname}:{target.port}", f"127.0.0.1:{port}")

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_connection(target.hostname, target.port)
        await asyncio.gather(_pipe(reader, up_w), _pipe(up_r, writer))

    async def open_late() -> asyncio.Server:
        def refused() -> bool:
            return any("does not answer yet" in r.getMessage() for r in caplog.records)

        deadline = asyncio.get_running_loop().time() + 10
        while not refused():
            assert asyncio.get_running_loop().time() < deadline, "the service never tried"
            await asyncio.sleep(0.05)
        return await asyncio.start_server(relay, "127.0.0.1", port)

    caplog.set_level("WARNING", logger="composer.service")
    opener = asyncio.create_task(open_late())
    async with serving(config(late_url, redis_url)) as rt:
        assert rt.pool is not None
        assert await rt.pool.fetchval("SELECT 1") == 1
    server = await opener
    server.close()


async def test_a_database_that_never_answers_is_named_when_the_wait_ends(redis_url: str) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens there
    cfg = dataclasses.replace(
        config(f"postgresql://postgres@127.0.0.1:{port}/composer", redis_url),
        startup_wait_seconds=0.5,
    )
    with pytest.raises(StartupError, match=r"did not answer within 0\.5s.*COMPOSER_DATABASE_URL"):
        async with serving(cfg):
            pass
