"""Moved to composer_queue; these names stay only for the lease-sweeper.

Removed when the sweeper moves to composer_queue (the app helper's branch):
import from ``composer_queue`` instead.
"""

from composer_queue import (
    DEFAULT_SHARDS,
    GROUP,
    MAX_INLINE_INPUT_BYTES,
    TaskMessage,
    queue_streams,
    shard_of,
    stream_name,
)

__all__ = [
    "DEFAULT_SHARDS",
    "GROUP",
    "MAX_INLINE_INPUT_BYTES",
    "TaskMessage",
    "queue_streams",
    "shard_of",
    "stream_name",
]
