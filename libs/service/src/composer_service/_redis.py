"""The one place the runtime opens and pings Redis.

Until libs/queue lands, this is composer_common.streams' client (RESP2,
decoded responses); then these two functions become the queue client's.
"""

from __future__ import annotations

from typing import Any

from composer_common import streams


def connect(url: str) -> Any:
    return streams.connect(url)


async def ping(client: Any) -> None:
    await streams.ping(client)
