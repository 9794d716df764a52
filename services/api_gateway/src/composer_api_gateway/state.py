"""The application's typed state (``web.AppKey``) and the plain values it is built from."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

import composer_queue
from composer_api_gateway.auth import Authenticator, Caller
from composer_api_gateway.hosts import LOOPBACK_HOSTS
from composer_api_gateway.waiters import RunWaiters
from composer_common import limits
from composer_common.caller import DEFAULT_MAX_CONTEXT_BYTES
from composer_engine import Engine, Workflows


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    """What the app needs, read from the environment once by ``__main__`` (or given by tests)."""

    redis_prefix: str = "composer"
    tokens: str = ""
    max_body_bytes: int = 2 * 1024 * 1024
    max_run_input_bytes: int = limits.DEFAULT_MAX_RUN_INPUT_BYTES
    max_signal_bytes: int = limits.DEFAULT_MAX_SIGNAL_BYTES
    #: COMPOSER_MAX_CONTEXT_BYTES: the request metadata a start may carry (``context``).
    max_context_bytes: int = DEFAULT_MAX_CONTEXT_BYTES
    max_wait_seconds: float = 60.0
    result_poll_seconds: float = 2.0
    #: The Host names the API answers for (composer_api_gateway.hosts).
    allowed_hosts: tuple[str, ...] = LOOPBACK_HOSTS
    #: COMPOSER_WORKER_LIVE_SECONDS: a worker whose last heartbeat is older is LOST, and a
    #: task waiting on a queue no live worker serves carries a waiting_hint.
    worker_live_seconds: float = 30.0
    #: Serve what the examples call (composer_api_gateway.examples): COMPOSER_API_EXAMPLES.
    examples: bool = False


CONFIG = web.AppKey("config", GatewayConfig)
AUTH = web.AppKey("auth", Authenticator)
#: The Redis client, opened by composer_service.serving.
REDIS = web.AppKey("redis", composer_queue.RedisQueue)
ENGINE = web.AppKey("engine", Engine)
#: The definitions use case (create, deploy, delete, read, with their retries).
WORKFLOWS = web.AppKey("workflows", Workflows)
WAITERS = web.AppKey("waiters", RunWaiters)
#: The OpenAPI document and the docs page, built once from the route table.
SPEC = web.AppKey("openapi", dict)
DOCS = web.AppKey("docs", str)
#: Who sent the request (its token's name and role), set by the auth check of its route.
CALLER = web.RequestKey("caller", Caller)
