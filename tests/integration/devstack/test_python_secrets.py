"""Under `make run`, a PYTHON node reads no secret from any process's environment.

Issue 15, item 5: every service of the dev stack runs as one user, so a
snippet could read /proc/<pid>/environ of the worker, the gateway (every API
token) and the supervisor (all of them). Each service is now non-dumpable and
the snippet holds no capability; since issue 25 it runs in a sandbox with a
pid namespace of its own, where no process of the stack is even visible. The
snippet below tries every process the machine shows it.
"""

from __future__ import annotations

import aiohttp

from tests.integration.devstack.conftest import Stack, ready, saved_tokens

SNOOP = """
import os
def main(input):
    needles = [n.encode() for n in input["needles"]]
    leaks, refused, read = [], 0, 0
    for name in os.listdir('/proc'):
        if not name.isdigit():
            continue
        try:
            with open(f'/proc/{name}/environ', 'rb') as f:
                env = f.read()
        except OSError:
            refused += 1
            continue
        read += 1
        if any(n in env for n in needles):
            try:
                with open(f'/proc/{name}/cmdline', 'rb') as f:
                    cmd = f.read().replace(b'\\0', b' ').decode(errors='replace')[:200]
            except OSError:
                cmd = '?'
            leaks.append([int(name), cmd])
    return {'leaks': leaks, 'refused': refused, 'read': read}
"""


async def test_a_python_node_reads_no_secret_of_the_stack(
    running_stack: Stack,
    database_url: str,
) -> None:
    stack = running_stack
    definition = {
        "id": "snoop",
        "nodes": [
            {
                "id": "snoop",
                "type": "PYTHON",
                "spec": {"code": SNOOP, "input": {"needles": "{{input.needles}}"}},
            }
        ],
        "edges": [],
        "output": "{{tasks.snoop.output}}",
    }
    async with aiohttp.ClientSession() as session:
        await ready(session, f"{stack.api}/healthz")
        for port in stack.admin_ports:
            await ready(session, f"http://127.0.0.1:{port}/readyz")
        tokens = saved_tokens(stack.state)  # written before the services started
        auth = {"Authorization": f"Bearer {tokens['COMPOSER_API_TOKEN']}"}
        async with session.post(
            f"{stack.api}/v1/workflows?deploy=true", json=definition, headers=auth
        ) as r:
            assert r.status == 201, await r.text()
        async with session.post(
            f"{stack.api}/v1/runs",
            json={"workflow_id": "snoop", "input": {"needles": [*tokens.values(), database_url]}},
            headers=auth,
        ) as r:
            assert r.status == 201, await r.text()
            run_id = (await r.json())["run_id"]
        async with session.get(
            f"{stack.api}/v1/runs/{run_id}/result?timeout=60", headers=auth
        ) as r:
            run = await r.json()
    assert run["status"] == "SUCCEEDED", run
    out = run["output"]
    assert out["leaks"] == [], f"a PYTHON node read secrets of: {out['leaks']}"
    # The sandbox shows it no process of the stack at all: only its own pid namespace
    # (bwrap's reaper and itself), so at most those two environments to try.
    assert 1 <= out["read"] + out["refused"] <= 3
