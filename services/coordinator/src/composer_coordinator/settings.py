"""The coordinator's settings, from ``COMPOSER_*`` environment variables.

Its address (COMPOSER_GRPC_ADDR), the all-queues worker token, the pool size and
the drain time are the shared ones of ``composer_service.ServerSettings``.
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
    #: COMPOSER_WORKER_TOKENS="token:queue1|queue2,…": worker tokens that may serve only
    #: their queues (``token:*``: all). Instead of COMPOSER_WORKER_TOKEN (one for every
    #: queue), not beside it: the coordinator refuses to start with both.
    worker_tokens: str = ""
    #: COMPOSER_BUILTIN_WORKER_TOKEN: the built-in workers' own token, for their queues
    #: (http, python) only; they present it as their COMPOSER_WORKER_TOKEN.
    builtin_worker_token: str = ""
    #: COMPOSER_GRPC_TLS_CERT and COMPOSER_GRPC_TLS_KEY: PEM files of the certificate (its
    #: chain) and private key to serve the worker protocol over TLS; both or neither
    #: (unset: plaintext). Workers then set COMPOSER_GRPC_TLS_CA.
    grpc_tls_cert: str | None = None
    grpc_tls_key: str | None = None
    #: The longest lease a worker gets, whatever TTL it asks for: a worker that dies
    #: holding a lease delays its task at most this long.
    max_lease_seconds: float = 300.0
    #: COMPOSER_HEARTBEAT_WRITE_SECONDS: a worker's heartbeat is written to the workers
    #: table at most this often (a beat between is dropped, unless the worker stops).
    heartbeat_write_seconds: float = 5.0
