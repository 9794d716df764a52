"""One transaction, run again while the database is briefly unavailable — the one retry
loop of the engine, shared by events on runs and the definitions use case.

What goes wrong maps to one EngineError (docs/architecture.md §4.7):

- a lost connection (``repo.Transient``) or a lost race that may succeed now (a
  retryable ``repo.Conflict``: two creates of the next definition version) rolls
  back and runs the whole function again, with jittered backoff; after
  ``attempts`` tries it is Unavailable;
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
from collections.abc import Awaitable, Callable
from typing import TypeVar

import composer_repo as repo
from composer_common.logs import alert
from composer_core import errors as core_errors
from composer_engine._tx import Tx
from composer_engine.errors import (
    BadRequest,
    Conflict,
    EngineError,
    Internal,
    NotFound,
    StaleSnapshot,
    Unavailable,
)
from composer_queue import Backoff

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
) -> T:
    """Run ``fn`` in a transaction on ``pool``, commit, then run its after-commit work.

    ``single_statement``: ``fn`` runs one statement, atomic by itself, so no
    BEGIN/COMMIT is sent around it (leases use it: two round trips fewer).
    ``first_delay``: the first backoff (jittered, doubling up to a second).
    """
    if attempts < 1:
        raise ValueError(f"attempts must be at least 1, not {attempts}")
    backoff = Backoff(first_delay, 1.0)
    borrow = repo.connection if single_statement else repo.transaction
    stale = 0
    for attempt in range(1, attempts + 1):
        tx: Tx | None = None
        try:
            async with borrow(pool) as conn:
                tx = Tx(conn)
                result = await fn(tx)
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
                raise _internal(tx, f"stale snapshot twice in a row: {exc}") from exc
            log.warning("stale snapshot (%s); applying the event once more", exc)
        except repo.NotFound as exc:
            raise NotFound(str(exc)) from exc
        except (repo.Invalid, core_errors.TemplateError) as exc:
            raise BadRequest(str(exc)) from exc
        except EngineError:
            raise
        except Exception as exc:  # a bug, here or below: say so once, never retry it
            raise _internal(tx, f"{type(exc).__name__}: {exc}") from exc
    raise Unavailable(f"gave up after {attempts} attempts")  # pragma: no cover


def _internal(tx: Tx | None, problem: str) -> Internal:
    """The Internal error of a failed transaction, after its one ALERT line."""
    where = tx.deciding if tx is not None and tx.deciding else "outside a decision"
    alert(log, "internal error (%s): %s", where, problem)
    return Internal(f"internal error: {problem}")
