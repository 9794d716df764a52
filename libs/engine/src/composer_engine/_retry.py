"""One transaction, tried again while the database is briefly unavailable.

The definition use case (and any other write that is not an event on a run)
runs its repository calls through ``in_transaction``: a transient failure
(connection lost, deadlock, serialization failure) or a retryable conflict
(two creates raced for the next version number, two deploys of one workflow)
rolls the transaction back and runs the whole function again, with a short
doubling backoff; other repository errors become the engine's own, which the
API maps to statuses. Events on runs keep ``Engine._in_tx``, which also knows
the state machine's errors.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import composer_repo as repo
from composer_engine.errors import BadRequest, Conflict, NotFound, Unavailable

log = logging.getLogger("composer.engine")
T = TypeVar("T")

#: How many times a write is tried before the caller is told to try again later.
DEFAULT_ATTEMPTS = 6


async def in_transaction(
    pool: repo.Pool,
    fn: Callable[[repo.Connection], Awaitable[T]],
    *,
    attempts: int = DEFAULT_ATTEMPTS,
    first_delay: float = 0.02,
    max_delay: float = 1.0,
) -> T:
    """Run ``fn`` in a transaction on ``pool`` and commit; retry it on a transient failure.

    Raises NotFound, Conflict or BadRequest for the repository's NotFound,
    (non-retryable) Conflict and Invalid, and Unavailable once ``attempts``
    tries have all failed transiently.
    """
    if attempts < 1:
        raise ValueError(f"attempts must be at least 1, not {attempts}")
    delay = first_delay
    for attempt in range(1, attempts + 1):
        try:
            async with repo.transaction(pool) as conn:
                return await fn(conn)
        except (repo.Transient, repo.Conflict) as exc:
            if not exc.retryable:
                raise Conflict(str(exc)) from exc
            if attempt == attempts:
                raise Unavailable(f"gave up after {attempt} attempts: {exc}; try again") from exc
            log.warning("transient failure (%s); retrying in %.2fs", exc, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, max_delay)
        except repo.NotFound as exc:
            raise NotFound(str(exc)) from exc
        except repo.Invalid as exc:
            raise BadRequest(str(exc)) from exc
    raise AssertionError("unreachable")  # pragma: no cover
