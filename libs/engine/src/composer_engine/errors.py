"""Errors the engine raises; each says what the API answers.

    EngineError                 base; ``status`` is the HTTP status the API maps it to
    ├── BadRequest        400   the request cannot apply (unknown node, bad run id, empty signal name)
    ├── Forbidden         403   the caller's credentials do not cover it (a worker token
    │                           and a task of a queue it does not serve)
    ├── NotFound          404   no such run, workflow or version
    ├── Conflict          409   the run is finished (signal, cancel) or still active (retry);
    │   │                       a run id or idempotency key collision
    │   └── IdempotencyKeyReused 409  a start's Idempotency-Key sent again with another
    │                           request (input, config, version, start node)
    ├── UnknownSignal     422   no WAIT_FOR_EVENT node of the run's version waits for that
    │                           signal name: it would sit buffered for ever
    ├── Misrouted         409   a worker's stream entry is no dispatch of the attempt it
    │                           names to that worker: the task is of another queue or node
    │                           type than its handler's, or not due yet (a retry's backoff).
    │                           Nothing changed; the worker drops the entry (the coordinator
    │                           answers FAILED_PRECONDITION)
    ├── Unavailable       503   the database connection kept failing after retries: try again later
    │   └── Parked        503   the run's documents are sealed with a key not configured here:
    │                           nothing changed; it goes on once the key is back (a loop parks
    │                           the item rather than retrying its whole pass)
    └── Internal          500   a bug: the machine raised, a repository error that is not the
                                caller's, a stale snapshot twice in a row. Logged once as an
                                ALERT with the run, the event and the actions; retrying the
                                same request gives the same answer.

Workflow-level failures (a task failed, a condition broke) are not errors:
the run records them. A stale worker report is not an error either: it is
acknowledged and changes nothing.
"""

from __future__ import annotations


class EngineError(Exception):
    status = 500
    #: The problem's kind in the API's answer (None: the one its status maps to).
    kind: str | None = None

    def __init__(self, message: str, **extensions: object) -> None:
        """``extensions``: members the API adds to its problem document, so a client
        reads the names involved without parsing the message."""
        super().__init__(message)
        self.message = message
        self.extensions = extensions


class BadRequest(EngineError):
    status = 400


class Forbidden(EngineError):
    status = 403


class NotFound(EngineError):
    status = 404


class Conflict(EngineError):
    status = 409


class IdempotencyKeyReused(Conflict):
    kind = "idempotency-key-reused"


class UnknownSignal(EngineError):
    status = 422
    kind = "unknown-signal"


class Misrouted(EngineError):
    status = 409


class Unavailable(EngineError):
    status = 503


class Parked(Unavailable):
    """The run cannot be opened here (composer_engine.sealing.KeyUnavailable)."""


class Internal(EngineError):
    status = 500


class StaleSnapshot(Exception):
    """A write matched no row although the run was locked: something changed the run
    outside the engine. The transaction is rolled back and the event applied once
    more on a fresh snapshot; a second one is an Internal error."""
