"""The TypeScript SDK reads the streams with the Python side's own Lua script (a stream
contract: at most ``count`` entries across a queue's shards, NOGROUP told apart): the
two copies stay the same text, so neither SDK can drift from the other."""

from __future__ import annotations

import re
from pathlib import Path

from composer_queue import _redis

QUEUE_TS = Path(__file__).resolve().parents[3] / "sdks" / "typescript" / "src" / "queue.ts"


def test_the_typescript_sdk_reads_with_the_same_script() -> None:
    match = re.search(r"^const READ = `(.*?)`;$", QUEUE_TS.read_text(), re.MULTILINE | re.DOTALL)
    assert match is not None, f"no READ script in {QUEUE_TS}"
    assert match.group(1) == _redis._READ
