"""The short chaos variant in ``make test``: about 100 runs, one fault of each kind,
two replicas of every service (two gateways, the load spread over them), every
check of the full suite (``make chaos``)."""

from __future__ import annotations

import asyncio
import os

import pytest

from tests.chaos.suite import Config, have_servers, run_suite


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_short_chaos_run_keeps_every_promise() -> None:
    missing = have_servers()
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"the chaos suite cannot run: {missing} (CI is set)", pytrace=False)
        pytest.skip(f"the chaos suite cannot run: {missing}")

    outcome = asyncio.run(run_suite(Config.short()))

    assert not outcome.report.violations, (
        f"{outcome.report.render()}\nlogs and ledger: {outcome.workdir}"
    )
