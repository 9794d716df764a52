"""Issue 31, day one: the README's worker, saved as a file and started in a shell that
loaded what ``make run`` wrote (tokens.env, stack.env), serves a stack on any
COMPOSER_PORT_BASE as written; it says at start what it serves and where, and Ctrl-C
drains it to STOPPED in the workers' list. examples/price-check.yaml runs as shipped,
offline, on the shop the stack serves."""

from __future__ import annotations

import asyncio
import re
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from tests.integration.devstack.conftest import (
    PORTS_PER_STACK,
    SERVICES,
    free_range,
    ready,
    stack_environ,
    start_stack,
)
from tests.unit.test_readme import python_blocks

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
PAY = {
    "id": "day-one-pay",
    "nodes": [
        {
            "id": "charge",
            "type": "TASK",
            "queue": "payments",
            "spec": {"amount": "{{input.amount}}"},
        }
    ],
    "edges": [],
    "output": {"charged": "{{tasks.charge.output.charged}}"},
}


def loaded(*files: Path) -> dict[str, str]:
    """What ``set -a; . FILE; set +a`` exports from each file, in order."""
    found: dict[str, str] = {}
    for path in files:
        for line in path.read_text().splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.partition("=")
                found[key] = value
    return found


async def worker_row(session: aiohttp.ClientSession, api: str, token: str, worker_id: str) -> Any:
    async with session.get(f"{api}/v1/workers", headers={"Authorization": f"Bearer {token}"}) as r:
        assert r.status == 200, await r.text()
        rows = [w for w in (await r.json())["workers"] if w["worker_id"] == worker_id]
    return rows[0] if rows else None


async def test_the_readme_worker_serves_a_stack_on_a_port_base_and_ctrl_c_drains_it(
    database_url: str, redis_url: str, tmp_path: Path
) -> None:
    base = free_range(PORTS_PER_STACK)
    env = stack_environ(database_url, redis_url, COMPOSER_PORT_BASE=str(base))
    admin = list(range(base + 2, base + 2 + len(SERVICES)))
    stack = await start_stack(env, tmp_path / "state", base, admin)
    worker: asyncio.subprocess.Process | None = None
    try:
        async with aiohttp.ClientSession() as session:
            for port in admin:
                await ready(session, f"http://127.0.0.1:{port}/readyz", timeout=90)
            shell = loaded(tmp_path / "state" / "tokens.env", tmp_path / "state" / "stack.env")
            assert shell["COMPOSER_REDIS_PREFIX"] == f"composer-{base}"
            assert shell["COMPOSER_DATABASE_URL"] == database_url  # `composer migrate`'s

            # the README's first block, as a reader saves it
            script = tmp_path / "worker.py"
            script.write_text(python_blocks()[0][1])
            worker = await asyncio.create_subprocess_exec(
                sys.executable,
                str(script),
                env={k: v for k, v in env.items() if not k.startswith("COMPOSER_")} | shell,
                stderr=asyncio.subprocess.PIPE,
            )
            assert worker.stderr is not None
            start = ""
            while "serving" not in start:
                line = await asyncio.wait_for(worker.stderr.readline(), 30)
                assert line, f"the worker exited: {start}"
                start += line.decode()
            said = re.search(r"worker (\S+) serving payments from Redis", start)
            assert said, start
            assert f"prefix 'composer-{base}', coordinator 127.0.0.1:{base + 1}" in start

            auth = {"Authorization": f"Bearer {shell['COMPOSER_API_TOKEN']}"}
            api = shell["COMPOSER_API_URL"]
            async with session.post(
                f"{api}/v1/workflows?deploy=true",
                json=PAY | {"id": f"pay-{uuid.uuid4().hex[:6]}"},
                headers=auth,
            ) as r:
                assert r.status == 201, await r.text()
                workflow = (await r.json())["id"]
            async with session.post(
                f"{api}/v1/runs",
                json={"workflow_id": workflow, "input": {"amount": 5}},
                headers=auth,
            ) as r:
                assert r.status == 201, await r.text()
                run_id = (await r.json())["run_id"]
            async with session.get(f"{api}/v1/runs/{run_id}/result?timeout=60", headers=auth) as r:
                result = await r.json()
            assert result["status"] == "SUCCEEDED", (result, stack.text[-3000:])
            assert result["output"] == {"charged": 5}

            # examples/price-check.yaml as shipped, offline: the shop is the stack's own
            # (COMPOSER_API_EXAMPLES), on the one local port HTTP nodes may call
            price_check = yaml.safe_load((EXAMPLES / "price-check.yaml").read_text())
            async with session.post(
                f"{api}/v1/workflows?deploy=true", json=price_check, headers=auth
            ) as r:
                assert r.status == 201, await r.text()
            url = f"{api}/examples/shop/items/7"
            async with session.post(
                f"{api}/v1/runs",
                json={"workflow_id": "price-check", "input": {"url": url}},
                headers=auth,
            ) as r:
                assert r.status == 201, await r.text()
                run_id = (await r.json())["run_id"]
            async with session.get(f"{api}/v1/runs/{run_id}/result?timeout=60", headers=auth) as r:
                result = await r.json()
            assert result["status"] == "SUCCEEDED", (result, stack.text[-3000:])
            assert result["output"]["quote"]["total"] == 108.0

            worker.send_signal(signal.SIGINT)  # Ctrl-C
            rest = (await asyncio.wait_for(worker.stderr.read(), 30)).decode()
            assert await worker.wait() == 0, rest
            assert "Traceback" not in rest and "stopped (1 completed, 0 failed)" in rest, rest
            deadline = time.monotonic() + 10
            while (
                row := await worker_row(session, api, shell["COMPOSER_API_TOKEN"], said[1])
            ) is None or row["status"] != "STOPPED":
                assert time.monotonic() < deadline, row
                await asyncio.sleep(0.1)
    finally:
        if worker is not None and worker.returncode is None:
            worker.kill()
            await worker.wait()
        await stack.stop()
