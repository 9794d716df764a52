"""The coordinator's settings, from ``COMPOSER_*`` environment variables.

Its address (COMPOSER_GRPC_ADDR), the workers' token, the pool size and the
drain time are the shared ones of ``composer_service.ServerSettings``.
"""

from __future__ import annotations

from composer_service import ServerSettings


class CoordinatorSettings(ServerSettings):
    pass
