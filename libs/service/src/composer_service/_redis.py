"""The one place the runtime touches the Redis contract: open a client, ping it, and the
default shard count the shared settings offer.

Until libs/queue lands, this is composer_common.streams' (RESP2, decoded
responses); then these become the queue client's.
"""

from __future__ import annotations

from typing import Any

from composer_common import streams

#: Streams per queue when COMPOSER_SHARDS is not set.
DEFAULT_SHARDS = streams.DEFAULT_SHARDS


def connect(url: str) -> Any:
    return streams.connect(url)


async def ping(client: Any) -> None:
    await streams.ping(client)


async def close(client: Any) -> None:
    await client.aclose()
