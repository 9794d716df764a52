"""The settings several services share, read from ``COMPOSER_*`` environment variables.

Read once, at a service's entry point (its ``__main__``, through its own
subclass in ``services/*/settings.py``), and passed down as plain values:
libraries never read the environment themselves. A variable that more than
one service reads is defined here, once, so its name, default and meaning
cannot drift between them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

import composer_repo as repo
from composer_common import limits
from composer_queue import DEFAULT_SHARDS
from composer_service.engines import DEFAULT_MAX_CHILD_DEPTH, EngineConfig
from composer_service.errors import StartupError
from composer_service.hosts import parse_hosts
from composer_service.runtime import RuntimeConfig


class ServiceSettings(BaseSettings):
    """What every service reads (each service's own settings class extends this)."""

    model_config = SettingsConfigDict(env_prefix="COMPOSER_", extra="ignore")

    database_url: str = "postgresql://postgres@127.0.0.1:5432/composer"
    #: How long a service that starts before its database waits for it to answer (a
    #: warning each try) before it exits naming COMPOSER_DATABASE_URL.
    startup_wait_seconds: float = 60.0
    #: COMPOSER_DB_PLAN_SECONDS: how old a statement's plan may grow on a pooled
    #: connection before it is prepared (and planned) again; 0: kept until the
    #: connection closes (composer_repo.create_pool).
    db_plan_seconds: int = Field(default=repo.PLAN_SECONDS, ge=0)
    #: COMPOSER_DB_INDEX_PLANS: pooled connections plan every join as a nested loop of
    #: index probes and read no table whole where an index serves (enable_seqscan,
    #: enable_hashjoin, enable_mergejoin off), so a plan made while this month's
    #: partitions were small still probes them once they have grown
    #: (composer_repo.create_pool); false: PostgreSQL's defaults.
    db_index_plans: bool = True
    redis_url: str = "redis://127.0.0.1:6379/0"
    #: COMPOSER_REDIS_CLUSTER: COMPOSER_REDIS_URL is any node of a Redis Cluster (the
    #: client finds the others; docs/architecture.md §6 "Redis Cluster"). Every service
    #: and worker of a deployment must say the same.
    redis_cluster: bool = False
    #: Every Redis key and channel starts with it, so stacks can share one Redis.
    redis_prefix: str = "composer"
    #: Streams per queue: the outbox-enqueuer writes, the workers read, the sweeper reclaims.
    shards: int = DEFAULT_SHARDS
    #: The coordinator's worker protocol address (it listens there; workers dial it).
    grpc_addr: str = "127.0.0.1:50051"
    #: COMPOSER_COORDINATORS: every coordinator replica's own address, separated by
    #: commas, the same list for every worker; set, the built-in workers send each run's
    #: calls to one of them (``WorkerConfig.coordinators`` in the Python SDK,
    #: ``coordinators`` in the TypeScript one: both route a run alike).
    coordinators: str = ""
    #: COMPOSER_GRPC_TLS_CA: a PEM file of the CA that signed the coordinator's certificate;
    #: set, workers dial the coordinator over TLS and check it (unset: plaintext).
    grpc_tls_ca: str | None = None
    #: The token workers present to the coordinator (``authorization: Bearer <token>``); on
    #: the coordinator, a token for every queue, which it refuses beside
    #: COMPOSER_WORKER_TOKENS (list it there as ``token:*`` instead).
    worker_token: str = ""
    #: COMPOSER_DEV_MODE: a development machine. The api-gateway, the coordinator and the
    #: outbox-enqueuer then accept well-known, placeholder and guessable tokens (under 128
    #: bits, estimated) with a warning; otherwise they refuse to start with one
    #: (composer_service.tokens).
    dev_mode: bool = False
    #: The workers' lease TTL: they renew within it, and the sweeper takes back a stream
    #: entry pending longer than this on a consumer (it is on a dead one).
    lease_ttl_seconds: float = 30.0
    #: The largest rendered input of a node, as JSON: a node whose templates render a
    #: larger one fails for good as it is rendered, before anything of it is stored (every
    #: service that decides events), and the coordinator does not lease a larger one
    #: (docs/architecture.md, "Limits").
    max_node_input_bytes: int = limits.DEFAULT_MAX_NODE_INPUT_BYTES
    #: The largest output of a worker node, as JSON: the coordinator fails a node that
    #: reports a larger one, and the built-in workers refuse one before sending it.
    max_output_bytes: int = limits.DEFAULT_MAX_OUTPUT_BYTES
    #: COMPOSER_MAP_MAX_ITEMS: the most items a MAP node may take, whatever its own
    #: max_items says (a longer list fails the node, saying so).
    map_max_items: int = 1000
    #: COMPOSER_HTTP_ALLOW_PRIVATE: HTTP nodes and webhooks may call loopback and private
    #: addresses (local development).
    http_allow_private: bool = False
    #: COMPOSER_HTTP_ALLOW_NETWORKS: comma-separated CIDRs (``10.20.0.0/16,fd00::/8``) that
    #: HTTP nodes and webhooks may call although private, while the SSRF guard keeps
    #: refusing every other non-public address (the metadata service included); with a
    #: port (``127.0.0.1:8080``, ``[fd00::1]:443``) only that port.
    http_allow_networks: str = ""
    #: COMPOSER_ENCRYPTION_KEYS: ``id:base64key,…`` (32-byte keys). Every payload is sealed
    #: at rest with the first and opened with any, so a new key goes first and old ones
    #: stay listed until nothing sealed with them is kept (docs/sealing.md). Empty:
    #: payloads are stored as plain JSON. Every service that reads or writes runs needs it.
    encryption_keys: str = ""
    #: COMPOSER_QUEUE_CONCURRENCY: ``queue=N`` pairs (``payments=2,emails=10``): at most N
    #: tasks of the queue with a worker or on their way to one; the others wait, PENDING
    #: with a reason, oldest first (docs/architecture.md §4.12). Empty: no limit. Every
    #: service that decides events needs the same value.
    queue_concurrency: str = ""
    #: COMPOSER_MAX_CHILD_DEPTH: how deep SUB_WORKFLOW child runs nest (a run a client
    #: started is at depth 0): a node that would start a deeper child fails, naming the
    #: depth and this limit (docs/architecture.md §4.15). Every service that decides
    #: events needs the same value.
    max_child_depth: int = Field(default=DEFAULT_MAX_CHILD_DEPTH, ge=1)
    log_level: str = "INFO"
    #: json, human, or auto (JSON unless stderr is a terminal).
    log_format: Literal["auto", "json", "human"] = "auto"
    #: The service's admin port (/healthz, /readyz, /metrics); unset: none.
    admin_port: int | None = None
    #: Where the admin port listens: containers set 0.0.0.0 so probes and Prometheus reach it.
    admin_host: str = "127.0.0.1"
    #: COMPOSER_ALLOWED_HOSTS: the host names (comma-separated, any port) the API and every
    #: admin port answer for; ``.example.com`` also matches its subdomains, ``*`` any host.
    #: Any other Host header is refused (421), so a web page cannot DNS-rebind its own name
    #: to them. An admin port also answers a Host that is an IP address (a kubelet's probe,
    #: a Prometheus scraping pod addresses): no rebinding page can send one.
    allowed_hosts: str = "localhost,127.0.0.1,[::1]"
    #: Where to push traces and metrics over OTLP/gRPC (e.g. http://otel-collector:4317); unset: nowhere.
    otlp_endpoint: str | None = None
    #: Run the service on uvloop's event loop (less CPU per call than asyncio's own);
    #: false: asyncio's (read by ``composer_service.run``).
    uvloop: bool = True
    #: COMPOSER_SUPERVISOR_PID: the supervisor that started this process (``make run``
    #: sets it); the service stops when it dies, even by SIGKILL (``composer_common.supervised``).
    supervisor_pid: int | None = None
    #: How long the service may take to stop after its supervisor died before it is killed.
    supervisor_grace: float = 15.0

    @property
    def json_logs(self) -> bool | None:
        return None if self.log_format == "auto" else self.log_format == "json"

    def engine_config(
        self,
        *,
        batch_size: int = 256,
        batches_in_flight: int = 2,
        prepare_templates: bool = False,
    ) -> EngineConfig:
        """The engine these settings describe (``batch_size`` and ``batches_in_flight``:
        the coordinator's group commit; the other services keep the defaults;
        ``prepare_templates``: see ``EngineConfig``)."""
        return EngineConfig(
            redis_prefix=self.redis_prefix,
            shards=self.shards,
            encryption_keys=self.encryption_keys,
            max_node_input_bytes=self.max_node_input_bytes,
            max_output_bytes=self.max_output_bytes,
            map_max_items=self.map_max_items,
            batch_size=batch_size,
            batches_in_flight=batches_in_flight,
            queue_concurrency=self.queue_concurrency,
            max_child_depth=self.max_child_depth,
            prepare_templates=prepare_templates,
        )

    def runtime(
        self,
        name: str,
        *,
        pool_size: int | None = None,
        redis: bool = True,
        engine: EngineConfig | None = None,
    ) -> RuntimeConfig:
        """What ``serving()`` opens for service ``name``: a pool of ``pool_size``
        connections (None: no database), a Redis client if ``redis``, the ``engine``
        (None: none), and the admin port, logs and telemetry these settings
        describe. StartupError for an empty COMPOSER_ALLOWED_HOSTS."""
        try:
            allowed_hosts = parse_hosts(self.allowed_hosts)
        except ValueError as exc:
            raise StartupError(str(exc)) from None
        return RuntimeConfig(
            name=name,
            database_url=self.database_url if pool_size is not None else None,
            pool_size=pool_size or 1,
            redis_url=self.redis_url if redis else None,
            redis_cluster=self.redis_cluster,
            admin_port=self.admin_port,
            admin_host=self.admin_host,
            allowed_hosts=allowed_hosts,
            log_level=self.log_level,
            json_logs=self.json_logs,
            otlp_endpoint=self.otlp_endpoint,
            engine=engine,
            startup_wait_seconds=self.startup_wait_seconds,
            plan_seconds=self.db_plan_seconds,
            index_plans=self.db_index_plans,
        )


class ServerSettings(ServiceSettings):
    """What the two request-serving services (api-gateway, coordinator) add."""

    #: Database connections in the pool (the loops size theirs from their own concurrency).
    pool_size: int = 16
    #: How long SIGTERM waits for in-flight requests or calls.
    drain_seconds: float = 10.0
