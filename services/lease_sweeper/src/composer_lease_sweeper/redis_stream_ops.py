"""``StreamOps`` over redis-py: the sweeper's only Redis module.

Redis errors are translated here into ``StreamsUnavailable``; "NOGROUP" (no
worker ever created the group) means nothing is pending. At merge this
module gives way to libs/queue's stream operations.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any

from redis.exceptions import RedisError, ResponseError

from composer_common import streams
from composer_lease_sweeper.stream_ops import (
    Backlog,
    Reclaimed,
    StreamEntry,
    StreamsUnavailable,
)

#: The consumer that reclaimed entries belong to while the sweeper decides on them.
CONSUMER = "composer-lease-sweeper"
_PAGE = 1000


@contextlib.contextmanager
def _translated(what: str, stream: str) -> Iterator[None]:
    try:
        yield
    except (RedisError, OSError) as exc:
        raise StreamsUnavailable(f"cannot {what} {stream}: {exc}") from exc


class RedisStreamOps:
    """The queue streams under ``prefix`` on a redis.asyncio client (decoded responses)."""

    def __init__(self, redis: Any, prefix: str) -> None:
        self.redis = redis
        self.prefix = prefix

    async def queue_streams(self) -> list[str]:
        pattern = f"{self.prefix}:q:*"
        with _translated("list the streams", pattern):
            found = [
                s async for s in self.redis.scan_iter(match=pattern, count=1000, _type="stream")
            ]
        return sorted(found)

    async def reclaim(
        self, stream: str, *, min_idle_seconds: float, count: int, cursor: str | None = None
    ) -> Reclaimed:
        with _translated("reclaim entries on", stream):
            try:
                next_id, claimed, *_ = await self.redis.xautoclaim(
                    stream,
                    streams.GROUP,
                    CONSUMER,
                    int(min_idle_seconds * 1000),
                    start_id=cursor or "0-0",
                    count=count,
                )
            except ResponseError as exc:
                if "NOGROUP" in str(exc):
                    return Reclaimed([], None)  # no worker ever read it: nothing is pending
                raise
        entries = [StreamEntry(entry_id, data) for entry_id, data in claimed if data is not None]
        return Reclaimed(entries, None if next_id == "0-0" else next_id)

    async def ack(self, stream: str, entry_ids: Sequence[str]) -> None:
        if not entry_ids:
            return
        with _translated("acknowledge entries on", stream):
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.xack(stream, streams.GROUP, *entry_ids)
                pipe.xdel(stream, *entry_ids)
                await pipe.execute()

    async def redeliver(self, stream: str, entry_id: str, fields: Mapping[str, str]) -> None:
        with _translated("deliver an entry again on", stream):
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.xadd(stream, dict(fields))
                pipe.xack(stream, streams.GROUP, entry_id)
                pipe.xdel(stream, entry_id)
                await pipe.execute()

    async def length(self, stream: str) -> int:
        with _translated("measure", stream):
            return int(await self.redis.xlen(stream))

    async def attempts_in(self, stream: str, task_ids: Collection[str]) -> set[tuple[str, int]]:
        wanted = set(task_ids)
        live: set[tuple[str, int]] = set()
        start = "-"
        with _translated("search", stream):
            while True:
                page = await self.redis.xrange(stream, min=start, max="+", count=_PAGE)
                for _, data in page:
                    task_id = data.get("task_id")
                    if task_id in wanted:
                        with contextlib.suppress(ValueError):
                            live.add((task_id, int(data.get("attempt", ""))))
                if len(page) < _PAGE:
                    return live
                start = "(" + page[-1][0]

    async def backlog(self, stream: str) -> Backlog | None:
        with _translated("read the groups of", stream):
            try:
                groups = await self.redis.xinfo_groups(stream)
            except ResponseError:
                return None  # the stream is gone
        for group in groups:
            if group.get("name") == streams.GROUP:
                waiting = int(group.get("lag") or 0) + int(group.get("pending") or 0)
                return Backlog(waiting, int(group.get("consumers") or 0))
        return None
