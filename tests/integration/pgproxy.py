"""A TCP proxy in front of PostgreSQL that can lose the answer to a COMMIT.

Why: the one failure a retry loop cannot see through is a COMMIT that reached
the server and committed, whose answer never came back. This proxy makes it
on demand, deterministically: armed, it forwards the next COMMIT, waits for
the server's answer (so the commit has happened), drops the answer and cuts
both connections. Or, with ``reach_server=False``, it cuts the connection
instead of forwarding the COMMIT (the transaction is rolled back).

It reads the frontend protocol (the startup message, then typed messages), so
clients must connect with ``sslmode=disable``: ``url`` gives such a URL.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit


@dataclass
class _Armed:
    count: int = 0
    reach_server: bool = True


@dataclass
class PgProxy:
    upstream: str  # a postgresql:// URL
    lost_commits: int = 0
    _armed: _Armed = field(default_factory=_Armed)
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def start(self) -> PgProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    @property
    def url(self) -> str:
        """The upstream URL, through this proxy."""
        assert self._server is not None, "start() the proxy first"
        port = self._server.sockets[0].getsockname()[1]
        parts = urlsplit(self.upstream)
        netloc = parts.netloc.rsplit("@", 1)
        user = f"{netloc[0]}@" if len(netloc) == 2 else ""
        query = f"{parts.query}&sslmode=disable" if parts.query else "sslmode=disable"
        return urlunsplit((parts.scheme, f"{user}127.0.0.1:{port}", parts.path, query, ""))

    def lose_next_commit(self, *, reach_server: bool = True) -> None:
        """Lose the next COMMIT any connection sends: its answer (``reach_server``,
        so it commits), or the COMMIT itself (so it does not)."""
        self._armed = _Armed(self._armed.count + 1, reach_server)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        parts = urlsplit(self.upstream)
        server_r, server_w = await asyncio.open_connection(parts.hostname, parts.port or 5432)
        swallow = asyncio.Event()  # set: the next answer from the server is lost

        def close_both() -> None:
            for w in (client_w, server_w):
                w.transport.abort()

        up = asyncio.create_task(self._client_to_server(client_r, server_w, swallow, close_both))
        down = asyncio.create_task(self._server_to_client(server_r, client_w, swallow, close_both))
        self._tasks |= {up, down}
        try:
            await asyncio.gather(up, down, return_exceptions=True)
        finally:
            self._tasks -= {up, down}
            close_both()

    async def _client_to_server(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        swallow: asyncio.Event,
        close_both: Callable[[], None],
    ) -> None:
        try:
            (length,) = struct.unpack("!i", await reader.readexactly(4))  # the startup message
            writer.write(struct.pack("!i", length) + await reader.readexactly(length - 4))
            while True:
                kind = await reader.readexactly(1)
                size = await reader.readexactly(4)
                body = await reader.readexactly(struct.unpack("!i", size)[0] - 4)
                if (
                    kind == b"Q"
                    and body.lstrip().upper().startswith(b"COMMIT")
                    and self._armed.count
                ):
                    self._armed.count -= 1
                    self.lost_commits += 1
                    if not self._armed.reach_server:
                        close_both()
                        return
                    swallow.set()
                writer.write(kind + size + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            close_both()

    async def _server_to_client(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        swallow: asyncio.Event,
        close_both: Callable[[], None],
    ) -> None:
        try:
            while data := await reader.read(65536):
                if swallow.is_set():  # the COMMIT's answer: the commit happened; lose it
                    close_both()
                    return
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        close_both()
