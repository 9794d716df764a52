"""The web UI end to end: a real Chromium against the gateway and the in-process stack.

The run graph's colours are read from the page (the computed fill of each
node's box) and compared with the task states the API reports, so a test
fails when either the data or what a person sees is wrong.
"""

from __future__ import annotations

import re
from typing import Any

from playwright.async_api import Page, expect

from composer_api_gateway.auth import Role, default_name
from composer_sdk import PermanentError, TaskContext
from tests.integration.api.conftest import TOKENS, deploy, waiting_workflow
from tests.integration.ui.conftest import Ui

#: What each task state looks like (style.css): the fill of a node's box.
FILL = {
    "PENDING": "rgb(224, 231, 255)",
    "QUEUED": "rgb(219, 234, 254)",
    "RUNNING": "rgb(147, 197, 253)",
    "WAITING": "rgb(253, 230, 138)",
    "COMPLETED": "rgb(187, 247, 208)",
    "FAILED": "rgb(254, 202, 202)",
    "SKIPPED": "rgb(229, 231, 235)",
    "CANCELLED": "rgb(229, 231, 235)",
    "NOT_REACHED": "rgb(255, 255, 255)",
}

#: A SWITCH, a FORK into two branches and their JOIN; ``right`` fails unless input.ok.
FORK_JOIN: dict[str, Any] = {
    "id": "ui-fork",
    "name": "Fork and join",
    "output": {"right": "{{tasks.right.output}}"},
    "nodes": [
        {"id": "prepare", "type": "TASK", "queue": "ui", "spec": {"step": "prepare", "ok": True}},
        {"id": "route", "type": "SWITCH"},
        {"id": "refuse", "type": "TASK", "queue": "ui", "spec": {"step": "refuse", "ok": True}},
        {"id": "split", "type": "FORK"},
        {"id": "left", "type": "TASK", "queue": "ui", "spec": {"step": "left", "ok": True}},
        {
            "id": "right",
            "type": "TASK",
            "queue": "ui",
            "spec": {"step": "right", "ok": "{{input.ok}}"},
            "retry": {"max_attempts": 1},
        },
        {"id": "joined", "type": "JOIN"},
        {"id": "report", "type": "TASK", "queue": "ui", "spec": {"step": "report", "ok": True}},
    ],
    "edges": [
        {"from": "prepare", "to": "route"},
        {"from": "route", "to": "split", "condition": "{{input.go}}"},
        {"from": "route", "to": "refuse", "condition": "{{!input.go}}"},
        {"from": "split", "to": "left"},
        {"from": "split", "to": "right"},
        {"from": "left", "to": "joined"},
        {"from": "right", "to": "joined"},
        {"from": "joined", "to": "report"},
    ],
}


async def step(ctx: TaskContext, input: dict[str, Any]) -> dict[str, Any]:
    if input["ok"] is not True:
        raise PermanentError(f"step {input['step']} refused: ok is {input['ok']!r}", code="not-ok")
    return {"step": input["step"], "attempt": ctx.attempt}


async def failed_fork_run(ui: Ui) -> str:
    """A finished, FAILED run of FORK_JOIN: ``right`` failed, the rest of its branch unreached."""
    await deploy(ui.gateway, FORK_JOIN)
    ui.stack.worker({"ui": step})
    started = await ui.gateway.call(
        "POST", "/v1/runs", json={"workflow_id": "ui-fork", "input": {"go": True, "ok": False}}
    )
    run_id: str = started.body["run_id"]
    run = await ui.stack.wait_run(run_id)
    assert run.status == "FAILED", run
    return run_id


async def graph_states(ui: Ui) -> dict[str, tuple[str, str]]:
    """node id → (the state the page drew, the fill it drew it with)."""
    pairs = await ui.page.eval_on_selector_all(
        "#graph g.node",
        "els => els.map(e => [e.dataset.node, e.dataset.state,"
        " getComputedStyle(e.querySelector('rect')).fill])",
    )
    return {node: (state, fill) for node, state, fill in pairs}


