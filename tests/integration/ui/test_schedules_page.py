"""The Schedules pages in a real Chromium (issue 29): the list, a schedule's next five
fire times, last runs and events (a skipped fire among them), Pause / Resume /
Trigger for an operator and none for a viewer, and a scheduled run saying so."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from playwright.async_api import Browser, expect

from tests.integration.api.conftest import (  # noqa: F401 (scheduled is a fixture)
    Live,
    deploy,
    scheduled,
    waiting_workflow,
)
from tests.integration.ui.conftest import Ui


@pytest.fixture
async def sui(scheduled: Live, browser: Browser) -> AsyncIterator[Ui]:  # noqa: F811
    """``ui`` over the stack whose timer fires schedules."""
    context = await browser.new_context(viewport={"width": 1400, "height": 900})
    page = await context.new_page()
    page.set_default_timeout(10_000)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield Ui(page, scheduled.gateway, scheduled.stack)
    finally:
        await context.close()
    assert not errors, f"the page raised: {errors}"


async def test_the_schedules_pages(sui: Ui) -> None:
    gw = sui.gateway
    workflow_id = f"ui-sched-{uuid.uuid4().hex[:6]}"
    sid = f"nightly-{uuid.uuid4().hex[:6]}"
    await deploy(gw, waiting_workflow(workflow_id))
    created = await gw.call(
        "POST",
        "/v1/schedules",
        role="operator",
        json={
            "workflow_id": workflow_id,
            "id": sid,
            "cron": "0 2 * * *",
            "timezone": "Europe/Berlin",
        },
    )
    assert created.status == 201, created.body

    await sui.sign_in("operator", "#/schedules")
    await expect(sui.page.locator("nav a.active")).to_have_text("Schedules")
    row = sui.page.locator(f'#schedules tr[data-schedule="{sid}"]')
    await expect(row.locator(".fires")).to_have_text("cron 0 2 * * * (Europe/Berlin)")
    await expect(row.locator(".fired")).to_have_text("0")
    await row.locator("a", has_text=sid).click()

    await expect(sui.page.locator("#schedule-id")).to_have_text(sid)
    await expect(sui.page.locator("#schedule-state")).to_have_text("active")
    fires = sui.page.locator("#next-fires-list li")
    await expect(fires).to_have_count(5)
    for i in range(5):
        await expect(fires.nth(i)).to_contain_text("02:00:00 Europe/Berlin")
    await expect(sui.page.locator("#schedule-runs")).to_contain_text("No runs yet.")

    # trigger: a run, listed under last runs; again: skipped (the run still waits)
    await sui.page.click("#schedule-trigger")
    await expect(sui.page.locator("#message")).to_contain_text("Started run")
    run_link = sui.page.locator("#schedule-runs-table a")
    await expect(run_link).to_have_count(1)
    run_id = await run_link.text_content()
    await sui.page.click("#schedule-trigger")
    await expect(sui.page.locator("#message")).to_contain_text("Not started")
    skipped = sui.page.locator('#schedule-events-table tr[data-kind="skipped"]')
    await expect(skipped).to_have_count(1)
    await expect(skipped.locator(".detail")).to_contain_text(f"run {run_id} still goes")
    await expect(
        sui.page.locator('#schedule-events-table tr[data-kind="triggered"]')
    ).to_have_count(1)

    await sui.page.click("#schedule-pause")
    await expect(sui.page.locator("#schedule-state")).to_have_text("paused")
    await expect(sui.page.locator("#next-fires")).to_contain_text("None: the schedule is paused.")
    await sui.screenshot("schedule", page=True)
    await sui.page.click("#schedule-resume")
    await expect(sui.page.locator("#schedule-state")).to_have_text("active")
    await expect(fires).to_have_count(5)

    # the run says which schedule started it, and links back
    await run_link.click()
    await expect(sui.page.locator("#run-id")).to_have_text(run_id or "")
    scheduled_by = sui.page.locator("#run-schedule")
    await expect(scheduled_by).to_contain_text(f"by {sid} for ")
    await scheduled_by.locator("a").click()
    await expect(sui.page.locator("#schedule-id")).to_have_text(sid)

    # a viewer reads the page and gets no buttons
    await sui.page.click("#signout")
    await sui.sign_in("viewer", f"#/schedules/{sid}")
    await expect(fires).to_have_count(5)
    await expect(sui.page.locator("#schedule-runs-table a")).to_have_count(1)
    await expect(sui.page.locator("#schedule-actions button")).to_have_count(0)
