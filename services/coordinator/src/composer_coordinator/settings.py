"""The coordinator's settings, from ``COMPOSER_*`` environment variables.

Its address (COMPOSER_GRPC_ADDR), the workers' token, the pool size and the
drain time are the shared ones of ``composer_service.ServerSettings``.
"""

from __future__ import annotations

from composer_service import ServerSettings


class CoordinatorSettings(ServerSettings):
    #: Group commit (docs/architecture.md §3.1): at most this many reports or leases
    #: go in one transaction or statement...
    batch_size: int = 256
    #: ...and at most this many of those run at once; what arrives meanwhile waits
    #: for the next.
    batches_in_flight: int = 2
