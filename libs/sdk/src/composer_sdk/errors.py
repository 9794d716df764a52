"""What a handler raises to say how its attempt failed.

    TaskFailed            the attempt failed; the node's retry policy decides (``code`` tags it)
    └── PermanentError    retrying cannot help: the node fails now, whatever attempts are left

What the worker itself raises:

    SdkError                  misconfigured, or the coordinator answered with an error
    │                         (``code``: the gRPC status name, e.g. "INTERNAL")
    └── CoordinatorUnavailable  the coordinator could not be reached after the configured
                                number of attempts (WorkerConfig.coordinator_attempts)

Any other exception fails the attempt as a retryable error carrying its type
and message. Cancellation (a lost lease, shutdown) is not a failure: the
handler is cancelled and nothing is reported.
"""

from __future__ import annotations


class TaskFailed(Exception):
    """The attempt failed; it is retried while the node's policy allows."""

    permanent = False

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class PermanentError(TaskFailed):
    """The attempt failed and no retry can succeed (bad input, a refused card, …)."""

    permanent = True


class SdkError(Exception):
    """The worker itself is misconfigured (bad token, unknown queue, unreachable Redis),
    or the coordinator refused a call (``code`` names the gRPC status)."""

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


class CoordinatorUnavailable(SdkError):
    """Every attempt of a call failed with a transient status (UNAVAILABLE, ...)."""
