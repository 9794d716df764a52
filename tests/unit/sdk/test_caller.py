"""ctx.caller: the calling context a lease carries, as the handler sees it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from composer_sdk import Caller, TaskContext, run_handler_async
from composer_sdk._handler import caller_of


def test_the_lease_document_becomes_a_typed_caller() -> None:
    document = {"caller": {"name": "ci", "role": "operator"}, "metadata": {"ticket": "OPS-1"}}
    caller = caller_of(json.dumps(document))
    assert caller == Caller("ci", "operator", {"ticket": "OPS-1"})
    assert caller is not None and caller.document() == document
    with pytest.raises(TypeError):
        caller.metadata["ticket"] = "changed"  # type: ignore[index]


def test_a_plain_context_is_parsed_once_and_a_nested_one_for_each_task() -> None:
    plain = json.dumps({"caller": {"name": "ci", "role": "operator"}, "metadata": {"n": 1}})
    assert caller_of(plain) is caller_of(plain)
    nested = json.dumps({"caller": {"name": "ci", "role": "operator"}, "metadata": {"l": [1]}})
    first = caller_of(nested)
    assert first is not None
    first.metadata["l"].append(2)  # a handler may change what a list holds
    second = caller_of(nested)
    assert second is not None and second is not first and second.metadata["l"] == [1]


@pytest.mark.parametrize(
    "text",
    ["", "not json", "[]", '{"metadata": {}}', '{"caller": {"name": "ci"}}', '{"caller": 1}'],
)
def test_no_document_or_another_shape_is_no_caller(text: str) -> None:
    assert caller_of(text) is None


def test_missing_metadata_reads_as_empty() -> None:
    caller = caller_of('{"caller": {"name": "ci", "role": "admin"}}')
    assert caller is not None and dict(caller.metadata) == {}


async def test_run_handler_hands_the_caller_to_the_handler() -> None:
    async def who(ctx: TaskContext, input: Any) -> dict[str, Any]:
        if ctx.caller is None:
            return {"who": None}
        return {"who": ctx.caller.name, "ticket": ctx.caller.metadata.get("ticket")}

    assert await run_handler_async(who, {}) == {"who": None}
    told = await run_handler_async(who, {}, caller=Caller("ci", "operator", {"ticket": "OPS-2"}))
    assert told == {"who": "ci", "ticket": "OPS-2"}
