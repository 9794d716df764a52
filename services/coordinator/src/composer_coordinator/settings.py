"""The coordinator's settings, from ``COMPOSER_*`` environment variables."""

from __future__ import annotations

from composer_common.settings import CommonSettings


class CoordinatorSettings(CommonSettings):
    grpc_addr: str = "127.0.0.1:50051"
    #: The token workers present (``authorization: Bearer <token>``).
    worker_token: str = ""
    pool_size: int = 16
    #: How long SIGTERM waits for in-flight calls.
    drain_seconds: float = 10.0
