"""Finding a task's entries in a stream, for the lease-sweeper's lost-dispatch check."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

from composer_queue._messages import band_streams
from composer_queue._port import Queue

#: A stream longer than this is not searched in one go: its candidates are taken
#: as live (a huge backlog is not a lost one).
MAX_SCAN = 100_000
_PAGE = 1000


async def find_attempts(
    queue: Queue, stream: str, task_ids: Iterable[str], *, max_scan: int = MAX_SCAN
) -> set[tuple[str, int]] | None:
    """The (task id, attempt) pairs of ``task_ids`` that have an entry in the shard whose
    (band 3) stream is ``stream``, in any of its priority bands (a task's band is its
    run's priority, which the caller need not know); None when a band holds more than
    ``max_scan`` entries (too long to search)."""
    wanted = set(task_ids)
    live: set[tuple[str, int]] = set()
    for _, band in band_streams(stream):
        found = await _find_in(queue, band, wanted, max_scan)
        if found is None:
            return None
        live |= found
    return live


async def _find_in(
    queue: Queue, stream: str, wanted: set[str], max_scan: int
) -> set[tuple[str, int]] | None:
    if await queue.length(stream) > max_scan:
        return None
    live: set[tuple[str, int]] = set()
    start = "-"
    while True:
        page = await queue.entries(stream, start=start, count=_PAGE)
        for entry in page:
            task_id = entry.fields.get("task_id")
            if task_id in wanted:
                with contextlib.suppress(ValueError):
                    live.add((task_id, int(entry.fields.get("attempt", ""))))
        if len(page) < _PAGE:
            return live
        start = "(" + page[-1].entry_id
