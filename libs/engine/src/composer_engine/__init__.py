"""Composer's engine: lock the run, decide with the state machine, persist, commit."""

from composer_engine._admission import AdmissionPolicy, QueueConcurrency, parse_queue_concurrency
from composer_engine._children import DEFAULT_MAX_CHILD_DEPTH
from composer_engine._definitions import DefinitionCache
from composer_engine._engine import Engine
from composer_engine._history import KINDS as HISTORY_KINDS
from composer_engine._leases import LeaseGrant, Reporter, handler_node_types, new_token
from composer_engine._operations import MAX_RUN_IDS, RunFilter
from composer_engine._reads import ENDS_ATTEMPT as HISTORY_ENDS_ATTEMPT
from composer_engine._reads import (
    HistoryPage,
    HistoryRow,
    LogsView,
    Reads,
    RunListing,
    RunView,
)
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
from composer_engine._reported import AttemptLog, NextTask, Report, TakeNext
from composer_engine._runs import Started
from composer_engine._schedules import Fired, FirePass, Schedules, ScheduleView, parse_spec
from composer_engine._shell import utcnow
from composer_engine._workflows import Applied, ValidDefinition, Workflows, validate_definition
from composer_engine.errors import (
    BadRequest,
    Conflict,
    EngineError,
    Forbidden,
    IdempotencyKeyReused,
    InputInvalid,
    Internal,
    Misrouted,
    NotFound,
    Parked,
    Unavailable,
    UnknownSignal,
)

__all__ = [
    "DEFAULT_MAX_CHILD_DEPTH",
    "HISTORY_ENDS_ATTEMPT",
    "HISTORY_KINDS",
    "MAX_RUN_IDS",
    "Acknowledge",
    "AdmissionPolicy",
    "Applied",
    "AttemptLog",
    "BadRequest",
    "ClaimedEntry",
    "Conflict",
    "DefinitionCache",
    "DispatchDecision",
    "Engine",
    "EngineError",
    "EntryDecision",
    "FirePass",
    "Fired",
    "Forbidden",
    "GiveBack",
    "GiveUp",
    "HistoryPage",
    "HistoryRow",
    "IdempotencyKeyReused",
    "InputInvalid",
    "Internal",
    "LeaseGrant",
    "Leave",
    "LogsView",
    "Misrouted",
    "NextTask",
    "NotFound",
    "Parked",
    "QueueConcurrency",
    "Reads",
    "RecoveryLimits",
    "Redeliver",
    "Redispatch",
    "Report",
    "Reporter",
    "RunFilter",
    "RunListing",
    "RunView",
    "ScheduleView",
    "Schedules",
    "Started",
    "TakeNext",
    "Unavailable",
    "UnknownSignal",
    "Unserved",
    "ValidDefinition",
    "Workflows",
    "handler_node_types",
    "lost_before",
    "lost_dispatch",
    "new_token",
    "parse_queue_concurrency",
    "parse_spec",
    "settle_entry",
    "utcnow",
    "validate_definition",
    "watch_queue",
]
