"""The one place a service's engine is built (``serving()`` does it when its
``RuntimeConfig`` names an ``EngineConfig``; a test may call ``build_engine``).

Why one: every service that changes runs (the api-gateway, the coordinator, the
timer, the lease-sweeper) and every loop that keeps the database (the
outbox-enqueuer, the partition-manager) must agree on what an engine is given —
the Redis prefix and shards its dispatches are published to, the keys that
seal documents, the limits — or a run started by one would be decided by rules
another does not know.
"""

from __future__ import annotations

from dataclasses import dataclass

import composer_queue
import composer_repo as repo
from composer_common import limits
from composer_core.templates import prepare_parser
from composer_engine import DEFAULT_MAX_CHILD_DEPTH, Engine, parse_queue_concurrency
from composer_engine.sealing import sealer_from
from composer_service.errors import StartupError

__all__ = ["DEFAULT_MAX_CHILD_DEPTH", "EngineConfig", "build_engine"]


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """What an engine is built with, as plain values (``ServiceSettings.engine_config``)."""

    redis_prefix: str = "composer"
    shards: int = composer_queue.DEFAULT_SHARDS
    #: COMPOSER_ENCRYPTION_KEYS: seals what the engine writes, opens what it reads.
    encryption_keys: str = ""
    max_node_input_bytes: int | None = limits.DEFAULT_MAX_NODE_INPUT_BYTES
    max_output_bytes: int | None = limits.DEFAULT_MAX_OUTPUT_BYTES
    #: COMPOSER_MAP_MAX_ITEMS: caps a MAP node's max_items.
    map_max_items: int = 1000
    #: The group commit's and the lease batches' bounds (the coordinator's settings).
    batch_size: int = 256
    batches_in_flight: int = 2
    #: COMPOSER_QUEUE_CONCURRENCY: the admission step's per-queue limits (empty: none).
    queue_concurrency: str = ""
    #: COMPOSER_MAX_CHILD_DEPTH: how deep SUB_WORKFLOW child runs nest.
    max_child_depth: int = DEFAULT_MAX_CHILD_DEPTH
    #: Build the process's CEL parser while the service starts (``prepare_parser``):
    #: ~0.4 s of CPU, paid otherwise by the first definition compiled, inside a
    #: transaction. For the services that decide events as they come (the
    #: api-gateway, the coordinator, the timer); the background loops would pay it
    #: at every start for nothing on a latency path.
    prepare_templates: bool = False


def build_engine(
    pool: repo.Pool, redis: composer_queue.Queue | None, config: EngineConfig
) -> Engine:
    """The engine on ``pool`` publishing to ``redis`` (None: nothing is published
    after commit; the outbox-enqueuer publishes it). StartupError for malformed
    COMPOSER_ENCRYPTION_KEYS or COMPOSER_QUEUE_CONCURRENCY. Close it (``aclose``)
    before the pool. Builds the CEL parser first when ``config.prepare_templates``."""
    try:
        sealer = sealer_from(config.encryption_keys)
        admission = parse_queue_concurrency(config.queue_concurrency)
    except ValueError as exc:
        raise StartupError(str(exc)) from None
    if config.prepare_templates:
        prepare_parser()
    return Engine(
        pool,
        redis=redis,
        redis_prefix=config.redis_prefix,
        shards=config.shards,
        batch_size=config.batch_size,
        batches_in_flight=config.batches_in_flight,
        max_node_input_bytes=config.max_node_input_bytes,
        max_output_bytes=config.max_output_bytes,
        map_max_items=config.map_max_items,
        sealer=sealer,
        admission=admission,
        max_child_depth=config.max_child_depth,
    )
