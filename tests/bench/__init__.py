"""Benchmarks: ``python -m tests.bench [name …]`` (``make bench``); never part of ``make test``.

Each ``bench_<name>.py`` module exposes ``async def main() -> dict[str, float]``
returning named figures; the runner prints them and keeps them in
bench/results/<UTC timestamp>.json with the machine they were taken on.
Figures are measurements, never assertions.
"""
