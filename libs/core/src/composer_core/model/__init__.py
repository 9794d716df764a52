"""Workflow definitions: the YAML format, its validation and the WorkflowDAG."""

from composer_core.kinds import parse_seconds, parse_time
from composer_core.kinds.fork import ForkSpec
from composer_core.kinds.http import (
    DEFAULT_ACCEPT_STATUS,
    HttpSpec,
    fixes_origin,
    literal_origin,
)
from composer_core.kinds.join import JoinSpec
from composer_core.kinds.python import PythonSpec
from composer_core.kinds.switch import SwitchSpec
from composer_core.kinds.task import TaskSpec
from composer_core.kinds.wait import WaitSpec
from composer_core.kinds.wait_for_event import WaitForEventSpec
from composer_core.model._build import build_dag, default_engine, validate
from composer_core.model._dag import (
    CompiledNode,
    NodeLine,
    NodeRate,
    RenderedKeys,
    WorkflowDAG,
)
from composer_core.model._flow import (
    DEFAULT_PRIORITY,
    CompiledFlow,
    FlowError,
    RunFlow,
    RunLimit,
    Strategy,
)
from composer_core.model._input_schema import MAX_INPUT_PROBLEMS, InputSchema, schema_problems
from composer_core.model._limits import DEFAULT_LIMITS, MAX_SECONDS, Limits
from composer_core.model._load import parse_definition
from composer_core.model._spec import (
    DEFAULT_RETRY,
    HIDDEN_CREDENTIALS,
    Edge,
    Node,
    NodeConcurrency,
    NodeRateLimit,
    RetryPolicy,
    RunConcurrency,
    WorkflowSpec,
    credentials_of,
    hide_credentials,
)
from composer_core.model._states import (
    BUILTIN_QUEUES,
    NODE_SPECS,
    RESERVED_QUEUES,
    NodeType,
    RunStatus,
    TaskState,
)

__all__ = [
    "BUILTIN_QUEUES",
    "DEFAULT_ACCEPT_STATUS",
    "DEFAULT_LIMITS",
    "DEFAULT_PRIORITY",
    "DEFAULT_RETRY",
    "HIDDEN_CREDENTIALS",
    "MAX_INPUT_PROBLEMS",
    "MAX_SECONDS",
    "NODE_SPECS",
    "RESERVED_QUEUES",
    "CompiledFlow",
    "CompiledNode",
    "Edge",
    "FlowError",
    "ForkSpec",
    "HttpSpec",
    "InputSchema",
    "JoinSpec",
    "Limits",
    "Node",
    "NodeConcurrency",
    "NodeLine",
    "NodeRate",
    "NodeRateLimit",
    "NodeType",
    "PythonSpec",
    "RenderedKeys",
    "RetryPolicy",
    "RunConcurrency",
    "RunFlow",
    "RunLimit",
    "RunStatus",
    "Strategy",
    "SwitchSpec",
    "TaskSpec",
    "TaskState",
    "WaitForEventSpec",
    "WaitSpec",
    "WorkflowDAG",
    "WorkflowSpec",
    "build_dag",
    "credentials_of",
    "default_engine",
    "fixes_origin",
    "hide_credentials",
    "literal_origin",
    "parse_definition",
    "parse_seconds",
    "parse_time",
    "schema_problems",
    "validate",
]
