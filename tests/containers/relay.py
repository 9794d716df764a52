"""A TCP relay from the containers' network to a server that listens on loopback only.

Why: the machine's PostgreSQL and Redis listen on 127.0.0.1, which a container on
a bridge network cannot reach (its 127.0.0.1 is its own). The relay listens on
the bridge's gateway address — what ``host.containers.internal`` names inside
the containers — and forwards each connection to 127.0.0.1, so the servers see
a loopback client and nothing about their configuration changes.

It binds with IP_FREEBIND: the bridge's address exists only once a container is
attached to it, and the migration, the first container, must find the relay
already listening.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

#: Linux's IP_FREEBIND (Python names it only on some versions).
IP_FREEBIND = getattr(socket, "IP_FREEBIND", 15)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


class Relay:
    """Forwards ``host``:<port> to ``127.0.0.1``:<target> for each target, on a thread of its own.

    ``ports[target]`` is the port chosen for it (a free one). ``close()`` stops
    listening and cuts every connection still open.
    """

    def __init__(self, host: str, targets: list[int]) -> None:
        self.host = host
        self.ports: dict[int, int] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="relay", daemon=True)
        self._servers: list[asyncio.Server] = []
        self._writers: set[asyncio.StreamWriter] = set()
        self._thread.start()
        for target in targets:
            self.ports[target] = self._call(self._listen(target))

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)

    async def _listen(self, target: int) -> int:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_IP, IP_FREEBIND, 1)
        sock.bind((self.host, 0))

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target)
            except OSError:
                writer.close()
                return
            pair = {writer, up_writer}
            self._writers |= pair
            try:
                await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
            finally:
                self._writers -= pair

        server = await asyncio.start_server(serve, sock=sock)
        self._servers.append(server)
        port: int = sock.getsockname()[1]
        return port

    async def _close(self) -> None:
        for server in self._servers:
            server.close()
        for writer in list(self._writers):
            writer.transport.abort()  # each pipe sees its connection end, and returns
        for server in self._servers:
            await server.wait_closed()

    def close(self) -> None:
        self._call(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
