"""composer_service.serving without a database or Redis: the admin port, readiness,
the stop signals, and that everything it opened is closed after the block."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
from collections.abc import AsyncIterator

import aiohttp
import pytest
import uvloop

from composer_service import (
    RuntimeConfig,
    ServiceSettings,
    StartupError,
    run,
    serving,
    sleep_or_stop,
)

#: No logs or telemetry set-up: the test's log capture and the process's providers stay.
BARE = RuntimeConfig("test-service", admin_port=0, logs=False, telemetry=False)


async def get(port: int, path: str) -> tuple[int, object]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}{path}") as response,
    ):
        body = (
            await response.json()
            if response.content_type.endswith("json")
            else await response.text()
        )
        return response.status, body


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
async def served() -> AsyncIterator[int]:
    """A bare service whose own readiness check passes; yields its admin port."""

    async def fine() -> None:
        return None

    async with serving(BARE, checks={"own": fine}) as rt:
        assert rt.admin_port is not None
        yield rt.admin_port


async def test_the_admin_port_answers_and_is_closed_after(served: int) -> None:
    assert await get(served, "/healthz") == (200, {"status": "ok"})
    assert await get(served, "/readyz") == (200, {"ready": True, "checks": {"own": "ok"}})
    status, text = await get(served, "/metrics")
    assert status == 200 and isinstance(text, str)


async def test_nothing_listens_after_the_block() -> None:
    async with serving(BARE) as rt:
        assert rt.admin_port is not None and listening(rt.admin_port)
    assert not listening(rt.admin_port)


async def test_a_failed_check_says_not_ready_and_names_what_failed() -> None:
    async def broken() -> None:
        raise ConnectionError("the thing is down")

    async def fine() -> None:
        return None

    async with serving(BARE, checks={"thing": broken, "other": fine}) as rt:
        assert rt.admin_port is not None
        status, body = await get(rt.admin_port, "/readyz")
    assert status == 503
    assert body == {
        "ready": False,
        "checks": {"thing": "failed: the thing is down", "other": "ok"},
    }


async def test_no_admin_port_unless_asked() -> None:
    async with serving(RuntimeConfig("quiet", logs=False, telemetry=False)) as rt:
        assert rt.admin_port is None


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_a_stop_signal_sets_stop_and_the_handlers_go_with_the_block(
    sig: signal.Signals,
) -> None:
    before = signal.getsignal(sig)
    async with serving(BARE) as rt:
        assert not rt.stop.is_set()
        os.kill(os.getpid(), sig)
        await asyncio.wait_for(rt.stop.wait(), 5)
    assert signal.getsignal(sig) == before


async def test_sleep_or_stop_returns_when_stop_is_set() -> None:
    stop = asyncio.Event()
    sleeper = asyncio.create_task(sleep_or_stop(stop, 3600))
    await asyncio.sleep(0)
    assert not sleeper.done()
    stop.set()
    await asyncio.wait_for(sleeper, 5)


async def test_what_was_not_asked_for_says_how_to_ask() -> None:
    async with serving(BARE) as rt:
        with pytest.raises(RuntimeError, match="without a database: give database_url"):
            _ = rt.pool
        with pytest.raises(RuntimeError, match="without Redis: give redis_url"):
            _ = rt.queue


def test_settings_become_the_plain_values_serving_takes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPOSER_ADMIN_PORT", "9123")
    monkeypatch.setenv("COMPOSER_DATABASE_URL", "postgresql://db.example/composer")
    monkeypatch.setenv("COMPOSER_LOG_FORMAT", "json")
    settings = ServiceSettings()
    timer = settings.runtime("timer", pool_size=10)
    assert timer == RuntimeConfig(
        "timer",
        database_url="postgresql://db.example/composer",
        pool_size=10,
        redis_url=settings.redis_url,
        admin_port=9123,
        json_logs=True,
    )
    workers = settings.runtime("workers")
    assert workers.database_url is None and workers.redis_url == settings.redis_url
    partitions = settings.runtime("partition-manager", pool_size=2, redis=False)
    assert partitions.redis_url is None and partitions.database_url is not None


async def get_as(port: int, path: str, host: str) -> tuple[int, str]:
    """GET ``path`` on the admin port at 127.0.0.1 with the Host header ``host``."""
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}{path}", headers={"Host": host}) as response,
    ):
        return response.status, await response.text()


async def test_the_admin_port_answers_only_for_allowed_hosts_and_addresses() -> None:
    """Issue 25: the admin ports answered any Host, so a page DNS-rebinding its own name to
    127.0.0.1 could read /metrics. They now apply COMPOSER_ALLOWED_HOSTS as the API does,
    and still answer an IP address: what probes and a Prometheus scraping pods send."""
    config = RuntimeConfig(
        "test-service",
        admin_port=0,
        allowed_hosts=("localhost", "127.0.0.1", "[::1]", ".corp.example"),
        logs=False,
        telemetry=False,
    )
    async with serving(config) as rt:
        assert rt.admin_port is not None
        port = rt.admin_port
        for path in ("/healthz", "/readyz", "/metrics"):
            status, body = await get_as(port, path, f"evil.example:{port}")
            assert status == 421, (path, status)
            assert "COMPOSER_ALLOWED_HOSTS" in body and "evil.example" in body
        for host in (
            f"localhost:{port}",
            f"127.0.0.1:{port}",
            "metrics.corp.example",
            f"10.42.7.9:{port}",  # a pod's address, as a kubelet's probe sends it
            "[fd00::9]:9000",
        ):
            status, _ = await get_as(port, "/metrics", host)
            assert status == 200, (host, status)


def test_the_allowed_hosts_reach_the_admin_port_and_an_empty_list_stops_the_service(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COMPOSER_ALLOWED_HOSTS", "composer.example.com, .corp.example")
    config = ServiceSettings().runtime("timer", pool_size=2)
    assert config.allowed_hosts == ("composer.example.com", ".corp.example")
    monkeypatch.setenv("COMPOSER_ALLOWED_HOSTS", " , ")
    with pytest.raises(StartupError, match="COMPOSER_ALLOWED_HOSTS is empty"):
        ServiceSettings().runtime("timer", pool_size=2)


async def _refuses() -> None:
    raise StartupError("no token: set COMPOSER_SOMETHING")


async def _serves() -> None:
    return None


def test_run_maps_a_startup_error_to_exit_2_and_logs_it(caplog: pytest.LogCaptureFixture) -> None:
    assert run("test-service", _serves) == 0
    assert run("test-service", _refuses) == 2
    assert "test-service cannot start: no token: set COMPOSER_SOMETHING" in caplog.text


def test_a_startup_error_before_the_logs_are_set_up_still_reaches_stderr(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    assert run("test-service", _refuses) == 2
    assert "test-service cannot start: no token: set COMPOSER_SOMETHING" in capsys.readouterr().err


def test_run_lets_any_other_error_through() -> None:
    async def crashes() -> None:
        raise ValueError("a bug")

    with pytest.raises(ValueError, match="a bug"):
        run("test-service", crashes)


def test_run_serves_on_uvloop_unless_composer_uvloop_says_false(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    on_uvloop: list[bool] = []

    async def serves() -> None:
        on_uvloop.append(isinstance(asyncio.get_running_loop(), uvloop.Loop))

    monkeypatch.delenv("COMPOSER_UVLOOP", raising=False)
    assert run("test-service", serves) == 0
    monkeypatch.setenv("COMPOSER_UVLOOP", "false")
    assert run("test-service", serves) == 0
    assert run("test-service", serves, uvloop=True) == 0
    assert on_uvloop == [True, False, True]
