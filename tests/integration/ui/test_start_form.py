"""The workflow page's start form with an input_schema: it lists the schema's fields,
fills in a skeleton of them, and shows each problem of a refused input at its JSON
path; a good input starts the run and opens it."""

from __future__ import annotations

import re

from playwright.async_api import expect

from tests.integration.api.conftest import deploy
from tests.integration.ui.conftest import Ui

SCHEMA = {
    "type": "object",
    "required": ["order_id", "qty"],
    "properties": {
        "order_id": {"type": "string", "description": "the shop's order id"},
        "qty": {"type": "integer", "minimum": 1},
        "express": {"type": "boolean", "default": False},
    },
}


async def test_the_start_form_shows_the_schema_and_the_problems_of_a_bad_input(ui: Ui) -> None:
    await deploy(
        ui.gateway,
        {
            "id": "ui-schema",
            "input_schema": SCHEMA,
            "nodes": [{"id": "wait", "type": "WAIT_FOR_EVENT", "spec": {"event": "go"}}],
        },
    )
    await ui.sign_in("operator", "#/workflows/ui-schema")

    fields = ui.page.locator("#start-schema tbody tr")
    await expect(fields).to_have_count(3)
    order_id = ui.page.locator('#start-schema tr[data-field="order_id"]')
    await expect(order_id).to_contain_text("string")
    await expect(order_id).to_contain_text("required")
    await expect(order_id).to_contain_text("the shop's order id")
    await expect(ui.page.locator('#start-schema tr[data-field="express"]')).to_contain_text(
        "optional"
    )

    await ui.page.click("#start-skeleton")
    skeleton = await ui.page.input_value("#start-input")
    assert re.sub(r"\s", "", skeleton) == '{"order_id":"","qty":0,"express":false}'

    # the skeleton's qty 0 is under the minimum: refused, with the problem at its path
    await ui.page.click("#start")
    problems = ui.page.locator("#start-problems li")
    await expect(problems).to_have_count(1)
    await expect(problems.first).to_have_text("$.qty 0 is less than the minimum of 1")
    await expect(ui.page.locator("#message")).to_contain_text("input_schema")

    await ui.page.fill("#start-input", '{"qty": "two"}')
    await ui.page.click("#start")
    await expect(problems).to_have_text(
        ["$ 'order_id' is a required property", "$.qty 'two' is not of type 'integer'"]
    )
    await ui.screenshot("start-form-problems", page=True)

    await ui.page.fill("#start-input", '{"order_id": "A-1", "qty": 2}')
    await ui.page.click("#start")
    await expect(ui.page).to_have_url(re.compile(r"#/runs/[0-9a-f-]{36}$"))
    await expect(ui.page.locator("#run-status")).to_have_text("running")
