"""Run the benchmarks: ``python -m tests.bench [name …] [--timeout SECONDS] [module options]``.

Names are module names without ``bench_`` (``core``); none runs them all.
Options the runner does not know go to the modules (``stack --only w1 --scale 0.1``).
A module with ``HEADLINE = True`` (bench_stack) also has its figures copied to
the top level of the JSON, so runs can be compared by key over time.
A module may also fill a module-level ``DETAILS`` dict with what is not a
number (bench_stack: the top SQL statements, or why they are unavailable); it
goes to ``details.<name>`` in the JSON.
A module that fails (a service that is down, say) is reported with its name
and the run exits non-zero; one that hangs is stopped at the timeout.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import faulthandler
import importlib
import importlib.metadata
import inspect
import json
import os
import platform
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

from tests.bench import set_options

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RESULTS = ROOT / "bench" / "results"
PACKAGES = ("cel-python", "pydantic", "asyncpg", "redis", "grpcio", "pyyaml")

Bench = Callable[[], Awaitable[dict[str, float]]]


def discover() -> list[str]:
    return sorted(p.stem.removeprefix("bench_") for p in HERE.glob("bench_*.py"))


def load(name: str) -> Bench:
    module = importlib.import_module(f"tests.bench.bench_{name}")
    main = getattr(module, "main", None)
    if main is None or not inspect.iscoroutinefunction(main):
        raise TypeError(f"tests/bench/bench_{name}.py must define `async def main() -> dict`")
    return cast(Bench, main)


def headline(name: str) -> bool:
    return bool(getattr(importlib.import_module(f"tests.bench.bench_{name}"), "HEADLINE", False))


def details(name: str) -> dict[str, Any]:
    found = getattr(importlib.import_module(f"tests.bench.bench_{name}"), "DETAILS", None)
    return dict(found) if isinstance(found, dict) else {}


def machine() -> dict[str, Any]:
    versions: dict[str, str] = {}
    for package in PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            continue
    return {
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "packages": versions,
    }


def show(value: float) -> str:
    if value != value or value in (float("inf"), float("-inf")):
        return str(value)
    magnitude = abs(value)
    if magnitude >= 100_000:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:,.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.4g}"


def table(name: str, figures: dict[str, float], seconds: float) -> str:
    width = max((len(k) for k in figures), default=10)
    lines = [f"== {name} ({seconds:.1f} s)", f"  {'figure':<{width}}  {'value':>14}"]
    lines.append(f"  {'-' * width}  {'-' * 14}")
    lines += [f"  {k:<{width}}  {show(v):>14}" for k, v in figures.items()]
    return "\n".join(lines)


async def run_one(bench: Bench, timeout: float) -> dict[str, float]:
    figures = await asyncio.wait_for(bench(), timeout)
    if not isinstance(figures, dict) or not all(
        isinstance(k, str) and isinstance(v, int | float) for k, v in figures.items()
    ):
        raise TypeError(f"main() must return dict[str, float], got {figures!r:.200}")
    return {k: float(v) for k, v in figures.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench", description=__doc__)
    parser.add_argument("names", nargs="*", help="benchmarks to run (default: all)")
    parser.add_argument("--timeout", type=float, default=900.0, help="per benchmark, seconds")
    parser.add_argument("--no-save", action="store_true", help="print only; write no JSON")
    args, extra = parser.parse_known_args(argv)
    set_options(extra)

    available = discover()
    unknown = [
        n.removeprefix("bench_") for n in args.names if n.removeprefix("bench_") not in available
    ]
    if unknown:
        parser.error(f"no benchmark {', '.join(unknown)}; there are: {', '.join(available)}")
    names = [n.removeprefix("bench_") for n in args.names] or available

    started = dt.datetime.now(dt.UTC)
    report: dict[str, Any] = {
        "started_at": started.isoformat().replace("+00:00", "Z"),
        "machine": machine(),
        "results": {},
        "details": {},
        "failures": {},
    }
    print(
        f"benchmarks: {', '.join(names)} on {report['machine']['cpu_count']} CPU(s), "
        f"Python {report['machine']['python']}\n"
    )
    for name in names:
        began = time.perf_counter()
        print(f"running {name} …", flush=True)
        # A module blocked outside the event loop cannot be cancelled: past the timeout
        # and a grace, dump every thread's stack and exit rather than hang.
        faulthandler.dump_traceback_later(args.timeout + 30, exit=True)
        try:
            figures = asyncio.run(run_one(load(name), args.timeout))
        except TimeoutError:
            message = f"did not finish within {args.timeout:.0f} s (a service down or hanging?)"
            report["failures"][name] = message
            print(f"!! bench {name} FAILED: {message}\n", file=sys.stderr)
            continue
        except Exception as exc:
            report["failures"][name] = f"{type(exc).__name__}: {exc}"
            print(f"!! bench {name} FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
            traceback.print_exc()
            print(file=sys.stderr)
            continue
        finally:
            faulthandler.cancel_dump_traceback_later()
        report["results"][name] = figures
        if notes := details(name):
            report["details"][name] = notes
        if headline(name):
            report.update(figures)
        print(table(name, figures, time.perf_counter() - began) + "\n", flush=True)

    if not args.no_save:
        RESULTS.mkdir(parents=True, exist_ok=True)
        path = RESULTS / f"{started:%Y%m%dT%H%M%SZ}.json"
        path.write_text(json.dumps(report, indent=2) + "\n")
        print(f"results written to {path.relative_to(ROOT)}")
    if report["failures"]:
        print(f"FAILED: {', '.join(report['failures'])}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
