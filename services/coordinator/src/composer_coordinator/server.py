"""Building and running the gRPC server."""

from __future__ import annotations

import grpc.aio

from composer_coordinator.service import TokenAuth, WorkerService
from composer_engine import Engine
from composer_rpc.v1.worker_pb2_grpc import add_WorkerServiceServicer_to_server


async def start_server(engine: Engine, *, address: str, token: str) -> tuple[grpc.aio.Server, int]:
    """Start serving; returns the server and the port bound (``address`` may use port 0)."""
    if not token:
        raise ValueError(
            "no worker token configured: set COMPOSER_WORKER_TOKEN (workers must present it)"
        )
    server = grpc.aio.server(interceptors=[TokenAuth(token)])
    add_WorkerServiceServicer_to_server(WorkerService(engine), server)
    port = server.add_insecure_port(address)
    if port == 0:
        raise OSError(f"cannot listen on {address}")
    await server.start()
    return server, port
