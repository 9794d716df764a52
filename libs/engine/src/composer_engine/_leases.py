"""Leases bound to the server (docs/architecture.md §6.1).

A stream entry names an attempt and nothing more: anyone who can write to
Redis can write one. What a worker runs, and whether its renewals and reports
count, is decided here from the database alone:

- a grant returns the input and the node from the task's row, never from the
  stream, so a forged entry can at most make a worker run a real attempt on
  its real input (which the lease lets happen once);
- a grant carries a fresh unguessable token, and a renewal or a report counts
  only with it: the owner name is no secret (it is the worker's consumer name,
  which ``XINFO CONSUMERS`` shows);
- a worker's credentials name the queues it serves, and an attempt of another
  queue is neither granted, renewed nor reported;
- an entry is a dispatch of its attempt only on its task's queue, to a handler of
  its node type, once the attempt is due: an entry on another queue's stream, for a
  node type the worker's handler does not run, or ahead of a retry's backoff is not
  granted (``Misrouted``) and its task is left as it was.
"""

from __future__ import annotations

import datetime as dt
import logging
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

import composer_repo as repo
from composer_common import limits
from composer_common.logs import alert
from composer_core.model import RESERVED_QUEUES, Node, NodeType
from composer_core.templates import ORIGIN_KEY, SECRETS_KEY, Json
from composer_engine._definitions import DefinitionCache
from composer_engine.errors import BadRequest, EngineError, Forbidden, Misrouted
from composer_engine.sealing import Sealer, SealingError

log = logging.getLogger("composer.engine")

#: How long an attempt whose input does not open here waits before it is sent again.
PARK_FOR = dt.timedelta(minutes=5)

#: The reason a lease is not granted, whatever it is: a stale attempt, a finished
#: task, or a live lease of another worker (the database cannot tell cheaply which).
NOT_GRANTED = "stale attempt, finished task, or leased by another worker"


@dataclass(frozen=True, slots=True)
class LeaseGrant:
    granted: bool
    reason: str = ""
    input: Json = None
    expires_at: dt.datetime | None = None
    #: The node's retry policy bound: the handler knows when it runs its last attempt.
    max_attempts: int = 0
    #: The lease's secret: renewals and reports present it.
    token: str = ""
    node_id: str = ""
    node_type: NodeType | None = None
    workflow_id: str = ""
    workflow_version: int = 0
    #: The node's timeout (None: the worker's default).
    timeout_seconds: float | None = None
    #: ``input`` as JSON text, as measured against the node input limit.
    input_json: str = ""
    #: Not granted because the input is over the node input limit (``reason`` says
    #: so): the task is to be failed, since no worker could take it.
    too_large: bool = False
    #: The run's calling context (``composer_common.caller``), from the task's copy;
    #: None: the run has none, or the task is not a TASK node.
    context: Json = None
    #: The run's priority (None: the default, 3): the band of its task's message.
    priority: int | None = None


@dataclass(frozen=True, slots=True)
class Reporter:
    """A worker reporting an attempt. Its report counts only with the lease's
    ``token``, and only on a queue its credentials cover (``queues``; None: all)."""

    token: str
    owner: str = ""
    queues: frozenset[str] | None = None

    def refusal(self, holder: repo.LeaseHolder | None, node_id: str, attempt: int) -> str | None:
        """Why this report must be ignored (stale), or None when it counts; raises
        Forbidden when the lease is this reporter's but its queue is not."""
        if (
            holder is None
            or holder.token is None
            or not secrets.compare_digest(holder.token.encode(), self.token.encode())
        ):
            who = self.owner or "the reporter"
            return f"{who} does not hold the lease of {node_id} attempt {attempt}"
        if self.queues is not None and holder.queue not in self.queues:
            raise Forbidden(_not_covered(holder.queue))
        return None


#: The node types a worker's handler may say it runs, by name.
_WORKER_NODE_TYPES = {t.value: t for t in NodeType if t.is_worker}


