"""The engine of a service that decides events as they come (api-gateway, coordinator,
timer) is built with the process's CEL parser (composer_service.engines): cel-python
builds it from its grammar the first time, ~0.4 s of CPU, which the first definition
compiled used to pay inside a transaction (the timer's first due waits fired that much
late). The background loops do not pay it at every start."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any, cast

import pytest
from celpy.celparser import CELParser

from composer_core.templates import _cel
from composer_service.engines import EngineConfig, build_engine

SERVICES = Path(__file__).resolve().parents[3] / "services"


def as_in_a_new_process() -> None:
    CELParser.CEL_PARSER = None
    _cel._environment.cache_clear()


def test_an_engine_that_prepares_templates_builds_the_cel_parser() -> None:
    as_in_a_new_process()
    build_engine(cast(Any, None), None, EngineConfig(prepare_templates=True))  # no statement
    assert CELParser.CEL_PARSER is not None
    assert _cel._environment.cache_info().currsize == 1


def test_an_engine_that_does_not_leaves_the_parser_to_its_first_use() -> None:
    as_in_a_new_process()
    build_engine(cast(Any, None), None, EngineConfig())
    assert _cel._environment.cache_info().currsize == 0


def prepares_templates(service: str) -> bool:
    """Whether the service's entry point asks ``engine_config`` for the parser."""
    tree = ast.parse(
        (SERVICES / service / "src" / f"composer_{service}" / "__main__.py").read_text()
    )
    return any(
        isinstance(node, ast.Call)
        and getattr(node.func, "attr", None) == "engine_config"
        and any(
            k.arg == "prepare_templates"
            and isinstance(k.value, ast.Constant)
            and k.value.value is True
            for k in node.keywords
        )
        for node in ast.walk(tree)
    )


@pytest.mark.parametrize(
    ("service", "prepares"),
    [
        ("api_gateway", True),
        ("coordinator", True),
        ("timer", True),
        ("lease_sweeper", False),
        ("outbox_enqueuer", False),
        ("partition_manager", False),
    ],
)
def test_the_services_deciding_events_prepare_templates_and_the_loops_do_not(
    service: str, prepares: bool
) -> None:
    assert prepares_templates(service) is prepares
