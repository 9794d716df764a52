"""The independent ledger: one append-only JSON-lines file per worker process.

Written with ``os.write`` on an ``O_APPEND`` descriptor, outside every engine
transaction, so a line is on disk (in the page cache) the moment the call
returns, even if the process is SIGKILLed right after. Record kinds:

- ``lease``:  a lease granted (``t0`` request sent, ``t1`` reply, ``exp`` its expiry);
- ``renew``:  a renewal (``ok``; ``exp`` the new expiry when ok);
- ``start``/``end``: one execution of a handler (``x`` pairs them; ``outcome`` on end);
- ``report``: the outcome reported (``accepted``: applied, or stale and ignored).

Times are ``time.time()`` seconds, the clock PostgreSQL also reads on this machine.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


class LedgerWriter:
    def __init__(self, folder: Path, owner: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f"{owner}.jsonl"
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, kind: str, **fields: Any) -> None:
        line = json.dumps({"k": kind, **fields}, separators=(",", ":")) + "\n"
        os.write(self._fd, line.encode())

    def close(self) -> None:
        os.close(self._fd)


def read_ledger(folder: Path) -> list[dict[str, Any]]:
    """Every record of every worker; a last line cut short by a SIGKILL is skipped."""
    records: list[dict[str, Any]] = []
    for path in sorted(folder.glob("*.jsonl")):
        records.extend(read_ledger_file(path))
    return records


def read_ledger_file(path: Path) -> list[dict[str, Any]]:
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records
