"""The outbox-enqueuer holds COMPOSER_WEBHOOK_SECRET to the token rule: a placeholder or
short secret stops it at start, before it connects to anything (nothing listens on
the URLs below), and an empty one means unsigned webhooks."""

from __future__ import annotations

import pytest

from composer_outbox_enqueuer.__main__ import serve
from composer_outbox_enqueuer.settings import EnqueuerSettings
from composer_service.tokens import WeakTokenError


@pytest.mark.parametrize("secret", ["CHANGE-ME-webhook-secret", "short"])
async def test_a_weak_webhook_secret_stops_the_enqueuer_at_start(secret: str) -> None:
    settings = EnqueuerSettings(
        webhook_secret=secret,
        database_url="postgresql://postgres@127.0.0.1:1/none",
        redis_url="redis://127.0.0.1:1/0",
    )
    with pytest.raises(WeakTokenError, match="COMPOSER_WEBHOOK_SECRET"):
        await serve(settings)