async def api_states(ui: Ui, run_id: str) -> dict[str, str]:
    run = (await ui.gateway.call("GET", f"/v1/runs/{run_id}")).body
    tasks = {t["node_id"]: t["state"] for t in run["tasks"]}
    return {n["id"]: tasks.get(n["id"], "NOT_REACHED") for n in FORK_JOIN["nodes"]}


async def test_fork_join_run_graph_colours_error_and_retry(ui: Ui) -> None:
    run_id = await failed_fork_run(ui)
    await ui.sign_in("admin", f"#/runs/{run_id}")
    await expect(ui.page.locator("#run-status")).to_have_text("failed")

    expected = await api_states(ui, run_id)
    assert expected["right"] == "FAILED"
    assert expected["refuse"] == "SKIPPED"
    assert expected["report"] == "NOT_REACHED"
    drawn = await graph_states(ui)
    assert drawn == {node: (state, FILL[state]) for node, state in expected.items()}

    # the SWITCH's decision is on its edges
    taken = ui.page.locator('#graph g.edge[data-from="route"][data-to="split"]')
    untaken = ui.page.locator('#graph g.edge[data-from="route"][data-to="refuse"]')
    await expect(taken).to_have_attribute("data-decision", "taken")
    await expect(taken).to_contain_text("✓ input.go")
    await expect(untaken).to_have_attribute("data-decision", "not-taken")
    await expect(untaken).to_contain_text("✗ !input.go")
    await ui.screenshot("fork-join-failed")

    # the failed node's error, in the side panel
    await ui.page.click('#graph g.node[data-node="right"]')
    await expect(ui.page.locator("#node-title")).to_contain_text("right")
    await expect(ui.page.locator("#node-error")).to_have_text("step right refused: ok is False")
    await expect(ui.page.locator("#node-state")).to_have_text("failed")
    # attempts counted from 1, with the node's allowance, as the CLI shows them
    await expect(ui.page.locator("#node-details .attempts")).to_have_text("1 of 1")
    await ui.screenshot("fork-join-failed-page", page=True)

    # retry from it with a new input, and watch it (and what follows it) turn green
    await ui.page.fill("#retry-input", '{"go": true, "ok": true}')
    await ui.page.click("#retry")
    right = ui.page.locator('#graph g.node[data-node="right"]')
    await expect(right).to_have_attribute("data-state", "COMPLETED", timeout=15_000)
    await expect(ui.page.locator("#run-status")).to_have_text("succeeded", timeout=15_000)
    assert (
        await right.locator("rect").evaluate("r => getComputedStyle(r).fill") == FILL["COMPLETED"]
    )
    expected = await api_states(ui, run_id)
    assert expected["right"] == expected["joined"] == expected["report"] == "COMPLETED"
    assert await graph_states(ui) == {node: (s, FILL[s]) for node, s in expected.items()}
    await ui.screenshot("fork-join-retried")


