"""composer_queue: the only room where Composer talks to Redis.

Streams carry task messages from the outbox-enqueuer to the workers; pub/sub
carries wake-up hints. Code above this library types its client as
``Queue``, catches ``QueueError`` subclasses, and retries with ``Backoff``;
``composer_queue.testing.FakeQueue`` stands in for Redis in unit tests.
"""

from composer_queue._backoff import Backoff
from composer_queue._cluster import ClusterQueue
from composer_queue._errors import (
    MalformedMessage,
    QueueCommandError,
    QueueError,
    QueueUnavailable,
)
from composer_queue._find import MAX_SCAN, find_attempts
from composer_queue._hints import (
    ENQUEUER,
    RUN_FINISHED,
    RUN_IDS_PER_HINT,
    TIMER,
    WEBHOOK,
    Subscriber,
    Waker,
    channel,
    finished_runs,
    send_hint,
    send_hints,
)
from composer_queue._messages import (
    AGING_SECONDS,
    BANDS,
    DEFAULT_BAND,
    DEFAULT_SHARDS,
    DELIVERIES,
    GROUP,
    PRIORITY,
    Backlog,
    Entry,
    Pending,
    Reclaimed,
    TaskMessage,
    band_stream,
    band_streams,
    effective_band,
    entry_ms,
    queue_streams,
    shard_of,
    stream_name,
    streams_pattern,
    task_stream,
)
from composer_queue._port import Queue, Subscription
from composer_queue._redis import RedisQueue, connect

__all__ = [
    "AGING_SECONDS",
    "BANDS",
    "DEFAULT_BAND",
    "DEFAULT_SHARDS",
    "DELIVERIES",
    "ENQUEUER",
    "GROUP",
    "MAX_SCAN",
    "PRIORITY",
    "RUN_FINISHED",
    "RUN_IDS_PER_HINT",
    "TIMER",
    "WEBHOOK",
    "Backlog",
    "Backoff",
    "ClusterQueue",
    "Entry",
    "MalformedMessage",
    "Pending",
    "Queue",
    "QueueCommandError",
    "QueueError",
    "QueueUnavailable",
    "Reclaimed",
    "RedisQueue",
    "Subscriber",
    "Subscription",
    "TaskMessage",
    "Waker",
    "band_stream",
    "band_streams",
    "channel",
    "connect",
    "effective_band",
    "entry_ms",
    "find_attempts",
    "finished_runs",
    "queue_streams",
    "send_hint",
    "send_hints",
    "shard_of",
    "stream_name",
    "streams_pattern",
    "task_stream",
]
