"""Children start without fork(), so gRPC's atfork handlers cannot crash them (issue 25, item 2).

The worker's process has gRPC threads busy at all times. uvloop started
PYTHON nodes with fork(), which runs gRPC's pthread_atfork handlers; with
other threads inside gRPC the prefork handler skips ("Other threads are
currently calling into gRPC, skipping fork() handlers") and the child died of
SIGSEGV or SIGABRT before exec: 48 of 300 when this test's set-up started
them with ``asyncio.create_subprocess_exec`` on uvloop (the code before the
fix), so 120 children cross a crash all but surely (0.84^120 < 1e-9).
``composer_executors._spawn`` starts them with vfork.
"""

from __future__ import annotations

import asyncio
import sys

import grpc
import uvloop

from composer_executors._spawn import spawn

CHILDREN = 120
CONCURRENT = 16


async def _busy_channel(stop: asyncio.Event) -> None:
    """A gRPC server and client in this process, calling each other until ``stop``."""
    server = grpc.aio.server()
    echo: grpc.RpcMethodHandler[bytes, bytes] = grpc.unary_unary_rpc_method_handler(
        lambda request, context: request
    )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("t.T", {"E": echo}),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary("/t.T/E")
    try:

        async def chatter() -> None:
            while not stop.is_set():
                await asyncio.gather(*(call(b"x" * 100) for _ in range(20)))

        await asyncio.gather(*(chatter() for _ in range(4)))
    finally:
        await channel.close()
        await server.stop(None)


def test_children_started_beside_busy_grpc_calls_on_uvloop_never_crash() -> None:
    async def main() -> list[int]:
        stop = asyncio.Event()
        busy = asyncio.create_task(_busy_channel(stop))
        gate = asyncio.Semaphore(CONCURRENT)

        async def one() -> int:
            async with gate:
                child = await spawn(
                    [sys.executable, "-I", "-c", "import json; print(1)"],
                    env={"PATH": "/usr/bin:/bin"},
                    start_new_session=True,
                )
                assert child.stdin is not None and child.stdout is not None
                child.stdin.close()
                await child.stdout.read()
                await child.stderr.read()
                code = await child.wait()
                child.close_pipes()
                return code

        try:
            await asyncio.sleep(0.2)  # the calls are in flight
            return await asyncio.gather(*(one() for _ in range(CHILDREN)))
        finally:
            stop.set()
            await busy

    codes = uvloop.run(main())
    crashed = [c for c in codes if c != 0]
    assert not crashed, f"{len(crashed)} of {CHILDREN} children died: statuses {crashed}"