async def test_live_updates_and_a_signal_from_the_page(ui: Ui) -> None:
    await deploy(ui.gateway, waiting_workflow("ui-waits", event="approve"))
    started = await ui.gateway.call("POST", "/v1/runs", json={"workflow_id": "ui-waits"})
    run_id = started.body["run_id"]
    await ui.sign_in("operator", f"#/runs/{run_id}")
    admin = default_name(TOKENS["admin"], Role.ADMIN)
    operator = default_name(TOKENS["operator"], Role.OPERATOR)

    wait = ui.page.locator('#graph g.node[data-node="wait"]')
    await expect(wait).to_have_attribute("data-state", "WAITING")
    # a waiting node is selected by default, its awaited event shown
    await expect(ui.page.locator("#node-details .awaited")).to_have_text("approve")
    await expect(ui.page.locator("#signal-name")).to_have_value("approve")
    await ui.page.fill("#signal-payload", '{"by": "ui"}')
    await ui.page.click("#signal")
    await expect(ui.page.locator("#message")).to_contain_text("delivered")
    await expect(wait).to_have_attribute("data-state", "COMPLETED")
    await expect(ui.page.locator("#run-status")).to_have_text("succeeded")
    await expect(ui.page.locator("#cancel")).to_have_count(0)  # nothing to cancel any more
    # who did what: the start (the admin token) and the signal (this operator token)
    await expect(ui.page.locator("#token-name")).to_have_text(operator)
    await expect(ui.page.locator(".run-head .started-by")).to_have_text(admin)
    await ui.page.click("#run-signals summary")
    await expect(ui.page.locator("#run-signals .sent-by")).to_have_text([operator])

    # a change made elsewhere shows up without a reload: a second run, cancelled by the API
    second = (await ui.gateway.call("POST", "/v1/runs", json={"workflow_id": "ui-waits"})).body
    await ui.page.goto(f"{ui.gateway.url}/ui/#/runs/{second['run_id']}")
    await expect(ui.page.locator("#run-status")).to_have_text("running")
    await ui.gateway.call("POST", f"/v1/runs/{second['run_id']}/cancel", json={"reason": "test"})
    await expect(ui.page.locator("#run-status")).to_have_text("cancelled")
    await expect(ui.page.locator(".run-head .cancelled-by")).to_have_text(admin)
    # the cancelled wait is drawn cancelled, not failed
    await expect(wait).to_have_attribute("data-state", "CANCELLED")
    assert await wait.locator("rect").evaluate("r => getComputedStyle(r).fill") == FILL["CANCELLED"]
    await expect(ui.page.locator("#node-state")).to_have_text("cancelled")


async def test_runs_list_filters_pages_and_workflow_diff(ui: Ui) -> None:
    await deploy(ui.gateway, waiting_workflow("ui-list", event="a"))
    await deploy(ui.gateway, waiting_workflow("ui-list", event="b"))
    ids = [
        (await ui.gateway.call("POST", "/v1/runs", json={"workflow_id": "ui-list"})).body["run_id"]
        for _ in range(27)
    ]
    await ui.sign_in("admin", "#/runs?workflow_id=ui-list")  # other tests' runs share the database
    rows = ui.page.locator("#runs tbody tr")
    await expect(rows).to_have_count(25)
    await expect(rows.first).to_have_attribute("data-run", ids[-1])  # newest first
    await expect(rows.first.locator(".badge")).to_have_text("running")
    await ui.page.click("#older")
    await expect(rows).to_have_count(2)
    await expect(rows.last).to_have_attribute("data-run", ids[0])
    await ui.page.click("#newer")
    await expect(rows).to_have_count(25)

    await ui.gateway.call("POST", f"/v1/runs/{ids[3]}/cancel", json={})
    await ui.page.select_option("#filter-status", "CANCELLED")
    await ui.page.click("#run-filters button[type=submit]")
    await expect(rows).to_have_count(1)
    await expect(rows.first).to_have_attribute("data-run", ids[3])

    await ui.page.click(f'#runs tr[data-run="{ids[3]}"] a[href^="#/workflows/"]')
    await expect(ui.page.locator("#versions tbody tr")).to_have_count(2)
    deployed = ui.page.locator('#versions tr[data-version="2"] .deployed')
    await expect(deployed).to_have_text("deployed")
    await expect(ui.page.locator('#preview g.node[data-node="wait"]')).to_have_count(1)
    await expect(ui.page.locator("#diff .removed")).to_have_text(re.compile(r"-\s+event: a"))
    await expect(ui.page.locator("#diff .added")).to_have_text(re.compile(r"\+\s+event: b"))
    await ui.page.click('#versions tr[data-version="1"] button.deploy')
    await expect(ui.page.locator('#versions tr[data-version="1"] .deployed')).to_have_count(1)

    # an API error reads as the problem's title and detail
    await ui.page.goto(f"{ui.gateway.url}/ui/#/runs/01890000-0000-7000-8000-000000000000")
    await expect(ui.page.locator("#message")).to_have_text(re.compile(r"^Not Found: .*run"))


