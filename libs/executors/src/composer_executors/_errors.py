"""Errors raised by the executors.

Every failure of an attempt is an :class:`ExecutionError`; what the worker
needs to report it is on the error itself (``message``, ``code``,
``permanent``). The hierarchy, so callers can catch at the depth they need::

    ExecutionError                a node attempt failed          (code, permanent)
    ├── InvalidSpec               the resolved spec is unusable  invalid_spec, permanent
    │                             (or its secrets would go to another
    │                             origin than its definition's)
    ├── ExecutionTimeout          the attempt ran past its timeout        timeout
    ├── TargetRefused             the SSRF guard refused the address,     target_refused, permanent
    │                             or a redirect (to https → http, to a
    │                             non-http(s) or hostless target, to
    │                             another origin with a secret along)
    ├── HttpStatusError           a status outside accept_status          http_<status>
    │                             (default 2xx): 4xx but 408, 425, 429,
    │                             and 1xx-3xx permanent; the rest retryable
    ├── PythonError               the snippet failed (``exc_type`` names the exception)
    │                             exception, memory_limit, crashed: retryable;
    │                             syntax_error, no_main, not_json, result_too_large: permanent
    ├── SecretNotFound            a referenced secret is in no source     secret_not_found, permanent
    └── SecretUnavailable         a secret source could not answer        secret_unavailable

Other codes on a plain ExecutionError: connection_error, tls_error (retryable),
too_many_redirects, response_too_large (permanent).

``permanent`` means retrying the same attempt cannot help: the spec or the
code is wrong, or the target said so (a 4xx other than 408, 425 and 429).
Runtime outcomes (timeouts, exceptions raised by user code, 5xx, dropped
connections) stay retryable and the node's retry policy decides.
"""

from __future__ import annotations

from composer_rpc.codes import ErrorCode, http_status


class ExecutionError(Exception):
    """A node attempt failed; report ``message``, ``code`` and ``permanent`` as they are."""

    def __init__(self, message: str, *, code: str | None = None, permanent: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.permanent = permanent

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.message!r}, code={self.code!r}, "
            f"permanent={self.permanent})"
        )


class InvalidSpec(ExecutionError):
    """The node's resolved spec cannot run (no url, a method that is not a string, …)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code=ErrorCode.INVALID_SPEC, permanent=True)


class ExecutionTimeout(ExecutionError):
    """The attempt did not finish within its timeout; whatever it started was stopped."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code=ErrorCode.TIMEOUT, permanent=False)


class TargetRefused(ExecutionError):
    """The call was refused before it went out: the SSRF guard refused the address
    (loopback, private, link-local, …), or a redirect led where an HTTP node must not
    follow (from https to http, to a non-http(s) URL or one without a host)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code=ErrorCode.TARGET_REFUSED, permanent=True)


class HttpStatusError(ExecutionError):
    """The server answered with a status the node does not accept (``accept_status``,
    default 2xx); ``excerpt`` is the start of its body."""

    def __init__(self, message: str, *, status: int, excerpt: str) -> None:
        super().__init__(
            message, code=http_status(status), permanent=http_status_is_permanent(status)
        )
        self.status = status
        self.excerpt = excerpt


class PythonError(ExecutionError):
    """A PYTHON node's code failed; ``exc_type`` names the exception when there was one."""

    def __init__(
        self, message: str, *, code: ErrorCode, permanent: bool, exc_type: str | None = None
    ) -> None:
        super().__init__(message, code=code, permanent=permanent)
        self.exc_type = exc_type


_RETRYABLE_4XX = frozenset({408, 425, 429})  # request timeout, too early, too many requests


def http_status_is_permanent(status: int) -> bool:
    """Whether a failed status is worth no retry: a 4xx says the request itself is wrong.

    408, 425 and 429 are the 4xx a server uses to say "not now", so they retry;
    an unfollowed 3xx would answer the same again.
    """
    if 400 <= status < 500:
        return status not in _RETRYABLE_4XX
    return status < 400


class SecretNotFound(ExecutionError):
    """A node references a secret that none of the workers' sources holds.

    The message names the secret and where to set it, never a value.
    """

    def __init__(self, name: str, where: str) -> None:
        super().__init__(
            f"secret {name!r} is not set on the workers: set {where}",
            code=ErrorCode.SECRET_NOT_FOUND,
            permanent=True,
        )
        self.name = name


class SecretUnavailable(ExecutionError):
    """A secret source could not answer (a file it cannot read, a store that is down):
    retryable unless the source says it is not."""

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message, code=ErrorCode.SECRET_UNAVAILABLE, permanent=permanent)
