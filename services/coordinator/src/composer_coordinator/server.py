"""Building and running the gRPC server."""

from __future__ import annotations

from dataclasses import dataclass

import grpc
import grpc.aio

from composer_coordinator.presence import Presence
from composer_coordinator.service import ANSWER_BYTES, TokenAuth, WorkerService
from composer_coordinator.tokens import WorkerTokens
from composer_engine import Engine
from composer_rpc.v1.worker_pb2_grpc import add_WorkerServiceServicer_to_server

#: Room in a message besides its data: ids, tokens, an error text, the framing.
HEADROOM = 1024 * 1024


def max_message_bytes(engine: Engine) -> int:
    """The gRPC message limit, both ways: above the engine's data limits (a node input,
    an output: each alone in a message at worst) and a batched call's items."""
    data = [engine.max_node_input_bytes, engine.max_output_bytes, ANSWER_BYTES]
    if None in data:  # a data limit is off: so is the message limit
        return -1
    return max(d for d in data if d is not None) + HEADROOM


def server_options(engine: Engine) -> list[tuple[str, int]]:
    """Set explicitly: gRPC's defaults (4 MiB received, unlimited sent) are not ours; nor
    is its SO_REUSEPORT, which let a second coordinator (a second ``make run``) bind the
    same port and take half of the first one's workers instead of failing."""
    limit = max_message_bytes(engine)
    return [
        ("grpc.max_receive_message_length", limit),
        ("grpc.max_send_message_length", limit),
        ("grpc.so_reuseport", 0),
    ]


@dataclass(frozen=True, slots=True)
class ServerTls:
    """The coordinator's TLS identity, PEM (COMPOSER_GRPC_TLS_CERT, COMPOSER_GRPC_TLS_KEY)."""

    cert_chain: bytes
    private_key: bytes


async def start_server(
    engine: Engine,
    *,
    address: str,
    token: str = "",
    tokens: str = "",
    builtin_token: str = "",
    max_lease_seconds: float = 300.0,
    tls: ServerTls | None = None,
    heartbeat_write_seconds: float = 5.0,
) -> tuple[grpc.aio.Server, int]:
    """Start serving; returns the server and the port bound (``address`` may use port 0).

    ``token`` is a worker token for every queue (COMPOSER_WORKER_TOKEN), ``tokens``
    the tokens for some queues (COMPOSER_WORKER_TOKENS), ``builtin_token`` the
    built-in workers' (COMPOSER_BUILTIN_WORKER_TOKEN); TokenConfigError when they
    cannot be read or there is none. With ``tls`` the port speaks TLS only: the
    worker tokens and lease tokens cross the network encrypted. A worker's heartbeat
    is written at most every ``heartbeat_write_seconds`` (composer_coordinator.presence)."""
    worker_tokens = WorkerTokens.parse(token, tokens, builtin_token)
    server = grpc.aio.server(
        interceptors=[TokenAuth(worker_tokens)], options=server_options(engine)
    )
    add_WorkerServiceServicer_to_server(
        WorkerService(
            engine,
            worker_tokens,
            max_lease_seconds=max_lease_seconds,
            presence=Presence(engine, write_every=heartbeat_write_seconds),
        ),
        server,
    )
    if tls is None:
        port = server.add_insecure_port(address)
    else:
        credentials = grpc.ssl_server_credentials([(tls.private_key, tls.cert_chain)])
        port = server.add_secure_port(address, credentials)
    if port == 0:
        raise OSError(f"cannot listen on {address}")
    await server.start()
    return server, port
