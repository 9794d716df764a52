"""A process that finishes a child run and then hangs, for the test that kills it
between its commit and its delivery of the child's end to the parent.

Usage: finish_child.py DATABASE_URL RUN_ID TASK_ID NODE_ID OUTPUT_JSON
"""

from __future__ import annotations

import asyncio
import json
import sys

import composer_repo as repo
from composer_engine import Engine


async def main(database_url: str, run_id: str, task_id: str, node_id: str, output: str) -> None:
    pool = await repo.create_pool(database_url, min_size=1, max_size=2)
    engine = Engine(pool)
    await engine.report_completed(run_id, task_id, node_id, 0, json.loads(output))
    print("committed", flush=True)
    await asyncio.Event().wait()  # until killed: its delivery may never end


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
