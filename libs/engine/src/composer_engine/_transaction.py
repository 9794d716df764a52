"""The one retry loop: one transaction, run again while the database is briefly
unavailable — shared by events on runs, leases and the definitions use case.

What goes wrong maps to one EngineError (docs/architecture.md §4.7):

- a lost connection (``repo.Transient``) or a lost race that may succeed now (a
  retryable ``repo.Conflict``: two creates of the next definition version) rolls
  back and runs the whole function again, with jittered backoff; after
  ``attempts`` tries it is Unavailable;
- a COMMIT whose answer was lost is not run again blind: ``committed`` asks the
  database whether it committed (§4.8); when it cannot say, Unavailable;
- a StaleSnapshot (a fenced write matched no row under the run lock) is applied
  once more on a fresh snapshot; a second one is a bug;
- the repository's NotFound, Conflict and Invalid, and a template error, are
  the caller's: NotFound, Conflict, BadRequest;
- anything else is a bug: logged once as an ALERT naming what the transaction
  was deciding, and raised as Internal — never Unavailable, which would make
  clients retry a bug forever.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import composer_queue as cq
import composer_repo as repo
from composer_common.logs import alert
from composer_core import errors as core_errors
from composer_engine._admission import Gate
from composer_engine._publish import Dispatched
from composer_engine._tx import Tx
from composer_engine.errors import (
    BadRequest,
    Conflict,
    EngineError,
    Internal,
    NotFound,
    Parked,
    StaleSnapshot,
    Unavailable,
)
from composer_engine.sealing import KeyUnavailable

log = logging.getLogger("composer.engine")
T = TypeVar("T")

#: How many times a transaction is tried before the caller is told to try again later.
DEFAULT_ATTEMPTS = 6


async def in_transaction(
    pool: repo.Pool,
    fn: Callable[[Tx], Awaitable[T]],
    *,
    attempts: int = DEFAULT_ATTEMPTS,
    single_statement: bool = False,
    first_delay: float = 0.02,
    publish: Callable[[Sequence[Dispatched]], Awaitable[None]] | None = None,
    deliver: Callable[[Sequence[int]], None] | None = None,
    gate: Gate | None = None,
) -> T:
    """Run ``fn`` in a transaction on ``pool``, commit, then ``publish`` the
    dispatches it committed, hand ``deliver`` its events for other runs
    (engine/_run_events.py), and run its after-commit work.

    ``single_statement``: ``fn`` runs one statement, atomic by itself, so no
    BEGIN/COMMIT is sent around it (leases use it: two round trips fewer).
    ``first_delay``: the first backoff (jittered, doubling up to a second).
    """
    if attempts < 1:
        raise ValueError(f"attempts must be at least 1, not {attempts}")
    backoff = cq.Backoff(first_delay, 1.0)
    borrow = repo.connection if single_statement else repo.tracked_transaction
    stale = 0
    for attempt in range(1, attempts + 1):
        tx: Tx | None = None
        try:
            try:
                async with borrow(pool) as conn:
                    tx = Tx(conn, gate)
                    result = await fn(tx)
                    await tx.writes.flush(tx)
            except repo.CommitUnknown as exc:
                if not await committed(pool, exc, attempts=attempts):
                    raise
            assert tx is not None  # the block ran to its COMMIT
            if publish is not None and tx.dispatched:
                await publish(tx.dispatched)
            if deliver is not None and tx.run_events:
                deliver(tx.run_events)
            await tx.run_after_commit()
            return result
        except (repo.Transient, repo.Conflict) as exc:
            if not exc.retryable:
                raise Conflict(str(exc)) from exc
            if attempt == attempts:
                raise Unavailable(
                    f"database unavailable after {attempt} attempts: {exc}; try again later"
                ) from exc
            delay = backoff.next()
            log.warning("%s; retrying in %.2fs", exc, delay)
            await asyncio.sleep(delay)
        except StaleSnapshot as exc:
            stale += 1
            if stale > 1:
                raise internal_error(tx, f"stale snapshot twice in a row: {exc}") from exc
            log.warning("stale snapshot (%s); applying the event once more", exc)
        except repo.NotFound as exc:
            raise NotFound(str(exc)) from exc
        except (repo.Invalid, core_errors.TemplateError) as exc:
            raise BadRequest(str(exc)) from exc
        except EngineError:
            raise
        except KeyUnavailable as exc:
            raise parked(tx, exc) from exc
        except Exception as exc:  # a bug, here or below: say so once, never retry it
            raise internal_error(tx, f"{type(exc).__name__}: {exc}") from exc
    raise Unavailable(f"gave up after {attempts} attempts")  # pragma: no cover


async def committed(pool: repo.Pool, lost: repo.CommitUnknown, *, attempts: int) -> bool:
    """Whether the transaction whose COMMIT answer was lost committed after all.

    Why: applying its event again blind would apply it twice — one signal would
    complete two WAIT_FOR_EVENT nodes, a start would find its own run and answer
    409. Committed: the caller goes on as after a commit it saw (publish, hooks,
    answer). Raises Unavailable when the database cannot say within ``attempts``
    tries: the outcome is unknown, and the caller must not be told it failed."""
    backoff = cq.Backoff(0.05, 1.0)
    for attempt in range(1, attempts + 1):
        try:
            status = await repo.commit_status(pool, lost.xid, lost.backend_pid)
        except repo.Transient as exc:
            if attempt == attempts:
                raise Unavailable(
                    f"the outcome of a commit is unknown ({lost}); the database could not "
                    f"be asked after {attempt} attempts: {exc}; look before trying again"
                ) from exc
            await asyncio.sleep(backoff.next())
            continue
        log.warning(
            "the connection was lost during COMMIT of transaction %s: it %s",
            lost.xid,
            "committed" if status == "committed" else "was rolled back; applying it again",
        )
        return status == "committed"
    raise AssertionError("unreachable")  # pragma: no cover


def parked(tx: Tx | None, exc: KeyUnavailable) -> Parked:
    """A run whose documents do not open here waits, unchanged, until its key is
    configured again: one ALERT line naming the key, and Unavailable (the caller
    tries again later; nothing was written, no attempt spent)."""
    where = tx.deciding() if tx is not None and tx.deciding else "outside a decision"
    alert(log, "parked (%s): %s", where, exc)
    return Parked(f"the run is parked: {exc}")


def internal_error(tx: Tx | None, problem: str) -> Internal:
    """The Internal error of a failed transaction, after its one ALERT line."""
    where = tx.deciding() if tx is not None and tx.deciding else "outside a decision"
    alert(log, "internal error (%s): %s", where, problem)
    return Internal(f"internal error: {problem}")
