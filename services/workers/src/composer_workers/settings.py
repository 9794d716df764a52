"""The built-in workers' settings, from ``COMPOSER_*`` environment variables.

The coordinator's address, the token, the shards, the lease TTL and
COMPOSER_HTTP_ALLOW_PRIVATE are the shared ones of ``composer_service.ServiceSettings``.
"""

from __future__ import annotations

from composer_service import ServiceSettings


class WorkersSettings(ServiceSettings):
    concurrency: int = 32
    #: Which built-in queues this process serves (comma-separated).
    queues: str = "http,python"
    http_max_response_bytes: int = 1024 * 1024
    python_memory_limit_bytes: int = 512 * 1024 * 1024
