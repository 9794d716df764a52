"""What one PYTHON node costs the workers, sandboxed and not (issue 25).

The executor alone, as the workers run it, with no engine around it: a
trivial node (``import json``, return a dict) ``SEQUENTIAL`` times one at a
time on an otherwise idle machine — its latency (start of ``run_python`` →
its result) and the machine's CPU per node (all of it, from /proc/stat: the
node's processes, bwrap, slirp4netns, the worker's own part) — then
``CONCURRENT`` nodes 16 at a time, as the bench's stack workload runs them.
The modes alternate, round by round, because this machine is noisy:

- ``sandboxed``: the workers' default, bubblewrap with the ``outbound``
  network (slirp4netns);
- ``sandboxed_none``: bubblewrap with no network (no slirp4netns);
- ``unsandboxed``: COMPOSER_PYTHON_SANDBOX=off.

On a checkout from before the sandbox (no ``sandbox`` argument), only
``unsandboxed`` runs: the code as it was, for a before/after.

Options (``python -m tests.bench python [--rounds N] [--nodes N]``).
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import statistics
import time
from pathlib import Path
from typing import Any

from composer_executors import run_python
from tests.bench import options

SEQUENTIAL = 100
CONCURRENT, IN_FLIGHT = 200, 16
CODE = "import json\ndef main(input):\n    return {'ok': True, 'n': input['n']}\n"
MEMORY = 512 * 1024 * 1024


def _busy_seconds() -> float:
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return (sum(values) - values[3] - values[4]) / 100  # USER_HZ


def _modes() -> dict[str, Any]:
    """Each mode's keyword arguments for run_python (None: unsandboxed)."""
    if "sandbox" not in inspect.signature(run_python).parameters:
        return {"unsandboxed": None}
    from composer_executors import Sandbox, SandboxPolicy

    modes: dict[str, Any] = {}
    for name, policy in (
        ("sandboxed", SandboxPolicy(network="outbound", slots=IN_FLIGHT)),
        ("sandboxed_none", SandboxPolicy(network="none", slots=IN_FLIGHT)),
    ):
        box = Sandbox(policy)
        box.open()
        modes[name] = box
    modes["unsandboxed"] = None
    return modes


async def _node(sandbox: Any, n: int) -> float:
    kwargs = {} if sandbox is None else {"sandbox": sandbox}
    started = time.perf_counter()
    out = await run_python(
        {"code": CODE, "input": {"n": n}}, timeout=60, memory_limit_bytes=MEMORY, **kwargs
    )
    assert out == {"ok": True, "n": n}, out
    return time.perf_counter() - started


async def _sequential(sandbox: Any, nodes: int) -> tuple[list[float], float]:
    for i in range(5):  # warm the page cache and the sandbox's uids
        await _node(sandbox, i)
    busy = _busy_seconds()
    took = [await _node(sandbox, i) for i in range(nodes)]
    return took, (_busy_seconds() - busy) / nodes


async def _concurrent(sandbox: Any, nodes: int) -> tuple[float, float]:
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def one(i: int) -> float:
        async with gate:
            return await _node(sandbox, i)

    busy, started = _busy_seconds(), time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(nodes)))
    elapsed = time.perf_counter() - started
    return nodes / elapsed, (_busy_seconds() - busy) / nodes


async def main() -> dict[str, float]:
    p = argparse.ArgumentParser(prog="python -m tests.bench python")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--nodes", type=int, default=SEQUENTIAL)
    args = p.parse_args(options())
    modes = _modes()
    p50: dict[str, list[float]] = {m: [] for m in modes}
    cpu: dict[str, list[float]] = {m: [] for m in modes}
    rate: dict[str, list[float]] = {m: [] for m in modes}
    rate_cpu: dict[str, list[float]] = {m: [] for m in modes}
    try:
        for round_ in range(args.rounds):
            for mode, sandbox in modes.items():
                took, per_node = await _sequential(sandbox, args.nodes)
                per_s, per_node_16 = await _concurrent(sandbox, CONCURRENT)
                p50[mode].append(statistics.median(took) * 1000)
                cpu[mode].append(per_node * 1000)
                rate[mode].append(per_s)
                rate_cpu[mode].append(per_node_16 * 1000)
                print(
                    f"  round {round_ + 1} {mode:15} p50 {p50[mode][-1]:6.1f} ms, "
                    f"CPU {cpu[mode][-1]:5.1f} ms/node; 16 at once {per_s:5.1f} nodes/s, "
                    f"CPU {rate_cpu[mode][-1]:5.1f} ms/node",
                    flush=True,
                )
    finally:
        for sandbox in modes.values():
            if sandbox is not None:
                sandbox.close()
    figures: dict[str, float] = {}
    for mode in modes:
        figures[f"python_{mode}_p50_ms"] = statistics.median(p50[mode])
        figures[f"python_{mode}_cpu_ms_per_node"] = statistics.median(cpu[mode])
        figures[f"python_{mode}_16_nodes_per_s"] = statistics.median(rate[mode])
        figures[f"python_{mode}_16_cpu_ms_per_node"] = statistics.median(rate_cpu[mode])
    return figures
