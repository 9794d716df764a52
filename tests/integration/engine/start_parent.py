"""A process that starts a run whose first node is a SUB_WORKFLOW and then hangs,
for the test that kills it between its commit (the child run written with it) and
its delivery of the child's start. That delivery runs in the background right
after the commit, faster than any test could kill the process in between: it is
switched off here, which is what a kill at that instant leaves behind.

Usage: start_parent.py DATABASE_URL [WORKFLOW]  (prints ``committed <run id>``;
WORKFLOW: sw-parent by default, sw-map-parent for a MAP of SUB_WORKFLOWs)
"""

from __future__ import annotations

import asyncio
import sys

import composer_repo as repo
from composer_engine import Engine


async def main(database_url: str, workflow_id: str) -> None:
    pool = await repo.create_pool(database_url, min_size=1, max_size=2)
    engine = Engine(pool)
    engine._shell.deliver = None  # dies before its delivery: see the docstring
    started = await engine.start(workflow_id, input={"n": 1, "ns": [1, 2, 3]})
    print(f"committed {started.run_id}", flush=True)
    await asyncio.Event().wait()  # until killed: its delivery may never end


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "sw-parent"))
