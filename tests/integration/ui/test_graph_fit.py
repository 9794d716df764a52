"""The run graph fits any DAG (issue 31: a 9-node graph was clipped on the right at
1400 px, its text about 9 px, "attempt 2 of 3" spilled out of its box and edge
conditions were cut from the left, hiding the node they read). Checked in a real
Chromium on a 30-node workflow: what is measured is what the page renders."""

from __future__ import annotations

from typing import Any

from playwright.async_api import expect

from composer_sdk import TaskContext, TaskFailed
from tests.integration.api.conftest import deploy
from tests.integration.ui.conftest import Ui

LONG_CONDITION = "{{tasks.fetch_customer_order.output.total_amount_in_cents > 100000}}"


def thirty_nodes() -> dict[str, Any]:
    """fetch (retried once) → a SWITCH on long conditions → review or approve → four
    chains of six steps in parallel → their JOIN → notify: 30 nodes, 33 edges."""
    nodes: list[dict[str, Any]] = [
        {
            "id": "fetch_customer_order",
            "type": "TASK",
            "queue": "fit-flaky",
            "retry": {"max_attempts": 3, "initial_seconds": 0.1},
        },
        {"id": "route_by_amount", "type": "SWITCH"},
        {"id": "manual_review_of_large_order", "type": "TASK", "queue": "fit"},
        {"id": "auto_approve", "type": "TASK", "queue": "fit"},
        {"id": "fan_out", "type": "FORK"},
    ]
    edges: list[dict[str, Any]] = [
        {"from": "fetch_customer_order", "to": "route_by_amount"},
        {
            "from": "route_by_amount",
            "to": "manual_review_of_large_order",
            "condition": LONG_CONDITION,
        },
        {
            "from": "route_by_amount",
            "to": "auto_approve",
            "condition": "{{tasks.fetch_customer_order.output.total_amount_in_cents <= 100000}}",
        },
        {"from": "auto_approve", "to": "fan_out"},
    ]
    for chain in ("stock", "invoice", "shipping", "loyalty"):
        previous = "fan_out"
        for n in range(1, 7):
            node = f"{chain}_step_{n}"
            nodes.append({"id": node, "type": "TASK", "queue": "fit"})
            edges.append({"from": previous, "to": node})
            previous = node
        edges.append({"from": previous, "to": "all_done"})
    nodes += [{"id": "all_done", "type": "JOIN"}]
    assert len(nodes) == 30
    return {"id": "fit-thirty", "name": "Thirty nodes", "nodes": nodes, "edges": edges}


async def flaky(ctx: TaskContext, input: Any) -> dict[str, Any]:
    if ctx.attempt == 0:
        raise TaskFailed("not yet")
    return {"total_amount_in_cents": 4200}


async def quick(ctx: TaskContext, input: Any) -> dict[str, Any]:
    return {}


#: For each node: its box, and each of its texts' boxes and rendered font sizes; for each
#: edge label: its box, its text, and its lines' boxes. All in CSS pixels as rendered.
MEASURE = """
pane => {
  const svg = pane.querySelector('svg');
  const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
  const box = (el) => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  const size = (el) => parseFloat(getComputedStyle(el).fontSize) * scale;
  return {
    scale,
    pane: box(pane),
    paneWidth: pane.clientWidth,
    svgWidth: svg.getBoundingClientRect().width,
    nodes: [...svg.querySelectorAll('g.node')].map((g) => ({
      id: g.dataset.node,
      rect: box(g.querySelector('rect')),
      texts: [...g.querySelectorAll('text')].map((t) => ({ text: t.textContent, box: box(t), size: size(t) })),
    })),
    labels: [...svg.querySelectorAll('g.edge-label')].map((g) => ({
      rect: box(g.querySelector('rect')),
      text: [...g.querySelectorAll('tspan')].map((t) => t.textContent).join(' '),
      title: g.querySelector('title').textContent,
      lines: [...g.querySelectorAll('tspan')].map((t) => ({ box: box(t), size: size(t) })),
    })),
  };
}
"""


def inside(inner: list[float], outer: list[float], slack: float = 0.75) -> bool:
    return (
        inner[0] >= outer[0] - slack
        and inner[1] >= outer[1] - slack
        and inner[2] <= outer[2] + slack
        and inner[3] <= outer[3] + slack
    )


async def test_a_thirty_node_run_graph_fits_reads_and_zooms(ui: Ui) -> None:
    await deploy(ui.gateway, thirty_nodes())
    ui.stack.worker({"fit-flaky": flaky, "fit": quick})
    started = await ui.gateway.call("POST", "/v1/runs", json={"workflow_id": "fit-thirty"})
    run_id: str = started.body["run_id"]
    run = await ui.stack.wait_run(run_id, timeout=60)
    assert run.status == "SUCCEEDED", run

    await ui.sign_in("admin", f"#/runs/{run_id}")
    await expect(ui.page.locator("#run-status")).to_have_text("succeeded")
    await expect(ui.page.locator("#graph g.node")).to_have_count(30)
    shown = await ui.page.eval_on_selector("#graph", MEASURE)
    await ui.screenshot("graph-thirty-nodes", page=True)

    # fit to the pane's width: nothing is clipped on the right
    assert shown["svgWidth"] <= shown["paneWidth"] + 1, shown["svgWidth"]
    for node in shown["nodes"]:
        assert inside(node["rect"], shown["pane"], 1) or node["rect"][3] > shown["pane"][3], node
        for text in node["texts"]:
            # readable, and inside its box ("attempt 2 of 3" too)
            assert text["size"] >= 12, (node["id"], text)
            assert inside(text["box"], node["rect"]), (node["id"], text, node["rect"])
    fetch = next(n for n in shown["nodes"] if n["id"] == "fetch_customer_order")
    assert [t["text"] for t in fetch["texts"]] == [
        "fetch_customer_order",
        "TASK · completed",
        "attempt 2 of 3",
    ]
    # a condition starts where it starts: the node it reads is never cut off
    assert len(shown["labels"]) == 2
    for label in shown["labels"]:
        bare = label["title"].removeprefix("{{").removesuffix("}}")
        text = label["text"].lstrip("✓✗ ")
        assert text.startswith("tasks.fetch_customer_order."), label
        assert text.replace(" ", "") == bare.replace(" ", ""), label  # whole, wrapped
        for line in label["lines"]:
            assert line["size"] >= 12 and inside(line["box"], label["rect"]), label

    # zoom in and out, back to the fit; the graph pans where it is wider than the pane
    level = ui.page.locator("#graph-zoom")
    fitted = await level.text_content()
    assert fitted is not None and fitted.endswith("(fit)")
    await ui.page.click("#graph-zoom-in")
    await ui.page.click("#graph-zoom-in")
    zoomed = await ui.page.eval_on_selector("#graph", MEASURE)
    assert zoomed["scale"] > shown["scale"] * 1.5
    assert zoomed["svgWidth"] > zoomed["paneWidth"]  # wider than the pane now: it pans
    left = await ui.page.eval_on_selector(
        "#graph", "p => { p.scrollLeft = 200; return p.scrollLeft; }"
    )
    assert left > 0
    await ui.page.click("#graph-zoom-out")
    await ui.page.click("#graph-fit")
    await expect(level).to_have_text(fitted)

    # one time format: a 24-hour clock everywhere on the page
    await ui.page.click("#tab-timeline")
    await expect(ui.page.locator("#timeline")).to_be_visible()
    page_text = await ui.page.text_content("body") or ""
    assert " AM" not in page_text and " PM" not in page_text, page_text[:500]
