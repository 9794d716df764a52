"""The built-in workers' settings, from ``COMPOSER_*`` environment variables."""

from __future__ import annotations

import composer_queue as cq
from composer_common.settings import CommonSettings


class WorkersSettings(CommonSettings):
    grpc_addr: str = "127.0.0.1:50051"
    worker_token: str = ""
    shards: int = cq.DEFAULT_SHARDS
    concurrency: int = 32
    lease_ttl_seconds: float = 30.0
    #: Which built-in queues this process serves (comma-separated).
    queues: str = "http,python"
    #: COMPOSER_HTTP_ALLOW_PRIVATE: let HTTP nodes call loopback and private addresses.
    http_allow_private: bool = False
    http_max_response_bytes: int = 1024 * 1024
    python_memory_limit_bytes: int = 512 * 1024 * 1024
