"""The api-gateway answers each kind of engine error with its own status: the engine
names kinds (composer_engine.errors), the gateway alone knows HTTP."""

from __future__ import annotations

import pytest

import composer_engine
from composer_api_gateway.problems import STATUSES, from_engine
from composer_engine import EngineError


def engine_errors() -> list[type[EngineError]]:
    found: list[type[EngineError]] = []
    todo: list[type[EngineError]] = [EngineError]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return found


@pytest.mark.parametrize("error", engine_errors(), ids=lambda c: c.__name__)
def test_every_engine_error_has_a_status_of_its_own_kind(error: type[EngineError]) -> None:
    assert error.kind in STATUSES, f"{error.__name__}'s kind {error.kind!r} has no status"
    problem = from_engine(error("what happened", run_id="r"))
    assert (problem.kind, problem.status, problem.extensions) == (
        error.kind,
        STATUSES[error.kind],
        {"run_id": "r"},
    )


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (composer_engine.BadRequest, 400),
        (composer_engine.NotFound, 404),
        (composer_engine.Conflict, 409),
        (composer_engine.IdempotencyKeyReused, 409),
        (composer_engine.UnknownSignal, 422),
        (composer_engine.Internal, 500),
        (composer_engine.Unavailable, 503),
        (composer_engine.Parked, 503),
    ],
)
def test_the_statuses_clients_rely_on(error: type[EngineError], status: int) -> None:
    assert from_engine(error("x")).status == status


def test_an_error_of_a_kind_the_gateway_does_not_know_is_internal() -> None:
    class Strange(EngineError):
        kind = "strange"

    assert (from_engine(Strange("x")).status, from_engine(Strange("x")).kind) == (500, "internal")
