"""Composer's engine: lock the run, decide with the state machine, persist, commit."""

from composer_engine._definitions import DefinitionCache
from composer_engine._engine import Engine, LeaseGrant, Started, utcnow
from composer_engine._workflows import ValidDefinition, Workflows, validate_definition
from composer_engine.errors import BadRequest, Conflict, EngineError, NotFound, Unavailable

__all__ = [
    "BadRequest",
    "Conflict",
    "DefinitionCache",
    "Engine",
    "EngineError",
    "LeaseGrant",
    "NotFound",
    "Started",
    "Unavailable",
    "ValidDefinition",
    "Workflows",
    "utcnow",
    "validate_definition",
]
