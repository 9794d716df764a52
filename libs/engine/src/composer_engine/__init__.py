"""Composer's engine: lock the run, decide with the state machine, persist, commit."""

from composer_engine._definitions import DefinitionCache
from composer_engine._engine import Engine, LeaseGrant, Started, utcnow
from composer_engine.errors import (
    BadRequest,
    Conflict,
    EngineError,
    Internal,
    NotFound,
    Unavailable,
)

__all__ = [
    "BadRequest",
    "Conflict",
    "DefinitionCache",
    "Engine",
    "EngineError",
    "Internal",
    "LeaseGrant",
    "NotFound",
    "Started",
    "Unavailable",
    "utcnow",
]
