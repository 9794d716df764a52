"""SUB_WORKFLOW through the API, with the timer's loop running: a parent gets its
child's output, a child's failure fails the node with the child's run id (a retry of
the node starts a new child), a cancel reaches children and grandchildren but an
abandoned child, and nesting stops at the depth limit with an error naming it.
GET /v1/runs/{id} links both ways: ``parent`` on a child, ``children`` on a parent.
(Exactly one child per attempt under a kill: tests/integration/engine/test_sub_workflows.py.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.integration.api.conftest import Live, deploy, open_gateway
from tests.integration.e2e.conftest import open_stack
from tests.integration.waits import until

#: Waits for the signal ``go`` (its payload is its output), or fails after ``timeout``.
LEAF = {
    "id": "sw-leaf",
    "output": {"got": "{{tasks.w.output}}"},
    "nodes": [{"id": "w", "type": "WAIT_FOR_EVENT", "spec": {"event": "go"}}],
}
FAILING_LEAF = {
    "id": "sw-failing-leaf",
    "nodes": [{"id": "w", "type": "WAIT_FOR_EVENT", "spec": {"event": "go", "timeout_seconds": 1}}],
}


def calling(workflow_id: str, child: str, **node: Any) -> dict[str, Any]:
    spec = {"workflow": child, "input": {"order": "{{input.order}}"}}
    return {
        "id": workflow_id,
        "output": {"child": "{{tasks.call.output}}"},
        "nodes": [{"id": "call", "type": "SUB_WORKFLOW", "spec": spec, **node}],
    }


@pytest.fixture
async def timed(database_url: str, redis_url: str) -> AsyncIterator[Live]:
    """The gateway beside the stack with its timer loop; children nest 3 deep at most."""
    async with (
        open_stack(database_url, redis_url, timer=True) as stack,
        open_gateway(database_url, redis_url, prefix=stack.prefix, max_child_depth=3) as gw,
    ):
        yield Live(gw, stack)


async def start(live: Live, workflow_id: str, input: Any = None) -> str:
    answer = await live.gateway.call(
        "POST",
        "/v1/runs",
        role="operator",
        json={"workflow_id": workflow_id, "input": input or {"order": "o-1"}},
    )
    assert answer.status == 201, answer.body
    run_id: str = answer.body["run_id"]
    return run_id


async def get(live: Live, run_id: str) -> dict[str, Any]:
    answer = await live.gateway.call("GET", f"/v1/runs/{run_id}", role="operator")
    assert answer.status == 200, answer.body
    body: dict[str, Any] = answer.body
    return body


async def result(live: Live, run_id: str) -> dict[str, Any]:
    answer = await live.gateway.call(
        "GET", f"/v1/runs/{run_id}/result", role="operator", params={"timeout": "20"}
    )
    assert answer.status == 200, answer.body
    body: dict[str, Any] = answer.body
    return body


async def children_of(live: Live, run_id: str, n: int, status: str = "RUNNING") -> list[Any]:
    """Wait until the run has ``n`` children, the last one ``status``."""

    async def there() -> bool:
        kids = (await get(live, run_id))["children"]
        return len(kids) == n and kids[-1]["status"] == status

    await until(there, timeout=20, what=f"{n} children of {run_id}, the last {status}")
    kids: list[Any] = (await get(live, run_id))["children"]
    return kids


async def signal(live: Live, run_id: str, payload: Any) -> None:
    answer = await live.gateway.call(
        "POST", f"/v1/runs/{run_id}/signals/go", role="operator", json=payload
    )
    assert answer.status in (200, 202), answer.body


async def test_the_parent_succeeds_with_its_child_s_output_and_both_link(timed: Live) -> None:
    await deploy(timed.gateway, LEAF)
    await deploy(timed.gateway, calling("sw-parent", "sw-leaf"))
    parent = await start(timed, "sw-parent")

    (child,) = await children_of(timed, parent, 1)
    assert (child["workflow_id"], child["node_id"], child["attempt"]) == ("sw-leaf", "call", 0)
    child_run = await get(timed, child["run_id"])
    assert child_run["input"] == {"order": "o-1"}
    call = next(t for t in (await get(timed, parent))["tasks"] if t["node_id"] == "call")
    assert call["state"] == "RUNNING"
    assert child_run["parent"] == {
        "run_id": parent,
        "node_id": "call",
        "task_id": call["task_id"],
        "attempt": 0,
    }

    await signal(timed, child["run_id"], {"shipped": True})

    done = await result(timed, parent)
    assert done["status"] == "SUCCEEDED", done
    assert done["output"] == {"child": {"got": {"shipped": True}}}
    history = await timed.gateway.call("GET", f"/v1/runs/{parent}/history", role="operator")
    kinds = {h["kind"]: h for h in history.body["entries"]}
    assert kinds["child.started"]["detail"]["child_run_id"] == child["run_id"]
    assert kinds["child.finished"]["detail"] == {
        "child_run_id": child["run_id"],
        "status": "SUCCEEDED",
    }


async def test_a_failing_child_fails_the_node_with_its_run_id_after_a_retry_s_new_child(
    timed: Live,
) -> None:
    await deploy(timed.gateway, FAILING_LEAF)
    node = {"retry": {"max_attempts": 2, "initial_seconds": 0}}
    await deploy(timed.gateway, calling("sw-retrying", "sw-failing-leaf", **node))
    parent = await start(timed, "sw-retrying")

    done = await result(timed, parent)

    assert done["status"] == "FAILED", done
    first, second = (await get(timed, parent))["children"]
    assert (first["attempt"], second["attempt"]) == (0, 1)
    assert first["run_id"] != second["run_id"]
    assert first["status"] == second["status"] == "FAILED"
    assert f"child run {second['run_id']} FAILED" in done["error"]
    assert "timed out waiting for event 'go'" in done["error"]


async def test_a_cancel_reaches_children_and_grandchildren_but_not_an_abandoned_child(
    timed: Live,
) -> None:
    await deploy(timed.gateway, LEAF)
    await deploy(timed.gateway, calling("sw-mid", "sw-leaf"))
    top = {
        "id": "sw-top",
        "nodes": [
            {"id": "f", "type": "FORK"},
            {
                "id": "mid",
                "type": "SUB_WORKFLOW",
                "spec": {"workflow": "sw-mid", "input": {"order": "o-2"}},
            },
            {
                "id": "loner",
                "type": "SUB_WORKFLOW",
                "spec": {"workflow": "sw-leaf", "on_parent_cancel": "abandon"},
            },
        ],
        "edges": [{"from": "f", "to": "mid"}, {"from": "f", "to": "loner"}],
    }
    await deploy(timed.gateway, top)
    run_id = await start(timed, "sw-top")
    kids = await children_of(timed, run_id, 2)
    await until(lambda: _all_running(timed, kids), timeout=20, what="both children running")
    by_node = {k["node_id"]: k for k in (await get(timed, run_id))["children"]}
    assert by_node["loner"]["on_parent_cancel"] == "abandon"
    (grandchild,) = await children_of(timed, by_node["mid"]["run_id"], 1)

    answer = await timed.gateway.call(
        "POST", f"/v1/runs/{run_id}/cancel", role="operator", json={"reason": "withdrawn"}
    )
    assert answer.status in (200, 202), answer.body

    for descendant in (by_node["mid"]["run_id"], grandchild["run_id"]):
        done = await result(timed, descendant)
        assert done["status"] == "CANCELLED", done
        assert "withdrawn" in done["error"]
    loner = await get(timed, by_node["loner"]["run_id"])
    assert loner["status"] == "RUNNING"
    await signal(timed, loner["run_id"], {"late": 1})  # it goes on, on its own
    assert (await result(timed, loner["run_id"]))["status"] == "SUCCEEDED"
    assert (await get(timed, run_id))["status"] == "CANCELLED"


async def _all_running(live: Live, kids: list[Any]) -> bool:
    for kid in kids:
        if (await get(live, kid["run_id"]))["status"] != "RUNNING":
            return False
    return True


async def test_nesting_past_the_depth_limit_fails_with_the_depth_and_the_limit(
    timed: Live,
) -> None:
    await deploy(timed.gateway, calling("sw-itself", "sw-itself"))
    run_id = await start(timed, "sw-itself")

    done = await result(timed, run_id)

    assert done["status"] == "FAILED", done
    assert "would be at depth 4 of nested runs, over the limit of 3" in done["error"]
    assert "COMPOSER_MAX_CHILD_DEPTH" in done["error"]


async def test_an_unknown_workflow_fails_the_node_saying_so(timed: Live) -> None:
    await deploy(timed.gateway, calling("sw-lost", "sw-nowhere"))
    done = await result(timed, await start(timed, "sw-lost"))
    assert done["status"] == "FAILED", done
    assert "workflow 'sw-nowhere' does not exist or has no deployed version" in done["error"]
    assert (await get(timed, done["run_id"]))["children"] == []
