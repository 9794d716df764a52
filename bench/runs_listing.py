"""Times GET /v1/runs' filtered pages the way the gateway reads them (composer_repo
through asyncpg, prepared statements reused, so past the fifth call PostgreSQL may
plan generically) on a database seeded by bench/runs_listing_seed.sql.

    .venv/bin/python bench/runs_listing.py postgresql://…/composer_listing_bench

Prints, per filter, the median and the slowest of 20 pages of 50 (first page and
the page after it) in milliseconds (docs/architecture.md §5, "Finding runs").
"""

from __future__ import annotations

import asyncio
import datetime as dt
import statistics
import sys
import time
from typing import Any

import composer_repo as repo
from composer_core.model import RunStatus

NOW = dt.datetime.now(dt.UTC)
FILTERS: list[tuple[str, dict[str, Any]]] = [
    ("label customer:acme (~100 runs)", {"labels": {"customer": "acme"}}),
    ("label env:staging (~100,000 runs)", {"labels": {"env": "staging"}}),
    (
        "labels customer:c5 env:prod region:r2",
        {"labels": {"customer": "c5", "env": "prod", "region": "r2"}},
    ),
    (
        "label customer:acme + status FAILED",
        {"labels": {"customer": "acme"}, "status": RunStatus.FAILED},
    ),
    (
        "label customer:c5 + status RUNNING",
        {"labels": {"customer": "c5"}, "status": RunStatus.RUNNING},
    ),
    ("label env:prod + status RUNNING", {"labels": {"env": "prod"}, "status": RunStatus.RUNNING}),
    ("label region:r3 + workflow wf-3", {"labels": {"region": "r3"}, "workflow_id": "wf-3"}),
    (
        "workflow wf-3 + created in one day, a month ago",
        {
            "workflow_id": "wf-3",
            "created_after": NOW - dt.timedelta(days=31),
            "created_before": NOW - dt.timedelta(days=30),
        },
    ),
    (
        "label customer:acme + created in the last 30 days",
        {"labels": {"customer": "acme"}, "created_after": NOW - dt.timedelta(days=30)},
    ),
]


async def main(url: str) -> None:
    pool = await repo.create_pool(url, min_size=1, max_size=1)
    try:
        async with pool.acquire() as conn:  # the connection's catalogue caches, once
            await repo.list_runs(conn, labels={"env": "prod"}, limit=1)
        for name, kwargs in FILTERS:
            times: list[float] = []
            for _ in range(10):
                cursor = None
                for _page in range(2):
                    async with pool.acquire() as conn, conn.transaction():
                        began = time.perf_counter()
                        page = await repo.list_runs(conn, cursor=cursor, limit=50, **kwargs)
                        times.append((time.perf_counter() - began) * 1000)
                    cursor = page.next_cursor
                    if cursor is None:
                        break
            print(
                f"{name:52} median {statistics.median(times):6.1f} ms, "
                f"slowest {max(times):6.1f} ms ({len(page.runs)} runs on the last page)"
            )
    finally:
        await pool.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
