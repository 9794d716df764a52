"""A service's engine is built with the process's CEL parser (composer_service.engines):
cel-python builds it from its grammar the first time, ~0.4 s of CPU, which the first
definition compiled used to pay inside a transaction (the timer's first due waits
fired that much late)."""

from __future__ import annotations

from typing import Any, cast

from celpy.celparser import CELParser

from composer_core.templates import _cel
from composer_service.engines import EngineConfig, build_engine


def test_building_an_engine_builds_the_cel_parser() -> None:
    CELParser.CEL_PARSER = None  # as in a new process
    _cel._environment.cache_clear()

    build_engine(cast(Any, None), None, EngineConfig())  # no statement runs here

    assert CELParser.CEL_PARSER is not None
    assert _cel._environment.cache_info().currsize == 1
