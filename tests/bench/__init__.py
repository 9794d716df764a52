"""Benchmarks: ``python -m tests.bench [name …] [options]`` (``make bench``); never part of ``make test``.

Each ``bench_<name>.py`` module exposes ``async def main() -> dict[str, float]``
returning named figures; the runner prints them and keeps them in
bench/results/<UTC timestamp>.json with the machine they were taken on.
Figures are measurements, never assertions. Options the runner does not know
are passed to the modules, which read them with ``options()`` (bench_stack's
``--only``, ``--scale`` …).
"""

_OPTIONS: list[str] = []


def options() -> list[str]:
    """The command-line options the runner left for the benchmark modules."""
    return list(_OPTIONS)


def set_options(argv: list[str]) -> None:
    _OPTIONS[:] = argv
