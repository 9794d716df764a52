"""The run page's Timeline tab and a node's attempts, in a real Chromium.

A fork run fails on ``right`` and is retried from it through the API: the
timeline lists the failed attempt (with its error) and the retry in words, a
node's name in it selects that node, and the node panel lists each attempt.
"""

from __future__ import annotations

from playwright.async_api import expect

from composer_api_gateway.auth import Role, default_name
from tests.integration.api.conftest import TOKENS
from tests.integration.ui.conftest import Ui
from tests.integration.ui.test_ui import failed_fork_run


async def test_the_timeline_keeps_a_failed_attempt_after_a_retry(ui: Ui) -> None:
    run_id = await failed_fork_run(ui)
    retried = await ui.gateway.call(
        "POST",
        f"/v1/runs/{run_id}/retry",
        json={"from_node": "right", "input": {"go": True, "ok": True}},
    )
    assert retried.status == 200, retried.body
    run = await ui.stack.wait_run(run_id)
    assert run.status == "SUCCEEDED", run
    admin = default_name(TOKENS["admin"], Role.ADMIN)

    await ui.sign_in("viewer", f"#/runs/{run_id}")
    await expect(ui.page.locator("#run-status")).to_have_text("succeeded")
    await expect(ui.page.locator("#timeline-pane")).to_be_hidden()
    await ui.page.click("#tab-timeline")
    await expect(ui.page.locator("#graph")).to_be_hidden()
    rows = ui.page.locator("#timeline tbody tr")
    await expect(rows.first).to_contain_text(f"run started by {admin} on v1")
    # the failed attempt stays, and the viewer is told its error is withheld
    failed = ui.page.locator('#timeline tr[data-kind="task.failed"]')
    await expect(failed).to_have_count(1)
    await expect(failed).to_contain_text("right")
    await expect(failed).to_contain_text("attempt 1 failed")
    await expect(failed).to_contain_text("redacted")
    await expect(ui.page.locator('#timeline tr[data-kind="run.retried"]')).to_contain_text(
        f"run retried from right by {admin} on v1"
    )
    finished = ui.page.locator('#timeline tr[data-kind="run.finished"]')
    await expect(finished).to_have_count(2)
    await expect(finished.last).to_contain_text("run succeeded")
    await ui.screenshot("run-timeline", page=True)

    # a node in the timeline opens it on the graph, with its attempts listed
    await failed.locator("a").click()
    await expect(ui.page.locator("#graph")).to_be_visible()
    await expect(ui.page.locator("#node-title")).to_contain_text("right")
    attempts = ui.page.locator("#node-attempts li")
    await expect(attempts).to_have_count(2)
    await expect(attempts.first).to_contain_text("attempt 1 failed")
    await expect(attempts.last).to_contain_text("attempt 1 completed")


async def test_an_operator_reads_the_failed_attempts_error(ui: Ui) -> None:
    run_id = await failed_fork_run(ui)
    await ui.sign_in("operator", f"#/runs/{run_id}")
    await ui.page.click("#tab-timeline")
    failed = ui.page.locator('#timeline tr[data-kind="task.failed"]')
    await expect(failed).to_contain_text("attempt 1 failed after")
    await expect(failed).to_contain_text("step right refused: ok is False")
