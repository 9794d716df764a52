"""Run and task ids: UUIDv7 strings, ordered by creation time.

Run ids are the partition key (docs/architecture.md §5), so a client-chosen run id must be
a UUIDv7 from a plausible time: a month's partition must exist for it, and
a far-future id would sort after every real run.
"""

from __future__ import annotations

import datetime as dt
import uuid

import uuid6

#: How far from now a client-supplied run id's timestamp may be.
CLIENT_ID_MAX_AGE = dt.timedelta(hours=24)
CLIENT_ID_MAX_AHEAD = dt.timedelta(hours=1)


class InvalidRunId(ValueError):
    """A client-supplied run id is not a UUIDv7 of an acceptable time."""


def new_id() -> str:
    """A fresh UUIDv7 string (time-ordered: index inserts stay at the right edge)."""
    return str(uuid6.uuid7())


def uuid7_time(value: str | uuid.UUID) -> dt.datetime:
    """The creation time a UUIDv7 carries (millisecond precision, UTC)."""
    u = value if isinstance(value, uuid.UUID) else uuid.UUID(value)
    return dt.datetime.fromtimestamp((u.int >> 80) / 1000, tz=dt.UTC)


def check_client_run_id(value: str, now: dt.datetime) -> str:
    """Return the canonical form of a client-chosen run id, or raise InvalidRunId saying why."""
    try:
        u = uuid.UUID(value)
    except (ValueError, AttributeError, TypeError) as exc:
        raise InvalidRunId(f"run_id {value!r} is not a UUID") from exc
    if u.version != 7 or u.variant != uuid.RFC_4122:
        raise InvalidRunId(
            f"run_id {value!r} is not a UUIDv7 (version {u.version}); generate one with uuid7()"
        )
    created = uuid7_time(u)
    if created < now - CLIENT_ID_MAX_AGE:
        raise InvalidRunId(
            f"run_id {value!r} was made at {created:%Y-%m-%d %H:%M}Z, more than 24 h ago"
        )
    if created > now + CLIENT_ID_MAX_AHEAD:
        raise InvalidRunId(
            f"run_id {value!r} is dated {created:%Y-%m-%d %H:%M}Z, more than 1 h ahead of the server clock"
        )
    return str(u)
