"""gRPC transport for worker→coordinator traffic: unary calls or one bidi stream, batched or not.

The question: carrying lease requests, renewals and reports from a worker to
the coordinator, is a grpc.aio bidirectional stream of batched frames cheaper
than (batched) unary calls? A server and a client run in separate processes
(as in production) on 127.0.0.1, with the same message throughout: an Item of
≈150 bytes serialized (a few ids and a small JSON string; tests/bench/
grpcbench.proto, compiled at run time into a temporary folder) answered by an
Ack (seq, ok, expiry). Variants, each with ``--inflight`` items outstanding
(64: a worker with 64 concurrent tasks) spread over ``inflight // k`` lanes:

- ``unary``: one Item per unary call, 64 concurrent callers;
- ``unary_batchK``: unary calls carrying a Batch of K Items (K = 1, 8, 32);
- ``streamK``: one bidi stream for everything, a Batch of K Items per frame,
  answered by one Acks frame the client matches to its waiting caller by id;
  the server handles each frame in a task of its own (``--stream-server
  serial`` answers inline instead), as a coordinator doing I/O per item must.

As in production, every unary call carries an ``authorization`` header and a
deadline, checked by a server interceptor (the stream only once, when it
opens); ``--no-auth`` drops both. Each run starts a fresh server, warms up,
then measures for ``--duration`` seconds: items/s, and CPU µs per item in the
server (from /proc/<pid>/stat) and in the client (time.process_time(); both
count every thread, gRPC's own included); ``other_cpu_pct`` is what the rest
of the machine used meanwhile (noise). Runs alternate variants, ``--reps``
rounds; the table shows the median and the spread. ``--loop uvloop`` (or
``both``) repeats it on uvloop where uvloop is importable.

Run: ``python -m tests.bench.bench_grpc [--only unary,stream8] [--duration 5]``
or ``python -m tests.bench grpc`` (the runner; options after the name).
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import importlib
import importlib.util
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

HERE = Path(__file__).resolve().parent
PROTO = HERE / "grpcbench.proto"
SERVICE = "composerbench.Bench"
TOKEN = "bench-token"
TTL = 30.0
CLK_TCK = os.sysconf("SC_CLK_TCK")

#: name → (method, items per call or frame)
VARIANTS: dict[str, tuple[str, int]] = {
    "unary": ("Single", 1),
    "unary_batch1": ("Batch", 1),
    "unary_batch8": ("Batch", 8),
    "unary_batch32": ("Batch", 32),
    "stream1": ("Stream", 1),
    "stream8": ("Stream", 8),
    "stream32": ("Stream", 32),
}

# The payload: ids as the engine makes them, a worker's owner string, small JSON.
TASK_IDS = [f"0190f3c2-7a1b-7c3d-8e4f-{i:012x}" for i in range(64)]
RUN_IDS = [f"0190f3c2-6b2a-7d4e-9f50-{i:012x}" for i in range(64)]
OWNER = "worker-7f3a9c-12345"
PAYLOADS = [
    '{"node_id":"charge-card","ttl":30.0,"queue":"payments"}',
    '{"node_id":"charge-card","ttl":30.0,"progress":0.5}',
    '{"status":"COMPLETED","output":{"ok":true,"n":42}}',
]


# --- shared ---------------------------------------------------------------------------------


def compile_proto(out: Path) -> None:
    from grpc_tools import protoc  # dev dependency (make proto uses it too)

    if protoc.main(["protoc", f"-I{HERE}", f"--python_out={out}", str(PROTO)]) != 0:
        raise SystemExit(f"protoc failed on {PROTO}")


def load_messages(gen: str) -> Any:
    spec = importlib.util.spec_from_file_location("grpcbench_pb2", Path(gen) / "grpcbench_pb2.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process, all its threads (from /proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def machine_busy_seconds() -> float:
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return (sum(values) - values[3] - values[4]) / CLK_TCK


def set_loop(name: str) -> None:
    if name == "uvloop":
        import uvloop  # type: ignore[import-not-found,unused-ignore]

        uvloop.install()


# --- server ---------------------------------------------------------------------------------


class TokenAuth(grpc.aio.ServerInterceptor):
    """What the coordinator's interceptor does: a bearer token compared in constant time."""

    def __init__(self) -> None:
        self._expected = f"Bearer {TOKEN}".encode()

        async def deny(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong token")

        self._deny: grpc.RpcMethodHandler[Any, Any] = grpc.unary_unary_rpc_method_handler(deny)

    async def intercept_service(  # type: ignore[override]
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        metadata = dict(handler_call_details.invocation_metadata or ())
        presented = metadata.get("authorization", "")
        if isinstance(presented, str) and hmac.compare_digest(presented.encode(), self._expected):
            return await continuation(handler_call_details)
        return self._deny


async def serve(args: argparse.Namespace) -> None:
    pb = load_messages(args.gen)

    def acks_for(batch: Any) -> Any:
        expires = time.time() + TTL
        return pb.Acks(
            id=batch.id,
            acks=[pb.Ack(seq=i.seq, ok=True, lease_expires_at=expires) for i in batch.items],
        )

    async def single(item: Any, context: Any) -> Any:
        return pb.Ack(seq=item.seq, ok=True, lease_expires_at=time.time() + TTL)

    async def batch(request: Any, context: Any) -> Any:
        return acks_for(request)

    async def stream(requests: Any, context: Any) -> None:
        out: asyncio.Queue[Any] = asyncio.Queue()
        running: set[asyncio.Task[None]] = set()

        async def handle(frame: Any) -> None:
            out.put_nowait(acks_for(frame))

        async def pump() -> None:
            async for frame in requests:
                if args.stream_server == "serial":
                    out.put_nowait(acks_for(frame))
                else:
                    task = asyncio.create_task(handle(frame))
                    running.add(task)
                    task.add_done_callback(running.discard)
            while running:
                await asyncio.gather(*running)
            out.put_nowait(None)

        reader = asyncio.create_task(pump())
        while (acks := await out.get()) is not None:
            await context.write(acks)
        await reader

    handlers = {
        "Single": grpc.unary_unary_rpc_method_handler(
            single, pb.Item.FromString, pb.Ack.SerializeToString
        ),
        "Batch": grpc.unary_unary_rpc_method_handler(
            batch, pb.Batch.FromString, pb.Acks.SerializeToString
        ),
        "Stream": grpc.stream_stream_rpc_method_handler(
            stream, pb.Batch.FromString, pb.Acks.SerializeToString
        ),
    }
    server = grpc.aio.server(interceptors=[TokenAuth()] if args.auth else None)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(json.dumps({"port": port}), flush=True)
    await server.wait_for_termination()


# --- client ---------------------------------------------------------------------------------


@dataclass
class Snapshot:
    wall: float
    items: int
    client_cpu: float
    server_cpu: float
    machine_busy: float


async def drive(args: argparse.Namespace) -> dict[str, float]:
    pb = load_messages(args.gen)
    method, k = VARIANTS[args.variant]
    lanes = max(1, args.inflight // k)
    metadata = (("authorization", f"Bearer {TOKEN}"),) if args.auth else None
    timeout = 10.0 if args.auth else None
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{args.port}")
    await asyncio.wait_for(channel.channel_ready(), 10)
    starts = itertools.count(0, k)
    done = 0
    stop = False

    def item(n: int) -> Any:
        return pb.Item(
            seq=n,
            task_id=TASK_IDS[n % 64],
            run_id=RUN_IDS[n % 64],
            attempt=1 + n % 3,
            owner=OWNER,
            kind=n % 3,
            payload_json=PAYLOADS[n % 3],
        )

    def frame() -> Any:
        n = next(starts)
        return pb.Batch(id=n, items=[item(n + i) for i in range(k)])

    single = channel.unary_unary(
        f"/{SERVICE}/Single",
        request_serializer=pb.Item.SerializeToString,
        response_deserializer=pb.Ack.FromString,
    )
    batch = channel.unary_unary(
        f"/{SERVICE}/Batch",
        request_serializer=pb.Batch.SerializeToString,
        response_deserializer=pb.Acks.FromString,
    )

    async def single_lane() -> None:
        nonlocal done
        while not stop:
            n = next(starts)
            ack = await single(item(n), metadata=metadata, timeout=timeout)
            assert ack.seq == n
            done += 1

    async def batch_lane() -> None:
        nonlocal done
        while not stop:
            request = frame()
            acks = await batch(request, metadata=metadata, timeout=timeout)
            assert acks.id == request.id
            done += len(acks.acks)

    helpers: list[asyncio.Task[None]] = []
    outbox: asyncio.Queue[Any] = asyncio.Queue()
    waiting: dict[int, asyncio.Future[Any]] = {}
    if method == "Stream":
        call = channel.stream_stream(
            f"/{SERVICE}/Stream",
            request_serializer=pb.Batch.SerializeToString,
            response_deserializer=pb.Acks.FromString,
        )(metadata=metadata)

        async def writer() -> None:
            while (request := await outbox.get()) is not None:
                await call.write(request)
            await call.done_writing()

        async def reader() -> None:
            while True:
                acks: Any = await call.read()
                if acks is grpc.aio.EOF:
                    return
                waiting.pop(acks.id).set_result(acks)

        helpers = [asyncio.create_task(writer()), asyncio.create_task(reader())]

    async def stream_lane() -> None:
        nonlocal done
        loop = asyncio.get_running_loop()
        while not stop:
            request = frame()
            future: asyncio.Future[Any] = loop.create_future()
            waiting[request.id] = future
            outbox.put_nowait(request)
            acks = await future
            done += len(acks.acks)

    lane = {"Single": single_lane, "Batch": batch_lane, "Stream": stream_lane}[method]

    def snapshot() -> Snapshot:
        return Snapshot(
            time.perf_counter(),
            done,
            time.process_time(),
            cpu_seconds(args.server_pid),
            machine_busy_seconds(),
        )

    tasks = [asyncio.create_task(lane()) for _ in range(lanes)]
    await asyncio.sleep(args.warmup)
    a = snapshot()
    await asyncio.sleep(args.duration)
    b = snapshot()
    stop = True
    await asyncio.gather(*tasks)
    if helpers:
        outbox.put_nowait(None)
        await asyncio.gather(*helpers)
    await channel.close()

    items = b.items - a.items
    wall = b.wall - a.wall
    client_cpu = b.client_cpu - a.client_cpu
    server_cpu = b.server_cpu - a.server_cpu
    return {
        "items_per_s": items / wall,
        "server_us_per_item": server_cpu / items * 1e6,
        "client_us_per_item": client_cpu / items * 1e6,
        "server_cpu_pct": server_cpu / wall * 100,
        "client_cpu_pct": client_cpu / wall * 100,
        "other_cpu_pct": (b.machine_busy - a.machine_busy - server_cpu - client_cpu) / wall * 100,
        "item_bytes": float(item(0).ByteSize()),
    }


# --- the runs -------------------------------------------------------------------------------


def run_once(gen: str, variant: str, loop: str, args: argparse.Namespace) -> dict[str, float]:
    common = ["--gen", gen, "--loop", loop, *([] if args.auth else ["--no-auth"])]
    server = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--role",
            "server",
            *common,
            "--stream-server",
            args.stream_server,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        port = json.loads(server.stdout.readline())["port"]
        client = subprocess.run(
            [
                *(sys.executable, __file__, "--role", "client", *common),
                *("--port", str(port), "--server-pid", str(server.pid), "--variant", variant),
                *("--inflight", str(args.inflight)),
                *("--warmup", str(args.warmup), "--duration", str(args.duration)),
            ],
            capture_output=True,
            text=True,
            timeout=args.warmup + args.duration + 60,
            check=False,
        )
        if client.returncode != 0:
            raise RuntimeError(f"client {variant} failed:\n{client.stderr[-3000:]}")
        result: dict[str, float] = json.loads(client.stdout.splitlines()[-1])
        return result
    finally:
        server.terminate()
        server.wait(10)


def loops(choice: str) -> list[str]:
    has_uvloop = importlib.util.find_spec("uvloop") is not None
    if choice == "asyncio":
        return ["asyncio"]
    if not has_uvloop:
        print("uvloop is not importable: asyncio only", file=sys.stderr)
        return ["asyncio"] if choice == "both" else []
    return ["uvloop"] if choice == "uvloop" else ["asyncio", "uvloop"]


def run_all(args: argparse.Namespace) -> dict[str, float]:
    variants = args.only.split(",") if args.only else list(VARIANTS)
    for name in variants:
        if name not in VARIANTS:
            raise SystemExit(f"no variant {name}; there are: {', '.join(VARIANTS)}")
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="grpcbench-") as gen:
        compile_proto(Path(gen))
        for loop in loops(args.loop):
            results: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
            for rep in range(args.reps):
                # alternate the order between rounds, so drift hits every variant alike
                order = variants if rep % 2 == 0 else variants[::-1]
                for variant in order:
                    result = run_once(gen, variant, loop, args)
                    results[variant].append(result)
                    print(
                        f"  [{loop} round {rep + 1}] {variant:<14} "
                        f"{result['items_per_s']:>9,.0f} items/s  "
                        f"server {result['server_us_per_item']:6.1f} µs  "
                        f"client {result['client_us_per_item']:6.1f} µs  "
                        f"(other {result['other_cpu_pct']:.0f} %)",
                        file=sys.stderr,
                        flush=True,
                    )
            print(report(loop, results, args), flush=True)
            prefix = "" if loop == "asyncio" else "uvloop."
            for variant, rs in results.items():
                for key in ("items_per_s", "server_us_per_item", "client_us_per_item"):
                    figures[f"{prefix}{variant}.{key}"] = statistics.median(r[key] for r in rs)
    return figures


def report(loop: str, results: dict[str, list[dict[str, float]]], args: argparse.Namespace) -> str:
    def cell(rs: list[dict[str, float]], key: str, fmt: str) -> str:
        values = [r[key] for r in rs]
        med = format(statistics.median(values), fmt)
        return f"{med} ({format(min(values), fmt)}-{format(max(values), fmt)})"

    size = next(iter(results.values()))[0]["item_bytes"]
    lines = [
        f"== grpc.aio on {loop}: {args.inflight} items in flight, item {size:.0f} B, "
        f"auth {'on' if args.auth else 'off'}, stream server {args.stream_server}, "
        f"{args.reps} x {args.duration:g} s; median (min-max)",
        f"  {'variant':<14} {'items/s':>24} {'server µs/item':>20} {'client µs/item':>20}"
        f" {'sum µs/item':>12} {'other CPU %':>12}",
    ]
    for variant, rs in results.items():
        total = statistics.median(r["server_us_per_item"] + r["client_us_per_item"] for r in rs)
        lines.append(
            f"  {variant:<14} {cell(rs, 'items_per_s', ',.0f'):>24} "
            f"{cell(rs, 'server_us_per_item', '.1f'):>20} "
            f"{cell(rs, 'client_us_per_item', '.1f'):>20} {total:>12.1f} "
            f"{statistics.median(r['other_cpu_pct'] for r in rs):>12.0f}"
        )
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tests.bench.bench_grpc", description=__doc__)
    p.add_argument("--only", default="", help=f"comma-separated, of: {', '.join(VARIANTS)}")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--duration", type=float, default=5.0, help="seconds measured per run")
    p.add_argument("--warmup", type=float, default=1.5, help="seconds before measuring")
    p.add_argument("--inflight", type=int, default=64, help="items outstanding at once")
    p.add_argument("--loop", choices=("asyncio", "uvloop", "both"), default="both")
    p.add_argument("--stream-server", choices=("tasks", "serial"), default="tasks")
    p.add_argument("--no-auth", dest="auth", action="store_false")
    # internal: the two processes of one run
    p.add_argument("--role", choices=("main", "server", "client"), default="main")
    p.add_argument("--gen", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    p.add_argument("--server-pid", type=int, help=argparse.SUPPRESS)
    p.add_argument("--variant", help=argparse.SUPPRESS)
    return p


async def main() -> dict[str, float]:
    """For the runner (``python -m tests.bench grpc``)."""
    from tests.bench import options

    return await asyncio.to_thread(run_all, parser().parse_args(options()))


def cli(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.role == "server":
        set_loop(args.loop)
        asyncio.run(serve(args))
    elif args.role == "client":
        set_loop(args.loop)
        print(json.dumps(asyncio.run(drive(args))), flush=True)
    else:
        run_all(args)
    return 0


if __name__ == "__main__":
    sys.exit(cli())
