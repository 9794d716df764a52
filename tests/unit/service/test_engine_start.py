"""The engine of a service that decides events as they come (api-gateway, coordinator,
timer) is built with the process's CEL parser (composer_service.engines): cel-python
builds it from its grammar the first time, ~0.4 s of CPU, which the first definition
compiled used to pay inside a transaction (the timer's first due waits fired that much
late). The background loops do not pay it at every start."""

from __future__ import annotations

from typing import Any, cast

from celpy.celparser import CELParser

from composer_core.templates import _cel
from composer_service import ServiceSettings
from composer_service.engines import EngineConfig, build_engine


def as_in_a_new_process() -> None:
    CELParser.CEL_PARSER = None
    _cel._environment.cache_clear()


def test_an_engine_that_prepares_templates_builds_the_cel_parser() -> None:
    as_in_a_new_process()
    build_engine(cast(Any, None), None, EngineConfig(prepare_templates=True))  # no statement
    assert CELParser.CEL_PARSER is not None
    assert _cel._environment.cache_info().currsize == 1


def test_the_services_deciding_events_prepare_templates_and_the_loops_do_not() -> None:
    settings = ServiceSettings()
    assert not settings.engine_config().prepare_templates
    assert settings.engine_config(prepare_templates=True).prepare_templates
    as_in_a_new_process()
    build_engine(cast(Any, None), None, EngineConfig())
    assert _cel._environment.cache_info().currsize == 0
