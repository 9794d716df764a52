"""The outbox-enqueuer's settings, from ``COMPOSER_*`` environment variables.

The shards, COMPOSER_HTTP_ALLOW_PRIVATE and COMPOSER_HTTP_ALLOW_NETWORKS (for
webhooks) are the shared ones of ``composer_service.ServiceSettings``.
"""

from __future__ import annotations

from composer_service import ServiceSettings


class EnqueuerSettings(ServiceSettings):
    batch_size: int = 200
    #: A dispatch due at once is published by whoever committed it, right after the
    #: commit; the enqueuer takes it only once it is this old (that publish was lost).
    outbox_grace_seconds: float = 2.0
    #: The poll interval: how long a lost hint can delay a dispatch at most.
    poll_seconds: float = 1.0
    webhook_batch_size: int = 20
    webhook_timeout_seconds: float = 10.0
    #: Webhook delivery is retried with backoff for about this long, then given up (and logged).
    webhook_give_up_seconds: float = 3600.0
    #: COMPOSER_WEBHOOK_SECRET: the key of each webhook's ``Composer-Signature`` (``v2=``,
    #: HMAC-SHA256 of ``"<Composer-Delivery>.<Composer-Timestamp>." + body``); empty: webhooks
    #: go out unsigned (a warning at start). Give receivers the same secret.
    webhook_secret: str = ""
