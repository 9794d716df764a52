"""The pure workflow state machine: events in, actions out (docs/architecture.md §3)."""

from composer_core.statemachine._actions import (
    Action,
    BufferSignal,
    CancelTasks,
    CompleteTask,
    ConsumeSignal,
    CreateTask,
    DispatchTask,
    FailTask,
    FinishRun,
    ReopenRun,
    ResolveWait,
    RetryTask,
    Transition,
)
from composer_core.statemachine._events import (
    Event,
    NodeCompleted,
    NodeFailed,
    RunCancelled,
    RunRetried,
    RunStarted,
    SignalReceived,
    TimerFired,
)
from composer_core.statemachine._machine import Deps, Machine
from composer_core.statemachine._state import Missing, NodeState, Run, Signal

__all__ = [
    "Action",
    "BufferSignal",
    "CancelTasks",
    "CompleteTask",
    "ConsumeSignal",
    "CreateTask",
    "Deps",
    "DispatchTask",
    "Event",
    "FailTask",
    "FinishRun",
    "Machine",
    "Missing",
    "NodeCompleted",
    "NodeFailed",
    "NodeState",
    "ReopenRun",
    "ResolveWait",
    "RetryTask",
    "Run",
    "RunCancelled",
    "RunRetried",
    "RunStarted",
    "Signal",
    "SignalReceived",
    "TimerFired",
    "Transition",
]
