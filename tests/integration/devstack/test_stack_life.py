"""Issue 17: a second `make run` on the same machine, a port clash, and a SIGKILLed stack.

- The services die with the stack even when it is SIGKILLed: their processes go and
  their ports come free, so the next `make run` finds them free.
- A port another process holds stops the stack once, with one line naming the
  setting to change and exit code 3, instead of a restart loop of tracebacks.
- Two stacks run side by side, each on the ports COMPOSER_PORT_BASE gives it and its
  own Redis prefix, each running its own workflows.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

import composer_queue
from tests.integration.databases import scratch_database
from tests.integration.devstack.conftest import (
    PORTS_PER_STACK,
    SERVICES,
    Stack,
    free_range,
    port_free,
    ready,
    saved_tokens,
    stack_environ,
    start_stack,
)


def children_of(pid: int) -> list[int]:
    """The live processes whose parent is ``pid`` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            # the command may hold spaces and parentheses: the fields after the last ")"
            state, ppid = (entry / "stat").read_text().rpartition(")")[2].split()[:2]
            if int(ppid) == pid and state != "Z":
                found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie nobody reaped yet counts as gone: it holds no port)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


async def wait_for(check: object, what: str, timeout: float) -> None:
    assert callable(check)
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not hold within {timeout}s")
        await asyncio.sleep(0.1)


async def test_services_die_with_a_sigkilled_stack(running_stack: Stack) -> None:
    stack = running_stack
    ports = [int(stack.api.rsplit(":", 1)[1]), *stack.admin_ports]
    async with aiohttp.ClientSession() as session:
        for port in stack.admin_ports:
            try:
                await ready(session, f"http://127.0.0.1:{port}/healthz")
            except AssertionError as exc:  # say what the services said
                raise AssertionError(f"{exc}; the stack said:\n{stack.text[-3000:]}") from None
    services = children_of(stack.process.pid)
    assert len(services) == len(SERVICES), stack.text[-3000:]
    assert not any(port_free(p) for p in ports), "the stack does not hold its ports"

    stack.process.send_signal(signal.SIGKILL)
    await stack.process.wait()

    try:
        await wait_for(
            lambda: not any(alive(pid) for pid in services),
            f"services {[pid for pid in services if alive(pid)]} exiting after the stack's SIGKILL",
            30,
        )
        await wait_for(
            lambda: all(port_free(p) for p in ports),
            f"ports {[p for p in ports if not port_free(p)]} coming free",
            10,
        )
    finally:  # a failed test leaves no orphan behind
        for pid in services:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


async def test_a_taken_port_stops_the_stack_once_naming_the_setting(
    database_url: str, redis_url: str, tmp_path: Path
) -> None:
    base = free_range(PORTS_PER_STACK)
    with socket.socket() as squatter:  # another program on the stack's API port
        squatter.bind(("127.0.0.1", base))
        squatter.listen()
        env = stack_environ(
            database_url,
            redis_url,
            COMPOSER_PORT_BASE=str(base),
            COMPOSER_REDIS_PREFIX=f"clash-{uuid.uuid4().hex[:8]}",
        )
        admin = list(range(base + 2, base + 2 + len(SERVICES)))
        stack = await start_stack(env, tmp_path, base, admin)
        try:
            await asyncio.wait_for(stack.process.wait(), 60)
        finally:
            await stack.stop()
    output = stack.text
    assert stack.process.returncode == 3, output[-3000:]
    message = (
        f"port {base} (COMPOSER_API_PORT) is in use by another process: "
        "stop it or set COMPOSER_API_PORT"
    )
    assert output.count(message) == 1, output[-3000:]
    assert "a port of this stack is taken: stopping the stack" in output
    assert "COMPOSER_PORT_BASE" in output
    assert "restarting" not in output, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    assert "every service stopped" in output


@pytest.fixture
def two_databases(pg_admin_url: str, pg_template: str) -> Iterator[tuple[str, str]]:
    """A migrated database for each of two stacks (made outside the test's event loop)."""
    with (
        scratch_database(pg_admin_url, template=pg_template) as a,
        scratch_database(pg_admin_url, template=pg_template) as b,
    ):
        yield a, b


async def run_hello(
    session: aiohttp.ClientSession, stack: Stack, n: int, *, result_api: str | None = None
) -> dict[str, object]:
    """Deploy a one-node PYTHON workflow on ``stack`` and run it to its end (its result
    asked of ``result_api``, another gateway of the stack, if given)."""
    auth = {"Authorization": f"Bearer {saved_tokens(stack.state)['COMPOSER_API_TOKEN']}"}
    definition = {
        "id": "side-by-side",
        "nodes": [
            {
                "id": "double",
                "type": "PYTHON",
                "spec": {
                    "code": "def main(input):\n    return {'n': input['n'] * 2}\n",
                    "input": {"n": "{{input.n}}"},
                },
            }
        ],
        "edges": [],
        "output": {"n": "{{tasks.double.output.n}}"},
    }
    async with session.post(
        f"{stack.api}/v1/workflows?deploy=true", json=definition, headers=auth
    ) as r:
        assert r.status == 201, await r.text()
    async with session.post(
        f"{stack.api}/v1/runs",
        json={"workflow_id": "side-by-side", "input": {"n": n}},
        headers=auth,
    ) as r:
        assert r.status == 201, await r.text()
        run_id = (await r.json())["run_id"]
    async with session.get(
        f"{result_api or stack.api}/v1/runs/{run_id}/result?timeout=30", headers=auth
    ) as r:
        result: dict[str, object] = await r.json()
    return result


async def test_two_stacks_run_side_by_side(
    two_databases: tuple[str, str], redis_url: str, tmp_path: Path
) -> None:
    base_a = free_range(PORTS_PER_STACK)
    base_b = free_range(PORTS_PER_STACK)
    while abs(base_a - base_b) < PORTS_PER_STACK:
        base_b = free_range(PORTS_PER_STACK)
    stacks: list[Stack] = []
    client = composer_queue.connect(redis_url)
    try:
        # the port base alone: its ports, gRPC address and Redis prefix all follow it
        for base, db, folder in zip((base_a, base_b), two_databases, "ab", strict=True):
            env = stack_environ(db, redis_url, COMPOSER_PORT_BASE=str(base))
            admin = list(range(base + 2, base + 2 + len(SERVICES)))
            stacks.append(await start_stack(env, tmp_path / folder, base, admin))
        async with aiohttp.ClientSession() as session:
            for stack in stacks:
                for port in stack.admin_ports:
                    await ready(session, f"http://127.0.0.1:{port}/readyz", timeout=90, stack=stack)
            results = await asyncio.gather(
                run_hello(session, stacks[0], 1), run_hello(session, stacks[1], 2)
            )
        for stack, result, n in zip(stacks, results, (1, 2), strict=True):
            assert result["status"] == "SUCCEEDED", (result, stack.text[-3000:])
            assert result["output"] == {"n": 2 * n}
            # where `make demo` finds the stack
            assert f"COMPOSER_API_URL={stack.api}\n" in (stack.state / "stack.env").read_text()
        for base in (base_a, base_b):  # each stack's work went through its own prefix
            assert await client.streams(f"composer-{base}"), f"no streams of stack {base}"
        for stack in stacks:
            await stack.stop()
            assert stack.process.returncode == 0, stack.text[-3000:]
            assert "restarting" not in stack.text, stack.text[-3000:]
    finally:
        for stack in stacks:
            await stack.stop()
        for base in (base_a, base_b):
            await client.drop(f"composer-{base}")
        await client.close()
