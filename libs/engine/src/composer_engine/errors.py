"""Errors the engine raises; each names its kind, which the API answers.

    EngineError                 base; ``kind`` is the problem's kind in every answer
    ├── BadRequest        invalid-request   the request cannot apply (unknown node, bad run
    │   │                                   id, empty signal name)
    │   └── InputInvalid  input-invalid     a start's input fails the version's
    │                                       input_schema; ``problems`` lists each (path, message)
    ├── Forbidden         forbidden         the caller's credentials do not cover it (a
    │                                       worker token and a task of a queue it does not serve)
    ├── NotFound          not-found         no such run, workflow or version
    ├── Conflict          conflict          the run is finished (signal, cancel) or still
    │   │                                   active (retry); a run id or key collision
    │   └── IdempotencyKeyReused  idempotency-key-reused   a start's Idempotency-Key sent
    │                                       again with another request (input, config,
    │                                       version, start node)
    ├── UnknownSignal     unknown-signal    no WAIT_FOR_EVENT node of the run's version
    │                                       waits for that signal name: it would sit
    │                                       buffered for ever
    ├── Misrouted         misrouted         a worker's stream entry is no dispatch of the
    │                                       attempt it names to that worker: the task is of
    │                                       another queue or node type than its handler's,
    │                                       or not due yet (a retry's backoff). Nothing
    │                                       changed; the worker drops the entry
    ├── Unavailable       unavailable       the database connection kept failing after
    │   │                                   retries, or a commit's outcome is unknown: try
    │   │                                   again later
    │   └── Parked        unavailable       the run's documents are sealed with a key not
    │                                       configured here: nothing changed; it goes on
    │                                       once the key is back (a loop parks the item
    │                                       rather than retrying its whole pass)
    └── Internal          internal          a bug: the machine raised, a repository error
                                            that is not the caller's, a stale snapshot twice
                                            in a row. Logged once as an ALERT with the run,
                                            the event and the actions; retrying the same
                                            request gives the same answer.

Why kinds and no statuses: the engine serves the REST API and the worker protocol
alike; each service maps a kind to its own answer (the api-gateway's
``problems.STATUSES``, the coordinator's gRPC codes).

Workflow-level failures (a task failed, a condition broke) are not errors:
the run records them. A stale worker report is not an error either: it is
acknowledged and changes nothing.
"""

from __future__ import annotations


class EngineError(Exception):
    #: The problem's kind, stable: a client tells answers apart by it.
    kind = "internal"

    def __init__(self, message: str, **extensions: object) -> None:
        """``extensions``: members the API adds to its problem document, so a client
        reads the names involved without parsing the message."""
        super().__init__(message)
        self.message = message
        self.extensions = extensions


class BadRequest(EngineError):
    kind = "invalid-request"


class InputInvalid(BadRequest):
    """The run input fails the definition's ``input_schema``; no run was started.
    Its ``problems`` extension lists every problem as ``{path, message}``, the path a
    JSON path into the input (``$`` is the input itself)."""

    kind = "input-invalid"


class Forbidden(EngineError):
    kind = "forbidden"


class NotFound(EngineError):
    kind = "not-found"


class Conflict(EngineError):
    kind = "conflict"


class IdempotencyKeyReused(Conflict):
    kind = "idempotency-key-reused"


class UnknownSignal(EngineError):
    kind = "unknown-signal"


class Misrouted(EngineError):
    kind = "misrouted"


class Unavailable(EngineError):
    kind = "unavailable"


class Parked(Unavailable):
    """The run cannot be opened here (composer_engine.sealing.KeyUnavailable)."""


class Internal(EngineError):
    kind = "internal"


class StaleSnapshot(Exception):
    """A write matched no row although the run was locked: something changed the run
    outside the engine. The transaction is rolled back and the event applied once
    more on a fresh snapshot; a second one is an Internal error."""
