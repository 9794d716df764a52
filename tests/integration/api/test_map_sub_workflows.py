"""A MAP whose inner node is a SUB_WORKFLOW, through the API with the real services:
one child run per item (its input rendered with ``item`` and ``index``), at most
``max_parallel`` children at once, the MAP's output the children's outputs in item
order; each child's ``parent`` names the MAP node and its item's task. Under
``fail_fast`` a failing child fails the MAP and cancels the other children; under
``continue`` its entry is null (docs/architecture.md §2, "MAP")."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from composer_sdk import TaskContext
from tests.integration.api.conftest import Live, deploy
from tests.integration.api.test_sub_workflows import get, result
from tests.integration.waits import until

#: The child: one TASK node; its output names the line it handled.
LINE = {
    "id": "ms-line",
    "output": {"sku": "{{ input.sku }}", "done": "{{ tasks.work.output }}"},
    "nodes": [
        {
            "id": "work",
            "type": "TASK",
            "queue": "ms-lines",
            "spec": {"sku": "{{ input.sku }}", "index": "{{ input.index }}"},
            "retry": {"max_attempts": 1},
        }
    ],
}


def order(workflow_id: str, *, max_parallel: int = 10, on_failure: str = "fail_fast") -> Any:
    return {
        "id": workflow_id,
        "output": {"lines": "{{ tasks.lines.output }}"},
        "nodes": [
            {
                "id": "lines",
                "type": "MAP",
                "spec": {
                    "items": "{{ input.lines }}",
                    "max_parallel": max_parallel,
                    "on_failure": on_failure,
                    "node": {
                        "type": "SUB_WORKFLOW",
                        "spec": {
                            "workflow": "ms-line",
                            "input": {"sku": "{{ item.sku }}", "index": "{{ index }}"},
                        },
                    },
                },
            }
        ],
    }


async def start(live: Live, workflow_id: str, skus: list[str]) -> str:
    answer = await live.gateway.call(
        "POST",
        "/v1/runs",
        role="operator",
        json={"workflow_id": workflow_id, "input": {"lines": [{"sku": s} for s in skus]}},
    )
    assert answer.status == 201, answer.body
    run_id: str = answer.body["run_id"]
    return run_id


async def items_of(live: Live, run_id: str) -> list[dict[str, Any]]:
    page = await live.gateway.call(
        "GET", f"/v1/runs/{run_id}/tasks/lines/items", role="operator", params={"limit": "50"}
    )
    assert page.status == 200, page.body
    items: list[dict[str, Any]] = page.body["items"]
    return items


async def test_one_child_per_item_at_most_max_parallel_outputs_in_item_order(live: Live) -> None:
    await deploy(live.gateway, LINE)
    await deploy(live.gateway, order("ms-order", max_parallel=2))

    async def work(ctx: TaskContext, input: dict[str, Any]) -> Any:
        await asyncio.sleep(0.2)  # long enough for the children to overlap
        return {"handled": input["sku"], "index": input["index"]}

    live.stack.worker({"ms-lines": work}, concurrency=5)
    skus = ["a", "b", "c", "d", "e"]
    parent = await start(live, "ms-order", skus)

    done = await result(live, parent)

    assert done["status"] == "SUCCEEDED", done
    assert done["output"] == {
        "lines": [{"sku": s, "done": {"handled": s, "index": i}} for i, s in enumerate(skus)]
    }
    children = (await get(live, parent))["children"]
    assert len(children) == 5  # exactly one per item
    assert {c["node_id"] for c in children} == {"lines"}
    assert {c["status"] for c in children} == {"SUCCEEDED"}
    items = {i["task_id"]: i["item"] for i in await items_of(live, parent)}
    by_index: dict[int, dict[str, Any]] = {}
    for summary in children:
        child = await get(live, summary["run_id"])
        ref = child["parent"]
        assert (ref["run_id"], ref["node_id"], ref["attempt"]) == (parent, "lines", 0)
        index = items[ref["task_id"]]  # the item task the child's end came back to
        assert child["input"] == {"sku": skus[index], "index": index}
        by_index[index] = child
    assert sorted(by_index) == [0, 1, 2, 3, 4]
    # never more than 2 children going at once: from their run times
    spans = [(c["created_at"], c["completed_at"]) for c in children]
    for start_at, _ in spans:
        going = [1 for s, e in spans if s <= start_at < e]
        assert len(going) <= 2, spans


async def test_a_failing_child_under_fail_fast_fails_the_map_and_cancels_the_others(
    live: Live,
) -> None:
    await deploy(live.gateway, LINE)
    await deploy(live.gateway, order("ms-fast"))
    held = asyncio.Event()  # never set: the other lines wait until they are cancelled
    others_going = asyncio.Event()
    going: set[str] = set()

    async def work(ctx: TaskContext, input: dict[str, Any]) -> Any:
        going.add(input["sku"])
        if len(going) == 3:
            others_going.set()
        if input["sku"] == "bad":
            await others_going.wait()  # fail only once the others are under way
            raise ValueError("no stock for bad")
        await held.wait()
        return {}

    live.stack.worker({"ms-lines": work}, concurrency=5)
    parent = await start(live, "ms-fast", ["slow-1", "bad", "slow-2"])

    done = await result(live, parent)

    assert done["status"] == "FAILED", done
    assert "item 1 failed" in done["error"] and "no stock for bad" in done["error"]

    async def settled() -> bool:
        kids = (await get(live, parent))["children"]
        return all(k["status"] in ("FAILED", "CANCELLED") for k in kids)

    await until(settled, timeout=20, what="every child of the MAP finished")
    children = (await get(live, parent))["children"]
    statuses = {(await get(live, c["run_id"]))["input"]["sku"]: c["status"] for c in children}
    assert statuses == {"bad": "FAILED", "slow-1": "CANCELLED", "slow-2": "CANCELLED"}
    items = sorted(await items_of(live, parent), key=lambda i: i["item"])
    assert [i["state"] for i in items] == ["CANCELLED", "FAILED", "CANCELLED"]


async def test_under_continue_a_failed_child_is_null_in_the_output(live: Live) -> None:
    await deploy(live.gateway, LINE)
    await deploy(live.gateway, order("ms-continue", on_failure="continue"))

    async def work(ctx: TaskContext, input: dict[str, Any]) -> Any:
        if input["sku"] == "bad":
            raise ValueError("no stock for bad")
        return {"handled": input["sku"]}

    live.stack.worker({"ms-lines": work}, concurrency=3)
    parent = await start(live, "ms-continue", ["a", "bad", "c"])

    done = await result(live, parent)

    assert done["status"] == "SUCCEEDED", done
    assert done["output"] == {
        "lines": [
            {"sku": "a", "done": {"handled": "a"}},
            None,
            {"sku": "c", "done": {"handled": "c"}},
        ]
    }
    children = (await get(live, parent))["children"]
    assert sorted(c["status"] for c in children) == ["FAILED", "SUCCEEDED", "SUCCEEDED"]


#: A child that waits for the signal ``go``: it runs until told, or cancelled.
WAITING_LINE = {
    "id": "ms-waiting-line",
    "nodes": [{"id": "w", "type": "WAIT_FOR_EVENT", "spec": {"event": "go"}}],
}


@pytest.mark.parametrize("on_parent_cancel", ["cancel", "abandon"])
async def test_a_run_s_cancel_reaches_its_map_s_children_by_their_on_parent_cancel(
    live: Live, on_parent_cancel: str
) -> None:
    await deploy(live.gateway, WAITING_LINE)
    definition = order("ms-cancelled", max_parallel=2)
    inner = definition["nodes"][0]["spec"]["node"]
    inner["spec"] = {"workflow": "ms-waiting-line", "on_parent_cancel": on_parent_cancel}
    await deploy(live.gateway, definition)
    parent = await start(live, "ms-cancelled", ["a", "b", "c"])

    async def two_running() -> bool:
        kids = (await get(live, parent))["children"]
        statuses = [(await get(live, k["run_id"]))["status"] for k in kids]
        return statuses == ["RUNNING", "RUNNING"]

    await until(two_running, timeout=20, what="the first 2 children running")
    answer = await live.gateway.call(
        "POST", f"/v1/runs/{parent}/cancel", role="operator", json={"reason": "withdrawn"}
    )
    assert answer.status in (200, 202), answer.body

    assert (await result(live, parent))["status"] == "CANCELLED"
    children = (await get(live, parent))["children"]
    assert len(children) == 2  # the third item never started one
    for child in children:
        if on_parent_cancel == "cancel":
            done = await result(live, child["run_id"])
            assert done["status"] == "CANCELLED", done
            assert f"its parent run {parent} was cancelled: withdrawn" in done["error"]
        else:
            assert (await get(live, child["run_id"]))["status"] == "RUNNING"
    assert [i["state"] for i in await items_of(live, parent)] == ["CANCELLED"] * 3


async def test_a_child_that_cannot_start_fails_its_item_saying_why(live: Live) -> None:
    definition = order("ms-lost")
    definition["nodes"][0]["spec"]["node"]["spec"]["workflow"] = "ms-nowhere"
    await deploy(live.gateway, definition)

    done = await result(live, await start(live, "ms-lost", ["a", "b"]))

    assert done["status"] == "FAILED", done
    assert "workflow 'ms-nowhere' does not exist or has no deployed version" in done["error"]
    assert (await get(live, done["run_id"]))["children"] == []
