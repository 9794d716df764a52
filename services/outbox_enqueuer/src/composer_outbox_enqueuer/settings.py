"""The outbox-enqueuer's settings, from ``COMPOSER_*`` environment variables."""

from __future__ import annotations

import composer_queue as cq
from composer_common.settings import CommonSettings


class EnqueuerSettings(CommonSettings):
    shards: int = cq.DEFAULT_SHARDS
    batch_size: int = 200
    #: The poll interval: how long a lost hint can delay a dispatch at most.
    poll_seconds: float = 1.0
    webhook_batch_size: int = 20
    webhook_timeout_seconds: float = 10.0
    #: Webhook delivery is retried with backoff for about this long, then given up (and logged).
    webhook_give_up_seconds: float = 3600.0
    #: COMPOSER_HTTP_ALLOW_PRIVATE: webhooks to loopback/private addresses (local development).
    http_allow_private: bool = False