async def test_a_viewer_sees_no_action_buttons(ui: Ui) -> None:
    run_id = await failed_fork_run(ui)
    await ui.sign_in("viewer", f"#/runs/{run_id}")
    await ui.page.click('#graph g.node[data-node="right"]')
    # its error, input and output are withheld from a viewer, and the page says so
    await expect(ui.page.locator("#node-details .redacted")).to_have_text(["redacted"] * 3)
    assert await ui.page.locator("#node-error").count() == 0
    # the Graph and Timeline tabs and the graph's zoom only change the view: no button acts
    assert await ui.page.locator("#main button:not([role=tab]):not(.zoom)").count() == 0
    assert await ui.page.locator("#main button[role=tab]").count() == 2
    await ui.page.click("#nav >> text=Workflows")
    await ui.page.click("#workflows >> text=ui-fork")
    await expect(ui.page.locator("#preview g.node")).to_have_count(len(FORK_JOIN["nodes"]))
    assert await ui.page.locator("#main button:not(.zoom)").count() == 0


async def test_a_wrong_token_is_refused_with_a_clear_message(ui: Ui) -> None:
    await ui.open()
    await ui.page.fill("#token", "not-a-token")
    await ui.page.click("#signin button[type=submit]")
    await expect(ui.page.locator("#signin-error")).to_have_text(
        "That token was refused: unknown API token"
    )
    assert await ui.page.evaluate("sessionStorage.getItem('composer.token')") is None
    # a token refused later (rotated away) brings the sign-in back with the reason
    await ui.sign_in("viewer")
    await ui.page.evaluate("sessionStorage.setItem('composer.token', 'rotated-away')")
    await ui.page.click("#nav >> text=Workflows")
    await expect(ui.page.locator("#signin-error")).to_contain_text("unknown API token")


async def test_a_run_link_opens_the_run_after_sign_in_and_remember_me_spans_tabs(ui: Ui) -> None:
    await deploy(ui.gateway, waiting_workflow("ui-link", event="go"))
    run_id = (await ui.gateway.call("POST", "/v1/runs", json={"workflow_id": "ui-link"})).body[
        "run_id"
    ]
    link = f"{ui.gateway.url}/ui/#/runs/{run_id}"
    await ui.page.goto(link)
    await ui.page.fill("#token", TOKENS["operator"])
    await ui.page.check("#remember")
    await ui.page.click("#signin button[type=submit]")
    # the run the link named, not the runs list
    await expect(ui.page.locator("#run-status")).to_have_text("running")
    await expect(ui.page.locator("#runs")).to_have_count(0)
    assert ui.page.url == link
    stored = "[localStorage.getItem('composer.token'), sessionStorage.getItem('composer.token')]"
    assert await ui.page.evaluate(stored) == [TOKENS["operator"], None]

    # remembered: another tab opens the link signed in
    errors: list[str] = []

    async def tab() -> Page:
        page = await ui.page.context.new_page()
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        return page

    other = await tab()
    await other.goto(link)
    await expect(other.locator("#run-status")).to_have_text("running")
    await expect(other.locator("#role")).to_have_text("operator")
    # signing out forgets it, for every tab opened afterwards
    await other.click("#signout")
    await expect(other.locator("#signin")).to_be_visible()
    assert await other.evaluate(stored) == [None, None]
    third = await tab()
    await third.goto(link)
    await expect(third.locator("#signin")).to_be_visible()
    assert await third.locator("#remember").is_checked() is False

    # not remembered (the default): this tab only
    await third.fill("#token", TOKENS["viewer"])
    await third.click("#signin button[type=submit]")
    await expect(third.locator("#run-status")).to_have_text("running")
    assert await third.evaluate(stored) == [None, TOKENS["viewer"]]
    fourth = await tab()
    await fourth.goto(link)
    await expect(fourth.locator("#signin")).to_be_visible()
    assert not errors, f"a tab raised: {errors}"
