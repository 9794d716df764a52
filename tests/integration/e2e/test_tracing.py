"""One trace follows a run: from the start, through the outbox and the stream, into the
worker's handler, and back through the coordinator into the engine."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from composer_common.telemetry import inject, tracer
from composer_core.model import RunStatus
from composer_sdk import TaskContext
from tests.integration.e2e.conftest import Stack, eventually


def by_name(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    found = [s for s in spans if s.name == name]
    assert found, f"no span {name!r} among {sorted({s.name for s in spans})}"
    return found[0]


async def test_one_trace_from_start_to_handler_and_back(stack: Stack, spans: Any) -> None:
    await stack.deploy(
        {"id": "traced", "nodes": [{"id": "a", "type": "TASK", "queue": "traced", "spec": {}}]}
    )
    handler_trace: list[int] = []

    async def handler(ctx: TaskContext, input: dict[str, Any]) -> dict[str, Any]:
        with tracer().start_as_current_span("user code") as span:
            handler_trace.append(span.get_span_context().trace_id)
        return {}

    stack.worker({"traced": handler})
    with tracer().start_as_current_span("client request") as root:
        started = await stack.engine.start("traced")
    run = await stack.wait_run(started.run_id)
    assert run.status is RunStatus.SUCCEEDED
    trace_id = root.get_span_context().trace_id

    def in_trace() -> list[ReadableSpan]:
        return [s for s in spans.get_finished_spans() if s.context.trace_id == trace_id]

    # the worker's span ends just after its report made the run finish
    await eventually(
        lambda: any(s.name == "task traced" for s in in_trace()), what="the task span ended"
    )
    finished = in_trace()

    start = by_name(finished, "apply RunStarted")
    task = by_name(finished, "task traced")
    report = by_name(finished, "ReportTaskResults")  # the SDK's batched call
    completed = by_name(finished, "apply NodeCompleted")
    assert start.parent is not None and start.parent.span_id == root.get_span_context().span_id
    assert (
        task.parent is not None and task.parent.span_id == start.context.span_id
    )  # through outbox and stream
    assert (
        report.parent is not None and report.parent.span_id == task.context.span_id
    )  # through gRPC metadata
    assert completed.parent is not None and completed.parent.span_id == report.context.span_id
    assert handler_trace == [trace_id]
    assert completed.attributes is not None and completed.attributes["composer.node_id"] == "a"
    assert completed.attributes["composer.actions"] == 2  # complete the task, finish the run


async def test_one_trace_from_the_http_request_to_the_handler(
    stack: Stack, database_url: str, redis_url: str, spans: Any
) -> None:
    from tests.integration.api.conftest import open_gateway

    await stack.deploy(
        {
            "id": "traced-api",
            "nodes": [{"id": "a", "type": "TASK", "queue": "traced-api", "spec": {}}],
        }
    )

    async def handler(ctx: TaskContext, input: dict[str, Any]) -> dict[str, Any]:
        return {}

    stack.worker({"traced-api": handler})
    async with open_gateway(database_url, redis_url, prefix=stack.prefix) as gw:
        with tracer().start_as_current_span("caller") as caller:
            answer = await gw.call(
                "POST", "/v1/runs", json={"workflow_id": "traced-api"}, headers=dict(inject({}))
            )
        assert answer.status == 201, answer.body
        run = await stack.wait_run(answer.body["run_id"])
    assert run.status is RunStatus.SUCCEEDED
    trace_id = caller.get_span_context().trace_id

    def in_trace() -> list[ReadableSpan]:
        return [s for s in spans.get_finished_spans() if s.context.trace_id == trace_id]

    await eventually(
        lambda: any(s.name == "task traced-api" for s in in_trace()), what="the task span ended"
    )
    finished = in_trace()
    request = by_name(finished, "POST /v1/runs")
    start = by_name(finished, "apply RunStarted")
    task = by_name(finished, "task traced-api")
    assert (
        request.parent is not None and request.parent.span_id == caller.get_span_context().span_id
    )
    assert start.parent is not None and start.parent.span_id == request.context.span_id
    assert task.parent is not None and task.parent.span_id == start.context.span_id
    assert request.attributes is not None and request.attributes["http.response.status_code"] == 201
