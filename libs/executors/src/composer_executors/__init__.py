"""Composer's built-in executors: the HTTP and PYTHON nodes, as plain async functions.

The workers service wraps them into handlers for the ``http`` and ``python``
queues; they know nothing of the SDK, leases or streams. A PYTHON node runs
in a :class:`Sandbox` the workers open at start (bubblewrap: ``_sandbox``). Each takes the
node's resolved spec and its timeout, returns the node's output (docs/architecture.md
§8) and raises :class:`ExecutionError` (with ``code`` and ``permanent``)
when the attempt fails. Settings (COMPOSER_HTTP_ALLOW_PRIVATE, COMPOSER_HTTP_ALLOW_NETWORKS, limits) are
read by the service and passed in: nothing here reads the environment.

Both resolve the node's ``{{ secret.NAME }}`` references from a
:class:`SecretSource` just before they run, and keep the values out of what
they return and raise (docs/secrets.md).
"""

from composer_executors._errors import (
    ExecutionError,
    ExecutionTimeout,
    HttpStatusError,
    InvalidSpec,
    PythonError,
    SecretNotFound,
    SecretUnavailable,
    TargetRefused,
)
from composer_executors._guard import HttpPolicy, create_http_session, parse_networks
from composer_executors._http import CROSS_ORIGIN_HEADERS, run_http
from composer_executors._python import check_sandbox, run_python
from composer_executors._sandbox import (
    NETWORKS,
    Sandbox,
    SandboxPolicy,
    SandboxUnavailable,
)
from composer_executors._secret_references import (
    SECRETS_KEY,
    Resolved,
    resolve_secrets,
    run_with_secrets,
)
from composer_executors._secret_sources import (
    DirectorySecrets,
    EnvironmentSecrets,
    SecretChain,
    SecretSource,
)
from composer_rpc.codes import ErrorCode

__all__ = [
    "CROSS_ORIGIN_HEADERS",
    "NETWORKS",
    "SECRETS_KEY",
    "DirectorySecrets",
    "EnvironmentSecrets",
    "ErrorCode",
    "ExecutionError",
    "ExecutionTimeout",
    "HttpPolicy",
    "HttpStatusError",
    "InvalidSpec",
    "PythonError",
    "Resolved",
    "Sandbox",
    "SandboxPolicy",
    "SandboxUnavailable",
    "SecretChain",
    "SecretNotFound",
    "SecretSource",
    "SecretUnavailable",
    "TargetRefused",
    "check_sandbox",
    "create_http_session",
    "parse_networks",
    "resolve_secrets",
    "run_http",
    "run_python",
    "run_with_secrets",
]