def handler_node_types(names: Sequence[str]) -> frozenset[NodeType] | None:
    """The node types a lease request says its handler runs (None: it says none, a
    worker older than the check); BadRequest for a name that is none of them."""
    if not names:
        return None
    unknown = sorted(set(names) - _WORKER_NODE_TYPES.keys())
    if unknown:
        raise BadRequest(
            f"node_types: {', '.join(map(repr, unknown))} is not a node type a worker runs "
            f"({', '.join(_WORKER_NODE_TYPES)})"
        )
    return frozenset(_WORKER_NODE_TYPES[name] for name in names)


def new_token() -> str:
    """An unguessable lease token (192 random bits)."""
    return secrets.token_urlsafe(24)


async def grant_leases(
    conn: repo.Connection,
    definitions: DefinitionCache,
    requests: Sequence[repo.LeaseRequest],
    *,
    max_input_bytes: int | None = None,
    sealer: Sealer | None = None,
    park_for: dt.timedelta = PARK_FOR,
    max_stored_input: int | None = None,
    explain_refused: bool = True,
) -> list[LeaseGrant | EngineError]:
    """``repo.acquire_leases`` and what each answer means to the worker: the grant
    with the node's timeout from its definition, a refusal, Forbidden for an attempt
    on a queue the request's credentials do not cover, or Misrouted for one that the
    entry cannot stand for (``_refusal``). An input over
    ``max_input_bytes`` is not granted but answered ``too_large``: sent, it could
    be too large for the worker's gRPC messages, and no worker could ever take it.

    The input is opened here (``sealer``), the one place a worker's input is in the
    clear before the worker. One sealed under a key not configured here is not
    given: the attempt is parked (``repo.park_task``: unspent, sent again after
    ``park_for``) with an ALERT naming the key.

    ``max_stored_input``: an attempt whose input is larger, as JSON text, is not
    granted (refused as any other, its task left as it was). Without
    ``explain_refused`` a refusal is a plain one, not looked into (``task_routing``):
    nobody hears why a task offered with a report was not leased; it is published."""
    leases = await repo.acquire_leases(conn, requests, max_input_bytes=max_stored_input)
    refused = [
        (r.run_id, r.task_id) for r, lease in zip(requests, leases, strict=True) if lease is None
    ]
    routing = await repo.task_routing(conn, refused) if refused and explain_refused else {}
    answers: list[LeaseGrant | EngineError] = []
    for request, lease in zip(requests, leases, strict=True):
        if lease is None:
            answers.append(_refusal(request, routing.get((request.run_id, request.task_id))))
            continue
        lease_input, context = lease.input, lease.context
        if sealer is not None:
            try:
                lease_input = sealer.open(request.run_id, lease_input)
                context = sealer.open(request.run_id, context)
            except SealingError as exc:  # its key is not here, or it was altered
                answers.append(await _park(conn, request, lease, exc, park_for))
                continue
        dag = await definitions.get(conn, lease.workflow_id, lease.workflow_version)
        node = dag.worker_node(lease.node_id)  # a MAP item: its inner node
        lease_input, encoded = worker_input(lease_input, node, max_input_bytes)
        if isinstance(encoded, limits.Refusal):
            answers.append(
                LeaseGrant(False, encoded.message, node_id=lease.node_id, too_large=True)
            )
            continue
        answers.append(
            LeaseGrant(
                True,
                input=lease_input,
                expires_at=lease.expires_at,
                max_attempts=lease.max_attempts or 0,
                token=lease.token,
                node_id=lease.node_id,
                node_type=lease.node_type,
                workflow_id=lease.workflow_id,
                workflow_version=lease.workflow_version,
                timeout_seconds=node.timeout_seconds if node is not None else None,
                input_json=encoded,
                context=context,
                priority=lease.priority,
            )
        )
    return answers


def worker_input(
    lease_input: Json, node: Node | None, max_bytes: int | None
) -> tuple[Json, str | limits.Refusal]:
    """The input a worker is handed (``_with_origin``) and its JSON text, or why no
    worker may be handed it: over ``max_bytes`` (the node input limit), or unstorable."""
    lease_input = _with_origin(lease_input, node)
    encoded = limits.encode(
        lease_input, "node input", max_bytes=max_bytes, setting="COMPOSER_MAX_NODE_INPUT_BYTES"
    )
    return lease_input, encoded


