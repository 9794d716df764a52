"""Errors raised by libs/repo. Nothing above this library sees an asyncpg exception.

The hierarchy, so callers can catch at the depth they need::

    RepoError                  base; ``retryable`` says whether trying again can help
    ├── NotFound               a row the caller named does not exist     (API: 404)
    ├── Conflict               the write collides with what is stored    (API: 409)
    │   └── RunAlreadyExists   a run with that id exists (client-supplied run id)
    ├── Invalid                the request cannot be stored as given     (API: 400)
    │   └── NoPartition        the run id's month has no partition yet (or any more)
    ├── Transient              connection lost, deadlock, serialization failure:
    │   │                      roll back and apply the whole event again
    │   └── CommitUnknown      the connection was lost while COMMIT was in flight:
    │                          ask ``commit_status`` before applying it again
    └── SchemaError            the database schema is not what this code needs
        ├── SchemaOutdated     behind the code: run ``make migrate``
        └── MigrationError     a migration file is malformed, changed after it was
                               applied, or the database is ahead of the files

A stale write (a fenced update that matched no row) is not an error: those
functions return None or False, and the engine decides what that means.
"""

from __future__ import annotations


class RepoError(Exception):
    """Base of every error libs/repo raises."""

    retryable: bool = False

    def __init__(self, message: str, *, sqlstate: str | None = None) -> None:
        super().__init__(message)
        #: The PostgreSQL error code behind this error, when there was one.
        self.sqlstate = sqlstate


class NotFound(RepoError):
    """A definition, run or task the caller named does not exist."""


class Conflict(RepoError):
    """The write collides with stored state (a duplicate, a concurrent change).

    ``retryable`` is set when a concurrent writer won a race and the same call
    may succeed now (two creates of the next definition version, two deploys).
    """

    def __init__(self, message: str, *, retryable: bool = False, sqlstate: str | None = None):
        super().__init__(message, sqlstate=sqlstate)
        self.retryable = retryable


class RunAlreadyExists(Conflict):
    """A run with this id already exists."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"workflow run {run_id} already exists")
        self.run_id = run_id


class Invalid(RepoError):
    """The value cannot be stored: it breaks a constraint or has the wrong shape."""


class NoPartition(Invalid):
    """The run id maps to a month that has no partition.

    Run ids are UUIDv7s whose timestamp picks the month; a client-supplied id
    must be recent, and partitions must be created ahead (partition-manager).
    """


class Transient(RepoError):
    """The database could not complete the work now; the same work may succeed later."""

    retryable = True


class CommitUnknown(Transient):
    """The connection was lost while COMMIT was in flight: the transaction may have
    committed. Applying its work again blind could apply it twice (one signal
    completing two nodes); ``commit_status(pool, exc.xid, exc.backend_pid)`` says
    which it was. Only raised for a transaction that wrote something (one that did
    not has an outcome nobody needs: it is a plain Transient)."""

    def __init__(self, message: str, *, xid: str, backend_pid: int) -> None:
        super().__init__(message)
        #: The transaction's id (xid8, as text): what ``pg_xact_status`` takes.
        self.xid = xid
        #: The server process that ran it, which may still hold it open.
        self.backend_pid = backend_pid


class SchemaError(RepoError):
    """The database schema does not match what this code expects."""


class SchemaOutdated(SchemaError):
    """The database is at an older schema version than this code needs."""

    def __init__(self, message: str, *, current: int, expected: int) -> None:
        super().__init__(message)
        self.current = current
        self.expected = expected


class MigrationError(SchemaError):
    """A migration cannot be applied: bad file name, gap, changed checksum, unknown version."""
