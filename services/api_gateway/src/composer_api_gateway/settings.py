"""The api-gateway's settings, from ``COMPOSER_*`` environment variables (docs/architecture.md §10)."""

from __future__ import annotations

from composer_common import limits
from composer_common.caller import DEFAULT_MAX_CONTEXT_BYTES
from composer_service import ServerSettings


class GatewaySettings(ServerSettings):
    #: Bind address; containers set 0.0.0.0.
    api_host: str = "127.0.0.1"
    api_port: int = 8080
    #: COMPOSER_API_SHARE_PORT: bind the API port with SO_REUSEPORT, so several
    #: api-gateway processes on one host serve one port and the kernel spreads the
    #: connections among them: a gateway's work (HTTP, the start transaction) is one
    #: process's CPU, so a host with cores to spare starts more runs with a second one
    #: (on 2 cores it started fewer: docs/architecture.md §3.1), and one can restart
    #: while another serves. Each process keeps its own COMPOSER_ADMIN_PORT. Every
    #: process on the port must set it; off, a second one exits 3 naming the port in use.
    api_share_port: bool = False
    #: ``name=token:role,…`` with roles admin, operator, viewer (``token:role`` entries are
    #: still read: composer_api_gateway.auth names them). Empty: every /v1 call is refused.
    #: Outside COMPOSER_DEV_MODE each token must be a random secret of 128 bits or more
    #: (``secrets.token_urlsafe(32)``; composer_service.tokens estimates it).
    api_tokens: str = ""
    #: The largest request body accepted (a definition, a run's input, a signal payload).
    api_max_body_bytes: int = 2 * 1024 * 1024
    #: COMPOSER_MAX_RUN_INPUT_BYTES: the largest run input, and run config, as JSON (a
    #: start or a retry); larger ones answer 413 (docs/architecture.md, "Limits").
    max_run_input_bytes: int = limits.DEFAULT_MAX_RUN_INPUT_BYTES
    #: COMPOSER_MAX_SIGNAL_BYTES: the largest signal payload, as JSON; larger ones answer 413.
    max_signal_bytes: int = limits.DEFAULT_MAX_SIGNAL_BYTES
    #: COMPOSER_MAX_CONTEXT_BYTES: the largest request metadata (``context``) a start may
    #: carry, as JSON; larger ones answer 413. It is copied onto each TASK node's row and
    #: sent with each of their leases: keep it small.
    max_context_bytes: int = DEFAULT_MAX_CONTEXT_BYTES
    #: The longest ``?timeout=`` a result long-poll may ask for; larger ones are cut to it.
    api_max_wait_seconds: float = 60.0
    #: How often a long-poll re-reads the run when no run-finished hint comes.
    api_result_poll_seconds: float = 2.0
    #: COMPOSER_WORKER_LIVE_SECONDS: a worker not heard from for longer is LOST (GET
    #: /v1/workers), and a task waiting on a queue no live worker serves says so
    #: (waiting_hint). Keep it a few times the workers' heartbeat (5 s).
    worker_live_seconds: float = 30.0
    #: COMPOSER_API_EXAMPLES: also serve what examples/ call (a small shop under
    #: /examples/shop/items/{id}, for examples/price-check.yaml), so they run offline.
    #: `make run` sets it; a production gateway leaves it off.
    api_examples: bool = False
