"""Connections: the JSON codecs, pools, and the translation of driver errors.

Every repository function takes the connection it runs on and never begins or
commits: the caller owns the transaction. A plain connection and one borrowed
from a pool both work.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, ParamSpec, TypeAlias, TypeVar

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from composer_repo._errors import (
    Conflict,
    Invalid,
    NoPartition,
    NotFound,
    RepoError,
    Transient,
)

#: A connection a repository function runs on: a plain one or one borrowed from a pool.
Connection: TypeAlias = "asyncpg.Connection[asyncpg.Record] | PoolConnectionProxy[asyncpg.Record]"
#: A pool whose connections have the codecs registered (see ``create_pool``).
Pool: TypeAlias = "asyncpg.Pool[asyncpg.Record]"

P = ParamSpec("P")
R = TypeVar("R")


async def init_connection(conn: asyncpg.Connection[Any]) -> None:
    """Register the JSON codecs: JSON and JSONB columns read and write Python values.

    Run once per connection: pass it as a pool's ``init`` (``create_pool`` does),
    or call it after ``asyncpg.connect``. SQL NULL is None both ways, so a JSON
    ``null`` value and a missing one look alike, which is what the engine wants.
    """
    for typename in ("jsonb", "json"):
        await conn.set_type_codec(
            typename,
            encoder=_dumps,
            decoder=json.loads,
            schema="pg_catalog",
        )


def _dumps(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def json_texts(values: Iterable[object]) -> list[str | None]:
    """Documents for an array parameter, as JSON texts (None stays NULL): a ``jsonb[]``
    parameter takes a list value for a dimension of the array (``[[1, 2]]`` would be
    two elements), so statements take ``text[]`` and cast each element."""
    return [None if v is None else _dumps(v) for v in values]


async def connect(url: str, **kwargs: Any) -> asyncpg.Connection[asyncpg.Record]:
    """Open one connection with the codecs registered."""
    with translate_errors():
        conn: asyncpg.Connection[asyncpg.Record] = await asyncpg.connect(url, **kwargs)
    try:
        await init_connection(conn)
    except BaseException:
        await conn.close()
        raise
    return conn


#: How long a connection keeps a prepared statement, and so PostgreSQL's plan of it
#: (``create_pool``'s ``plan_seconds``).
PLAN_SECONDS = 10

#: The planner settings of a pooled connection with ``index_plans`` (``create_pool``):
#: every join a nested loop, every table read through an index where one serves, and
#: no JIT: a plan that must read a table with no index that serves (``workers``) keeps
#: the cost the settings add to that read (10^10), far past ``jit_above_cost``, and
#: PostgreSQL spent 150-750 ms compiling each such statement.
INDEX_PLANS: dict[str, str] = {
    "enable_seqscan": "off",
    "enable_hashjoin": "off",
    "enable_mergejoin": "off",
    "jit": "off",
    "plan_cache_mode": "force_generic_plan",
}


async def create_pool(
    url: str,
    *,
    min_size: int = 1,
    max_size: int = 10,
    plan_seconds: int = PLAN_SECONDS,
    index_plans: bool = True,
    **kwargs: Any,
) -> Pool:
    """Create a pool whose connections have the codecs registered. Close it when done.

    Each connection prepares a statement again ``plan_seconds`` after it first
    prepared it (asyncpg's ``max_cached_statement_lifetime``; 0: never), so its plan
    is never older than that. PostgreSQL keeps the generic plan of a prepared statement
    until the table's statistics change (ANALYZE): one made while this month's
    partitions were nearly empty (a new install, a new month, a server without
    autovacuum, whose naptime is a minute) scans them whole by hash join as they fill.
    Measured on W1, a fresh database: the lease statement 7.1 ms a call, 1.9 with
    plans at most 10 s old, and PostgreSQL's CPU a step down by a quarter to a third.
    The price: a statement prepared again makes five custom plans before PostgreSQL
    keeps a generic one, on each connection (docs/architecture.md §5, "Plans").

    With ``index_plans`` (the default) each connection also starts with
    ``INDEX_PLANS``: no sequential scan where an index serves, no hash or merge
    join. Every statement here names its rows by key (a run id, a batch of ids
    joined from ``unnest``) or reads a small partial index, so a nested loop of
    index probes is the right plan at any size; but a partition that was small
    when its plan was made gets a scan of all of it, and ten seconds is long
    enough for one to grow tenfold (W1 fills a fresh month at ~1,000 steps a
    second). Measured on W1 in a fresh database: the lease statement, the
    completions and the publisher's deletions still scanned the month's
    partition whole (800-900 buffers a call), and PostgreSQL's CPU a step fell
    by about a quarter without them. And plans are generic
    (``plan_cache_mode``): PostgreSQL otherwise made a custom plan at every call
    of the batch statements on the partitioned tables (1-2 ms to bind, 0.2 to
    run, on an idle step's path); every statement's generic plan is checked to
    read by key on empty partitions (tests/integration/repo/test_generic_plans.py).

    A connection going back to the pool is not sent asyncpg's reset query
    (``pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL``): that is a
    round trip and a transaction of its own after every transaction the engine
    commits, for session state nothing here leaves behind. asyncpg still rolls
    back a transaction it knows is open; one it does not know about (a call cut
    short mid-statement) is ``borrow``'s to end, so borrow connections through it.
    Whoever takes session state on a pooled connection gives it back before
    releasing it (``singleton`` unlocks its lock).
    """
    with translate_errors():
        pool: Pool = await asyncpg.create_pool(
            url,
            min_size=min_size,
            max_size=max_size,
            init=init_connection,
            reset=_keep_session,
            max_cached_statement_lifetime=plan_seconds,
            **_with_plan_settings(kwargs, index_plans),
        )
    return pool


def _with_plan_settings(kwargs: dict[str, Any], index_plans: bool) -> dict[str, Any]:
    """``kwargs`` with ``INDEX_PLANS`` under its ``server_settings`` (those given win)."""
    if not index_plans:
        return kwargs
    return kwargs | {"server_settings": INDEX_PLANS | dict(kwargs.get("server_settings") or {})}


async def _keep_session(conn: asyncpg.Connection[Any]) -> None:
    """The pool's reset: nothing beyond asyncpg's own (an open transaction rolled back)."""


@asynccontextmanager
async def borrow(pool: Pool) -> AsyncIterator[Connection]:
    """Borrow a pooled connection for the block. It goes back untouched when the block
    ends cleanly, and provably idle or closed when it ends with any exception.

    Why: a call cancelled inside a statement asyncpg had not prepared on this
    connection yet, after asyncpg sent Parse/Describe/Flush and before its Sync,
    leaves PostgreSQL in an implicit transaction that asyncpg believes is not
    there. Nothing would end it (the pool sends no reset query), and the next
    BEGIN on the connection would join it: a stale ``now()`` and the statement's
    locks held while the connection sits in the pool. So after an exception the
    connection gets one simple query (a round trip, on the error path only): it
    ends such an implicit transaction (which holds no writes, only the parse's
    locks), and its ReadyForQuery says whether a transaction is still open. Idle,
    the connection goes back; otherwise, after a cancellation (any BaseException
    that is not an Exception), or when that query fails, it is terminated, which
    needs no await that a second cancellation could cut short, and the pool opens
    a new one when it needs one.
    """
    async with pool.acquire() as conn:
        try:
            yield conn
        except BaseException as exc:
            await _settle(conn, exc)
            raise


async def _settle(conn: Connection, exc: BaseException) -> None:
    """Leave ``conn`` idle with no transaction, or terminate it (see ``borrow``)."""
    idle = False
    try:
        if isinstance(exc, Exception) and not conn.is_closed():
            # Not ROLLBACK: after transaction()'s own rollback it would put a
            # "no transaction in progress" warning in the server's log every time.
            await conn.execute("SELECT 1")  # no arguments: the simple-query protocol
            idle = not conn.is_in_transaction()
    except Exception:
        pass  # the block's exception is the one to raise; the connection goes
    finally:
        if not idle:
            _terminate(conn)


def _terminate(conn: Connection) -> None:
    # an InterfaceError says it is back in the pool already: it was lost, and
    # asyncpg closed and released it
    with contextlib.suppress(asyncpg.InterfaceError):
        conn.terminate()


# -- driver errors -------------------------------------------------------------

#: Unique and exclusion constraints whose violation means a concurrent writer won a race.
_RACES = {
    "workflow_definitions_pkey": "another version of this workflow was created at the same time; try again",
    "workflow_definitions_one_deployed": "another version of this workflow was deployed at the same time; try again",
}

_NO_PARTITION = re.compile(r'no partition of relation "(?P<table>[^"]+)" found for row')


@contextmanager
def translate_errors() -> Iterator[None]:
    """Map asyncpg and connection errors to RepoError subclasses, most specific first."""
    try:
        yield
    except RepoError:
        raise
    except asyncpg.UniqueViolationError as exc:
        constraint = exc.constraint_name or ""
        race = _RACES.get(constraint)
        if race is not None:
            raise Conflict(race, retryable=True, sqlstate=exc.sqlstate) from exc
        raise Conflict(_describe(exc), sqlstate=exc.sqlstate) from exc
    except asyncpg.ExclusionViolationError as exc:
        race = _RACES.get(exc.constraint_name or "")
        raise Conflict(
            race or _describe(exc), retryable=race is not None, sqlstate=exc.sqlstate
        ) from exc
    except asyncpg.ForeignKeyViolationError as exc:
        raise NotFound(_describe(exc), sqlstate=exc.sqlstate) from exc
    except asyncpg.CheckViolationError as exc:
        match = _NO_PARTITION.search(str(exc))
        if match is not None:
            raise NoPartition(
                _no_partition_message(match["table"], exc), sqlstate=exc.sqlstate
            ) from exc
        raise Invalid(_describe(exc), sqlstate=exc.sqlstate) from exc
    except (asyncpg.IntegrityConstraintViolationError, asyncpg.DataError) as exc:
        raise Invalid(_describe(exc), sqlstate=exc.sqlstate) from exc
    except (
        asyncpg.TransactionRollbackError,
        asyncpg.LockNotAvailableError,
        asyncpg.QueryCanceledError,
        asyncpg.CannotConnectNowError,
        asyncpg.AdminShutdownError,
        asyncpg.TooManyConnectionsError,
        asyncpg.PostgresConnectionError,
    ) as exc:
        raise Transient(f"database: {_describe(exc)}", sqlstate=exc.sqlstate) from exc
    except asyncpg.PostgresError as exc:
        raise RepoError(f"database: {_describe(exc)}", sqlstate=exc.sqlstate) from exc
    except (OSError, TimeoutError) as exc:
        raise Transient(f"database connection: {exc}") from exc
    except asyncpg.InterfaceError as exc:
        if "connection is closed" in str(exc):
            # The server dropped the connection (a restart, a terminated backend) and a
            # later call on it (the rollback or commit on the way out of a transaction)
            # found it closed: the same loss as the error that came first, so retry.
            raise Transient(f"database connection lost: {exc}") from exc
        # Misuse of the driver (a released connection, two queries at once on one
        # connection): a bug in the caller, not something to retry.
        raise RepoError(f"database driver: {exc}") from exc
    except asyncpg.exceptions.InternalClientError as exc:
        # The driver's protocol state after a connection broke mid-operation ("cannot
        # switch to state …; another operation is in progress", seen on COMMIT while
        # PostgreSQL restarted): that connection is done for; a fresh one will do.
        raise Transient(f"database connection broken: {exc}") from exc


def translated(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Decorate a repository function so driver errors leave it as RepoErrors."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with translate_errors():
            return await fn(*args, **kwargs)

    return wrapper


def _describe(exc: asyncpg.PostgresError) -> str:
    detail = getattr(exc, "detail", None)
    return f"{exc} ({detail})" if detail else str(exc)


def _no_partition_message(table: str, exc: asyncpg.PostgresError) -> str:
    detail = getattr(exc, "detail", None) or ""
    return (
        f"no partition of {table} holds this run id ({detail.rstrip('.') or 'no detail'}): "
        "run ids are UUIDv7s and their timestamp picks the monthly partition, so the id "
        "must be recent and that month's partition must exist; create partitions with "
        "`make migrate` or SELECT composer_ensure_partitions() (the partition-manager "
        "keeps them ahead)"
    )
