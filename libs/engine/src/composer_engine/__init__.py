"""Composer's engine: lock the run, decide with the state machine, persist, commit."""

from composer_engine._definitions import DefinitionCache
from composer_engine._engine import Engine, Report, Started, utcnow
from composer_engine._leases import LeaseGrant, Reporter, new_token
from composer_engine._recovery import (
    Acknowledge,
    ClaimedEntry,
    DispatchDecision,
    EntryDecision,
    GiveBack,
    GiveUp,
    Leave,
    RecoveryLimits,
    Redeliver,
    Redispatch,
    Unserved,
    lost_before,
    lost_dispatch,
    settle_entry,
    watch_queue,
)
from composer_engine._workflows import ValidDefinition, Workflows, validate_definition
from composer_engine.errors import (
    BadRequest,
    Conflict,
    EngineError,
    Forbidden,
    Internal,
    NotFound,
    Unavailable,
)

__all__ = [
    "Acknowledge",
    "BadRequest",
    "ClaimedEntry",
    "Conflict",
    "DefinitionCache",
    "DispatchDecision",
    "Engine",
    "EngineError",
    "EntryDecision",
    "Forbidden",
    "GiveBack",
    "GiveUp",
    "Internal",
    "LeaseGrant",
    "Leave",
    "NotFound",
    "RecoveryLimits",
    "Redeliver",
    "Redispatch",
    "Report",
    "Reporter",
    "Started",
    "Unavailable",
    "Unserved",
    "ValidDefinition",
    "Workflows",
    "lost_before",
    "lost_dispatch",
    "new_token",
    "settle_entry",
    "utcnow",
    "validate_definition",
    "watch_queue",
]
