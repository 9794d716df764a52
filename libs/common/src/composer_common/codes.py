"""The error codes a failed task attempt carries, shared by everything that fails one.

Hand-written (``make proto`` leaves this module alone). A code is stored on the
task (``task_instances.error_code``), shown by the API and sent over the worker
protocol as text, so the values are a contract: never rename one.

Two families, told apart by their spelling:

- UPPER_CASE: the platform failed the attempt itself (a lease that expired, a
  message delivered too often); no handler ran to the end.
- lower_case: the attempt ran and failed — the SDK (``timeout``, ``exception``,
  ``bad_input``, ``bad_output``) or a built-in executor (``invalid_spec``,
  ``connection_error``, …). An HTTP node that got a non-2xx answer reports
  ``http_<status>`` (``http_status``), outside the enum; a handler's
  ``PermanentError(code=…)`` reports its own code.
"""

from __future__ import annotations

from enum import StrEnum


class ErrorCode(StrEnum):
    """Why a task attempt failed, as stored on the task and sent between services."""

    # -- the platform ----------------------------------------------------------
    #: The worker stopped renewing its lease (crashed, partitioned, stuck).
    LEASE_EXPIRED = "LEASE_EXPIRED"
    #: The task message was delivered more often than the stream allows.
    DELIVERY_LIMIT = "DELIVERY_LIMIT"
    #: The task's input is over COMPOSER_MAX_NODE_INPUT_BYTES: it was never leased.
    INPUT_TOO_LARGE = "INPUT_TOO_LARGE"

    # -- the SDK, around any handler ---------------------------------------------
    #: The attempt ran past its timeout.
    TIMEOUT = "timeout"
    #: The handler raised an exception that is not a PermanentError.
    EXCEPTION = "exception"
    #: The task input does not fit the handler's input model.
    BAD_INPUT = "bad_input"
    #: The handler returned something that cannot be reported as JSON output.
    BAD_OUTPUT = "bad_output"
    #: The handler's output is over the output limit (COMPOSER_MAX_OUTPUT_BYTES).
    OUTPUT_TOO_LARGE = "output_too_large"

    # -- the built-in executors (HTTP and PYTHON nodes) ----------------------------
    INVALID_SPEC = "invalid_spec"
    TARGET_REFUSED = "target_refused"
    CONNECTION_ERROR = "connection_error"
    TLS_ERROR = "tls_error"
    TOO_MANY_REDIRECTS = "too_many_redirects"
    RESPONSE_TOO_LARGE = "response_too_large"
    SYNTAX_ERROR = "syntax_error"
    NO_MAIN = "no_main"
    NOT_JSON = "not_json"
    MEMORY_LIMIT = "memory_limit"
    RESULT_TOO_LARGE = "result_too_large"
    CRASHED = "crashed"
    #: A secret the node references is in none of the workers' secret sources.
    SECRET_NOT_FOUND = "secret_not_found"
    #: A secret source could not answer (a file it cannot read, a store that is down).
    SECRET_UNAVAILABLE = "secret_unavailable"
    #: The PYTHON node's sandbox could not be set up on the worker (a tool is missing,
    #: the kernel refused namespaces); permanent when the workers found so at start.
    SANDBOX_UNAVAILABLE = "sandbox_unavailable"


def http_status(status: int) -> str:
    """The code of an HTTP node whose target answered ``status`` (not 2xx)."""
    return f"http_{status}"
