"""Errors raised by libs/queue. Nothing above this library sees a redis exception.

The hierarchy, so callers can catch at the depth they need::

    QueueError                 base; ``retryable`` says whether trying again can help
    ├── QueueUnavailable       Redis cannot be reached or dropped the connection
    │                          (refused, reset, timed out, loading, read-only replica):
    │                          retry with backoff; nothing was lost on our side
    ├── QueueCommandError      Redis answered a command with an error (a key of the
    │                          wrong type, a bad argument): a bug or a foreign key
    │                          under our prefix; retrying will not help
    └── MalformedMessage       a stream entry is not a task message (also a ValueError)

A missing consumer group (NOGROUP; UNBLOCKED when the stream vanished under a
blocked read), a missing stream, or a group that exists already (BUSYGROUP) is
never raised: the stream operations recreate or ignore it themselves.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from redis import exceptions as rex


class QueueError(Exception):
    """Base of every error libs/queue raises."""

    retryable: bool = False


class QueueUnavailable(QueueError):
    """Redis is unreachable or went away mid-command; the same call may succeed later."""

    retryable = True


class QueueCommandError(QueueError):
    """Redis refused a command; trying again will not help."""


class MalformedMessage(QueueError, ValueError):
    """A stream entry that is not a task message (missing or malformed fields)."""


_UNAVAILABLE = (
    rex.ConnectionError,  # also covers refused, reset and auth-less reconnects
    rex.TimeoutError,
    rex.BusyLoadingError,
    rex.ReadOnlyError,
    rex.TryAgainError,
    # a Redis Cluster: a master down or a slot being moved
    rex.ClusterDownError,
    rex.ClusterError,
    rex.MasterDownError,
    OSError,
)


def is_missing_group(exc: BaseException | None) -> bool:
    """The stream or its consumer group is gone (Redis restarted, flushed): a NOGROUP
    reply, or UNBLOCKED when the stream was deleted under a blocked XREADGROUP."""
    return isinstance(exc, rex.ResponseError) and str(exc).startswith(("NOGROUP", "UNBLOCKED"))


def is_missing_stream(exc: BaseException | None) -> bool:
    """The stream does not exist, as XINFO ("no such key") and XGROUP ("requires the key
    to exist") say it."""
    text = str(exc)
    return isinstance(exc, rex.ResponseError) and (
        "no such key" in text or "requires the key to exist" in text
    )


def is_existing_group(exc: BaseException | None) -> bool:
    """A BUSYGROUP reply: XGROUP CREATE found the group there already."""
    return isinstance(exc, rex.ResponseError) and str(exc).startswith("BUSYGROUP")


@contextlib.contextmanager
def translated(what: str) -> Iterator[None]:
    """Map a redis (or socket) exception raised inside to the library's own, ``from`` it.

    ``what`` names the operation, so the message says what failed, e.g.
    "reading p:q:payments:0 failed: Connection refused (is Redis up?)".
    """
    try:
        yield
    except rex.RedisClusterException as exc:
        # no node of the cluster answers (redis-py says "cannot be connected"), or a
        # slot has no master: retry; anything else (a node not in cluster mode) will not heal
        if isinstance(exc, rex.SlotNotCoveredError) or "cannot be connected" in str(exc):
            raise QueueUnavailable(f"{what} failed: {exc} (is the Redis Cluster up?)") from exc
        hint = (
            " (COMPOSER_REDIS_CLUSTER=true, but this Redis is one server: set it false)"
            if "not enabled" in str(exc)
            else ""
        )
        raise QueueCommandError(f"{what} failed: {exc}{hint}") from exc
    except _UNAVAILABLE as exc:
        raise QueueUnavailable(
            f"{what} failed: {exc or type(exc).__name__} (is Redis up?)"
        ) from exc
    except rex.ResponseError as exc:
        if isinstance(exc, rex.AskError) or str(exc).startswith("CROSSSLOT"):  # MOVED too
            # a single server's client on a node of a Redis Cluster
            raise QueueCommandError(
                f"{what} failed: {type(exc).__name__} {exc} (this Redis is a node of a "
                "Redis Cluster: set "
                "COMPOSER_REDIS_CLUSTER=true on every service and worker)"
            ) from exc
        raise QueueCommandError(f"{what} failed: {exc}") from exc
    except rex.RedisError as exc:
        raise QueueCommandError(f"{what} failed: {exc}") from exc
