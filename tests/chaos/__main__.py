"""``make chaos``: python -m tests.chaos [--runs N] [--concurrency N] [--seed S] …

``--replicas all=2`` (or ``coordinator=2,timer=2``…) starts that many of each service:
every api-gateway on its own port, the load spread over them.

Exits 0 when every check passes, 1 on any violation, 2 when it cannot run here.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from tests.chaos.cluster import DEFAULT_REPLICAS, Timings, parse_replicas
from tests.chaos.suite import Config, have_servers, run_suite


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    p.add_argument("--runs", type=int, default=1000, help="runs to start (default 1000)")
    p.add_argument("--concurrency", type=int, default=40, help="runs in flight at once (40)")
    p.add_argument("--seed", type=int, help="random seed (default: a fresh one, printed)")
    p.add_argument(
        "--gap",
        type=float,
        nargs=2,
        default=(2.0, 5.0),
        metavar=("MIN", "MAX"),
        help="seconds between faults (2 5)",
    )
    p.add_argument("--rounds", type=int, help="rounds of faults (default: until every run started)")
    p.add_argument("--lease-ttl", type=float, default=3.0, help="workers' lease TTL in seconds (3)")
    p.add_argument(
        "--short",
        action="store_true",
        help="the make-test variant: 100 runs, one round, two of every service",
    )
    p.add_argument(
        "--replicas",
        type=_replicas,
        default=None,
        metavar="SERVICE=N,…",
        help="replicas per service, over the defaults ("
        + ",".join(f"{k}={n}" for k, n in DEFAULT_REPLICAS.items())
        + "); all=N sets every one, later entries override it (all=2,api-gateway=1); "
        "--short runs two of each",
    )
    p.add_argument("--keep", action="store_true", help="keep logs and ledger even on success")
    args = p.parse_args(argv)
    missing = have_servers()
    if missing:
        print(f"chaos | cannot run: {missing}", file=sys.stderr)
        return 2
    cfg = (
        Config.short()
        if args.short
        else Config(
            runs=args.runs,
            concurrency=args.concurrency,
            gap=(args.gap[0], args.gap[1]),
            rounds=args.rounds,
        )
    )
    cfg.seed = args.seed
    if args.replicas is not None:
        cfg.replicas = args.replicas
    cfg.keep = args.keep
    cfg.timings = Timings(lease_ttl=args.lease_ttl, lost_after=args.lease_ttl)
    logging.basicConfig(level=logging.WARNING)
    outcome = asyncio.run(run_suite(cfg))
    return 1 if outcome.report.violations else 0


def _replicas(text: str) -> dict[str, int]:
    try:
        return parse_replicas(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


if __name__ == "__main__":
    sys.exit(main())
