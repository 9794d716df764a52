"""Workflow definitions: the YAML format, its validation and the WorkflowDAG."""

from composer_core.model._build import (
    build_dag,
    default_engine,
    parse_seconds,
    parse_time,
    validate,
)
from composer_core.model._dag import CompiledNode, WorkflowDAG
from composer_core.model._limits import DEFAULT_LIMITS, MAX_SECONDS, Limits
from composer_core.model._load import parse_definition
from composer_core.model._node_specs import (
    DEFAULT_ACCEPT_STATUS,
    NODE_SPECS,
    ForkSpec,
    HttpSpec,
    JoinSpec,
    PythonSpec,
    SwitchSpec,
    TaskSpec,
    WaitForEventSpec,
    WaitSpec,
    fixes_origin,
    literal_origin,
)
from composer_core.model._spec import (
    DEFAULT_RETRY,
    HIDDEN_CREDENTIALS,
    Edge,
    Node,
    RetryPolicy,
    WorkflowSpec,
    credentials_of,
    hide_credentials,
)
from composer_core.model._states import (
    BUILTIN_QUEUES,
    RESERVED_QUEUES,
    NodeType,
    RunStatus,
    TaskState,
)

__all__ = [
    "BUILTIN_QUEUES",
    "DEFAULT_ACCEPT_STATUS",
    "DEFAULT_LIMITS",
    "DEFAULT_RETRY",
    "HIDDEN_CREDENTIALS",
    "MAX_SECONDS",
    "NODE_SPECS",
    "RESERVED_QUEUES",
    "CompiledNode",
    "Edge",
    "ForkSpec",
    "HttpSpec",
    "JoinSpec",
    "Limits",
    "Node",
    "NodeType",
    "PythonSpec",
    "RetryPolicy",
    "RunStatus",
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
    "validate",
]