def _with_origin(lease_input: Json, node: Node | None) -> Json:
    """An input rendered before origins were recorded, given what its kind adds from
    the definition's text (an HTTP node's origin): the workers send its secrets nowhere
    else, and refuse an input that carries secrets and names none (docs/secrets.md)."""
    if (
        node is not None
        and isinstance(lease_input, dict)
        and SECRETS_KEY in lease_input
        and ORIGIN_KEY not in lease_input
    ):
        finished = dict(lease_input)
        node.type.kind.finish_input(node, finished)
        return finished
    return lease_input


async def _park(
    conn: repo.Connection,
    request: repo.LeaseRequest,
    lease: repo.Lease,
    exc: SealingError,
    park_for: dt.timedelta,
) -> LeaseGrant:
    ref = repo.TaskRef(request.run_id, request.task_id, lease.node_id, request.attempt)
    reason = f"parked: its input is {exc}"
    await repo.park_task(conn, ref, lease.token, park_for=park_for, reason=reason)
    alert(
        log,
        "run %s: %s attempt %d parked for %ds: its input is %s",
        request.run_id,
        lease.node_id,
        request.attempt,
        park_for.total_seconds(),
        exc,
    )
    return LeaseGrant(False, reason, node_id=lease.node_id)


def _refusal(request: repo.LeaseRequest, task: repo.TaskRouting | None) -> LeaseGrant | EngineError:
    """Why ``request`` was not granted, as the worker is to hear it: a plain refusal
    (a stale or duplicate entry: acknowledged quietly), Forbidden (credentials), or
    Misrouted (the entry cannot be a dispatch of the attempt to this handler: the
    worker drops it loudly; the task keeps waiting for its own entry).

    Queue and node type are checked only for a worker that says them (``queue``,
    ``node_types``). An attempt not due yet is refused to every worker; one that does
    not say its queue (older than the check) hears a plain refusal, which it
    acknowledges away as it always did."""
    if task is None:
        return LeaseGrant(False, NOT_GRANTED)
    if request.queues is not None and task.queue and task.queue not in request.queues:
        return Forbidden(_not_covered(task.queue))
    what = f"task {request.task_id} (node {task.node_id} of run {request.run_id})"
    if request.queue is not None and task.queue != request.queue:
        where = f"queue {task.queue!r}" if task.queue else f"no queue (a {task.node_type} node)"
        return Misrouted(
            f"{what} is on {where}, not on {request.queue!r}, whose stream this entry was "
            "read from: the entry is no dispatch of it (forged, or written by hand) and is "
            "dropped; the task's own entry is on its queue's stream"
        )
    if request.node_types is not None and task.node_type not in request.node_types:
        runs = ", ".join(sorted(request.node_types))
        reserved_for = RESERVED_QUEUES.get(task.queue or "")
        if reserved_for is not None:
            fix = (
                f"its workflow version was stored before queue {task.queue!r} was reserved "
                f"for {reserved_for} nodes: move the node to a queue of its own and apply the "
                "definition, then cancel the run and retry it from the node on the new version"
            )
        else:
            fix = (
                f"serve queue {task.queue!r} with a handler registered for {task.node_type} "
                f'nodes (worker.handler({task.queue!r}, node_types={{"{task.node_type}"}}))'
            )
        return Misrouted(
            f"{what} is of node type {task.node_type}, and the worker's handler for queue "
            f"{task.queue!r} runs {runs} nodes only: it is not leased and its entry is "
            f"dropped; {fix}"
        )
    if task.attempt == request.attempt and task.due_at is not None:
        message = (
            f"{what} attempt {request.attempt} is not due until {task.due_at.isoformat()} "
            "(a retry's backoff, or a parked attempt): an entry before then is no dispatch "
            "of it (forged, or written by hand) and is dropped; the attempt is sent when due"
        )
        return Misrouted(message) if request.queue is not None else LeaseGrant(False, message)
    return LeaseGrant(False, NOT_GRANTED)


def _not_covered(queue: str | None) -> str:
    return (
        f"the worker's token does not cover queue {queue!r}: give it that queue in the "
        "coordinator's COMPOSER_WORKER_TOKENS, or serve the queue with a token that has it"
    )
