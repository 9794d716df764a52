"""``Queue`` on a Redis Cluster (``COMPOSER_REDIS_CLUSTER=true``), over redis-py's
asyncio ``RedisCluster``.

Keys and slots. A stream is one key (its entries, its group and the group's
pending list live in it), ``<prefix>:q:<queue>:<shard>``, with no hash tag: its
slot is the hash of its whole name, so a queue's shards fall on different slots
and spread over the masters (a prefix holding a ``{tag}`` would pin them all to
one slot: it works, without the spread). No command spans two slots:

- ``read``: the streams of a read are in different slots, so the single-server
  script (one call over all of them) cannot run. What is there already is read
  stream by stream, at most ``count`` in all; a shard whose other priority bands
  are to be looked at (their streams carry the shard's stream as hash tag: one
  slot) is read by the same script, EVAL on its master. So bands are ranked, with
  their age, within a shard; across shards, those last seen holding a better band
  are read first (with no aging across shards). When nothing is there,
  one blocked XREADGROUP per shard, over all its bands, waits, concurrently. The first to answer ends the wait:
  the others are released with ``CLIENT UNBLOCK`` (each blocked read sent its
  connection's ``CLIENT ID`` in the same round trip), and whatever they were
  served meanwhile still counts — nothing is left read and unseen. Entries over
  ``count`` are given back, uncounted, as on one server.
- ``ack``, ``give_back``: one MULTI per stream (a transaction holds one slot),
  the streams' transactions concurrently.
- ``alive``: the heartbeat keys are in different slots: MGET per slot
  (redis-py's ``mget_nonatomic``).
- hints: sharded pub/sub. ``notify`` is SPUBLISH (the hint goes to the master
  owning the channel's slot, not to every node); ``subscribe`` holds one
  connection per master owning a channel and SSUBSCRIBEs each channel there.
  When that master goes or the slot moves, the subscription ends and the
  ``Subscriber`` subscribes again (the loops poll meanwhile).

Everything else (publish in a pipeline that redis-py splits per node, the
group operations on one stream, SCAN over every master, DEL per slot) is the
single-server code as is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

import redis.asyncio as aioredis
from redis import exceptions as rex
from redis._parsers import AsyncCommandsParser
from redis.asyncio.client import PubSub
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import SSLConnection
from redis.client import NEVER_DECODE

from composer_queue._errors import QueueUnavailable, is_missing_group, translated
from composer_queue._messages import GROUP, Entry, consumer_key
from composer_queue._port import Subscription
from composer_queue._redis import _READ, RedisQueue, _entry, _text

log = logging.getLogger("composer.queue.cluster")


def connect_cluster(url: str, *, connect_timeout: float | None = None) -> ClusterQueue:
    """A client for the Redis Cluster one of whose nodes is at ``url`` (it finds the others).

    ``url`` may name several nodes, comma-separated (``redis://:pw@h1:7000,h2:7000/0``):
    a client that starts while the first is down finds the cluster through another.
    """
    first, others = _nodes(url)
    client = RedisCluster.from_url(
        first,
        startup_nodes=[ClusterNode(host, port) for host, port in others] or None,
        decode_responses=True,
        encoding_errors="replace",
        protocol=2,
        # blocked reads wait for up to their BLOCK; the cluster client's default (5 s)
        # would cut one short
        socket_timeout=None,
        socket_connect_timeout=connect_timeout,
    )
    client.commands_parser = _CommandsParser(client)
    return ClusterQueue(client)


class _CommandsParser(AsyncCommandsParser):
    """redis-py reads the command table from one master (the first) each time it learns
    the cluster's slots, and while that master is down every command of a client that
    (re)learns them fails: ask the other masters too, and send keyless commands to the
    one that answered."""

    __slots__ = ("_cluster",)

    def __init__(self, cluster: RedisCluster) -> None:
        super().__init__()
        self._cluster = cluster

    async def initialize(self, node: ClusterNode | None = None) -> None:
        others = self._cluster.get_primaries()
        candidates = [node, *[n for n in others if n is not node]] if node else others
        failed: BaseException | None = None
        for candidate in candidates:
            try:
                await super().initialize(candidate)
            except (rex.ConnectionError, rex.TimeoutError, OSError) as exc:
                failed = failed or exc
                continue
            if candidate is not node:
                self._cluster.nodes_manager.default_node = candidate
            return
        if failed is not None:
            raise failed
        await super().initialize(node)


def _nodes(url: str) -> tuple[str, list[tuple[str, int]]]:
    """The URL of the first node ``url`` names, and the (host, port) of the others."""
    scheme, sep, rest = url.partition("://")
    netloc, slash, tail = rest.partition("/")
    auth, at, hosts = netloc.rpartition("@")
    first, *others = hosts.split(",")
    nodes: list[tuple[str, int]] = []
    for node in others:
        host, _, port = node.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(
                f"{node.strip()!r} in the Redis URL is not host:port "
                "(COMPOSER_REDIS_URL names one node, or several: redis://h1:7000,h2:7000/0)"
            )
        nodes.append((host.strip("[]"), int(port)))
    return f"{scheme}{sep}{auth}{at}{first}{slash}{tail}", nodes


class ClusterQueue(RedisQueue):
    """``Queue`` on a Redis Cluster. Use ``connect(url, cluster=True)``."""

    def __init__(self, client: RedisCluster) -> None:
        super().__init__(client)  # type: ignore[arg-type]
        self._cluster = client
        #: Streams whose master did not answer the last read (logged once, until it does).
        self._down: set[str] = set()

    async def close(self) -> None:
        """Close every connection to every node. redis-py's own close does nothing once
        a node failed and the client waits to re-learn the slots (it then counts as not
        yet started, its connections to the live nodes open): those would be left for the
        garbage collector, which warns of them in whatever runs then."""
        await super().close()
        nodes = self._cluster.nodes_manager
        with contextlib.suppress(Exception):  # closing is best effort: nothing to retry
            await nodes.aclose()
            await nodes.aclose("startup_nodes")

    async def master_of(self, key: str) -> str:
        """host:port of the master that holds ``key``'s slot (tests, operators)."""
        with translated(f"finding the master of {key}"):
            return str((await self._node(key)).name)

    async def _node(self, key: str) -> ClusterNode:
        """The master holding ``key``'s slot, as the client last learnt the slots (it
        learns them on its first command, and again after an error)."""
        await self._cluster.initialize()  # a no-op when it knows them
        node = self._cluster.get_node_from_key(key)
        if node is None:
            raise rex.SlotNotCoveredError(f"no master holds the slot of {key}")
        return node

    # -- streams -----------------------------------------------------------------

    async def read(
        self, streams: Sequence[str], consumer: str, *, count: int, block_ms: int
    ) -> list[Entry]:
        if count < 1 or not streams:
            return []
        entries: list[Entry] = []
        missing = False
        up: list[str] = []
        down: list[QueueUnavailable] = []
        # What is there already, stream by stream, at most ``count`` in all, shards with
        # entries of a better band first...
        for stream in self._bands.by_band(streams):
            left = count - len(entries)
            if left <= 0:
                break
            group = self._bands.plan_one(stream)
            try:
                if len(group) > 1:  # other bands to look at: the script, on the shard's slot
                    with translated(f"reading {stream} by band"):
                        found = await self._read_bands(group, consumer, left)
                    self._reachable(stream)
                    up.append(stream)
                    entries.extend(found)
                    continue
                with translated(f"reading {stream}"):
                    # to the stream's master by name: XREADGROUP's keys are "movable",
                    # which redis-py would otherwise ask a node about (COMMAND GETKEYS)
                    # on every call
                    reply = await self._cluster.execute_command(
                        "XREADGROUP",
                        "GROUP",
                        GROUP,
                        consumer,
                        "COUNT",
                        left,
                        "STREAMS",
                        stream,
                        ">",
                        target_nodes=await self._node(stream),
                        **{NEVER_DECODE: True},
                    )
            except QueueUnavailable as exc:
                # its master is down: the streams of the others are still read
                self._unreachable(stream, exc)
                down.append(exc)
                continue
            except Exception as exc:
                if not is_missing_group(exc.__cause__):
                    raise
                missing = True
                up.append(stream)
                continue
            self._reachable(stream)
            up.append(stream)
            entries.extend(_entries(reply))
        if down and not up and not entries:
            raise down[0]
        if missing:  # a group vanished (a master restarted empty, or was flushed)
            await self.ensure_groups(up)
            self._bands.lost(up)
            return entries
        if entries or not block_ms:
            return entries
        # ...else wait on every shard at once (each on all its bands, one slot); the
        # first answer releases the others.
        if fresh := self._bands.ungrouped(up):  # once: a blocked read needs their groups
            await self.ensure_groups(fresh)
        try:
            entries = await self._blocked_read(up, consumer, count, block_ms)
        except Exception as exc:
            if is_missing_group(exc.__cause__):
                await self.ensure_groups(self._bands.every(up))
                return []
            raise
        self._bands.waited(up, entries)
        if len(entries) > count:
            await self.give_back(entries[count:])
        return entries[:count]

    async def _read_bands(
        self, group: list[tuple[str, int]], consumer: str, left: int
    ) -> list[Entry]:
        """The read script over one shard's bands (their keys share its slot): EVAL on its
        master, the source sent each time (a master that restarted has no script cache)."""
        keys = [key for key, _ in group]
        now = 0 if self.clock_ms is None else self.clock_ms()
        reply = await self._cluster.execute_command(
            "EVAL",
            _READ,
            len(keys),
            *keys,
            GROUP,
            consumer,
            left,
            now,
            len(group),
            *[band for _, band in group],
            target_nodes=await self._node(keys[0]),
            **{NEVER_DECODE: True},
        )
        self._bands.seen(keys, [_text(k) for k in reply[2]])
        if reply[0] == 0:
            raise rex.ResponseError("NOGROUP the shard's stream has no group")
        return [_entry(_text(stream), i, fields) for stream, i, fields in reply[1]]

    def _unreachable(self, stream: str, exc: QueueUnavailable) -> None:
        if stream not in self._down:
            self._down.add(stream)
            log.warning("%s is out of reach (%s); the other shards are still read", stream, exc)

    def _reachable(self, stream: str) -> None:
        if stream in self._down:
            self._down.discard(stream)
            log.info("%s is read again", stream)

    async def ensure_groups(self, streams: Iterable[str]) -> None:
        """As on one server, each stream's master in turn; a stream whose master is out of
        reach is left (a read recreates its group once it is back) unless all are."""
        names = list(streams)
        down: list[QueueUnavailable] = []
        for stream in names:
            try:
                await super().ensure_groups([stream])
            except QueueUnavailable as exc:
                self._unreachable(stream, exc)
                down.append(exc)
        if down and len(down) == len(names):
            raise down[0]

    async def streams(self, prefix: str) -> list[str]:
        """SCAN on every master; one out of reach is left out (its streams cannot be
        worked on meanwhile) unless all are."""
        found: list[str] = []
        down: list[QueueUnavailable] = []
        with translated(f"listing the streams of {prefix}"):
            await self._cluster.initialize()
            masters = self._cluster.get_primaries()
        for node in masters:
            try:
                with translated(f"listing the streams of {prefix} on {node.name}"):
                    cursor = 0
                    while True:
                        reply = await self._cluster.execute_command(
                            "SCAN",
                            cursor,
                            "MATCH",
                            f"{prefix}:q:*",
                            "COUNT",
                            1000,
                            "TYPE",
                            "stream",
                            target_nodes=node,
                        )
                        # redis-py answers ({node name: next cursor}, keys)
                        cursors, keys = reply
                        cursor = int(cursors[node.name])
                        found.extend(_text(k) for k in keys)
                        if cursor == 0:
                            break
            except QueueUnavailable as exc:
                log.warning("%s is out of reach (%s): its streams are left out", node.name, exc)
                down.append(exc)
        if down and len(down) == len(masters):
            raise down[0]
        return sorted(set(found))

    async def _blocked_read(
        self, streams: Sequence[str], consumer: str, count: int, block_ms: int
    ) -> list[Entry]:
        ids: dict[str, asyncio.Future[tuple[ClusterNode, int]]] = {}
        loop = asyncio.get_running_loop()
        reads: dict[asyncio.Task[Any], str] = {}
        for stream in streams:
            ids[stream] = loop.create_future()
            task = asyncio.create_task(
                self._block_one(stream, consumer, count, block_ms, ids[stream], f"reading {stream}")
            )
            reads[task] = stream
        try:
            await asyncio.wait(reads, return_when=asyncio.FIRST_COMPLETED)
            for task, stream in reads.items():
                if not task.done():
                    await self._unblock(ids[stream])
            await asyncio.wait(reads)
        finally:
            for task in reads:
                task.cancel()  # only when we are cancelled ourselves: nothing else is left
            for future in ids.values():
                future.cancel()
        found: list[Entry] = []
        errors: list[BaseException] = []
        for task in reads:
            if task.cancelled():
                continue
            exc = task.exception()
            if exc is not None:
                if not isinstance(exc, QueueUnavailable):
                    raise exc  # a NOGROUP: the caller recreates the groups
                errors.append(exc)
                continue
            found.extend(_entries(task.result()))
        if errors and not found and len(errors) == len(reads):
            raise errors[0]  # every master is out of reach; else a read that failed is
            # one whose master went meanwhile: the next read skips it
        return found

    async def _block_one(
        self,
        stream: str,
        consumer: str,
        count: int,
        block_ms: int,
        client_id: asyncio.Future[tuple[ClusterNode, int]],
        what: str,
    ) -> Any:
        """One blocked XREADGROUP on every band of one shard (their keys share its slot), on
        a connection of its master, sent with ``CLIENT ID`` in the same round trip so
        that it can be released."""
        bands = self._bands.every([stream])
        with translated(what):
            node = await self._node(stream)
            connection = node.acquire_connection()
            try:
                await connection.send_packed_command(
                    connection.pack_commands(
                        [
                            ("CLIENT", "ID"),
                            (
                                "XREADGROUP",
                                "GROUP",
                                GROUP,
                                consumer,
                                "COUNT",
                                count,
                                "BLOCK",
                                block_ms,
                                "STREAMS",
                                *bands,
                                *[">"] * len(bands),
                            ),
                        ]
                    )
                )
                if not client_id.done():
                    client_id.set_result((node, int(await connection.read_response())))
                reply = await connection.read_response(disable_decoding=True)
            except (rex.MovedError, rex.AskError) as exc:
                # the slot moved (resharding, a failover): learn the new map, read again
                await self._cluster.nodes_manager.initialize()
                raise QueueUnavailable(f"{what}: {stream}'s slot moved ({exc})") from exc
            except BaseException:
                # a connection left mid-reply cannot be used again
                await connection.disconnect()
                raise
            finally:
                node.release(connection)
            if isinstance(reply, rex.ResponseError):
                raise reply
            return reply

    async def _unblock(self, client_id: asyncio.Future[tuple[ClusterNode, int]]) -> None:
        """Release one blocked read: it answers at once, with what it was served (if anything)."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(client_id), 5)
        if not client_id.done() or client_id.cancelled() or client_id.exception() is not None:
            return  # it failed before it blocked: it ends by itself
        node, cid = client_id.result()
        with contextlib.suppress(Exception):  # gone meanwhile: it ends by itself
            await self._cluster.execute_command("CLIENT UNBLOCK", cid, target_nodes=node)

    async def ack(self, refs: Iterable[tuple[str, str]]) -> None:
        by_stream: dict[str, list[str]] = {}
        for stream, entry_id in refs:
            by_stream.setdefault(stream, []).append(entry_id)
        if not by_stream:
            return
        with translated(f"acknowledging entries of {', '.join(by_stream)}"):
            await _all(self._ack_one(stream, ids) for stream, ids in by_stream.items())

    async def _ack_one(self, stream: str, ids: list[str]) -> None:
        async with self._cluster.pipeline(transaction=True) as pipe:
            pipe.xack(stream, GROUP, *ids)
            pipe.xdel(stream, *ids)
            await pipe.execute()

    async def give_back(self, entries: Sequence[Entry]) -> None:
        by_stream: dict[str, list[Entry]] = {}
        for entry in entries:
            if entry.problem is None:  # one that is not UTF-8 stays pending, for the sweeper
                by_stream.setdefault(entry.stream, []).append(entry)
        if not by_stream:
            return
        with translated(f"giving back {sum(map(len, by_stream.values()))} entries"):
            await _all(self._give_back_one(stream, es) for stream, es in by_stream.items())

    async def _give_back_one(self, stream: str, entries: list[Entry]) -> None:
        async with self._cluster.pipeline(transaction=True) as pipe:
            for entry in entries:
                pipe.xadd(stream, dict(entry.fields))  # type: ignore[arg-type]
                pipe.xack(stream, GROUP, entry.entry_id)
                pipe.xdel(stream, entry.entry_id)
            await pipe.execute()

    # -- consumers ---------------------------------------------------------------

    async def alive(self, prefix: str, consumers: Iterable[str]) -> set[str]:
        names = sorted(set(consumers))
        if not names:
            return set()
        with translated(f"checking the heartbeats of {len(names)} consumer(s)"):
            beats = await self._cluster.mget_nonatomic([consumer_key(prefix, c) for c in names])
        return {name for name, beat in zip(names, beats, strict=True) if beat is not None}

    # -- benchmarks ----------------------------------------------------------------

    async def server_pid(self) -> int:
        raise NotImplementedError("the benchmarks measure one Redis server, not a cluster")

    async def command_calls(self) -> dict[str, int]:
        """Calls per command, summed over the masters (INFO commandstats)."""
        calls: dict[str, int] = {}
        with translated("INFO commandstats"):
            stats = await self._cluster.info("commandstats", target_nodes=RedisCluster.PRIMARIES)
        for per_node in stats.values():
            for k, v in per_node.items():
                name = k.removeprefix("cmdstat_")
                calls[name] = calls.get(name, 0) + int(v["calls"])
        return calls

    # -- hints -------------------------------------------------------------------

    async def notify(self, channel: str, message: str) -> None:
        with translated(f"publishing on {channel}"):
            await self._cluster.execute_command("SPUBLISH", channel, message)

    async def notify_many(self, messages: Sequence[tuple[str, str]]) -> None:
        # each channel's shard may be another node: sent side by side, not pipelined
        await asyncio.gather(*(self.notify(c, m) for c, m in messages))

    @contextlib.asynccontextmanager
    async def subscribe(self, channels: Sequence[str]) -> AsyncIterator[Subscription]:
        what = f"subscribing to {', '.join(channels)}"
        clients: list[aioredis.Redis] = []
        pubsubs: list[PubSub] = []
        try:
            with translated(what):
                by_node: dict[str, tuple[ClusterNode, list[str]]] = {}
                for chan in channels:
                    node = await self._node(chan)
                    by_node.setdefault(node.name, (node, []))[1].append(chan)
                for node, chans in by_node.values():
                    client = aioredis.Redis(**_standalone(node))
                    clients.append(client)
                    pubsub = client.pubsub()
                    pubsubs.append(pubsub)
                    for chan in chans:  # one slot each: SSUBSCRIBE cannot span two
                        await pubsub.ssubscribe(chan)
            yield _ShardedSubscription(pubsubs)
        finally:
            for pubsub in pubsubs:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]
            for client in clients:
                with contextlib.suppress(Exception):
                    await client.aclose()

    async def subscribers(self, channel: str) -> int:
        with translated(f"PUBSUB SHARDNUMSUB {channel}"):
            node = await self._node(channel)
            reply = await self._cluster.execute_command(
                "PUBSUB SHARDNUMSUB", channel, target_nodes=node
            )
        return int(dict(reply).get(channel, 0))


class _ShardedSubscription:
    """The messages of one SSUBSCRIBEd connection per master, as one stream of hints."""

    def __init__(self, pubsubs: list[PubSub]) -> None:
        self._pubsubs = pubsubs

    async def messages(self) -> AsyncIterator[tuple[str, str]]:
        inbox: asyncio.Queue[tuple[str, str] | BaseException] = asyncio.Queue()

        async def pump(pubsub: PubSub) -> None:
            try:
                with translated("listening for hints"):
                    async for item in pubsub.listen():
                        kind = item.get("type")
                        if kind == "smessage":
                            data = item.get("data")
                            text = data.decode() if isinstance(data, bytes) else str(data or "")
                            inbox.put_nowait((str(item.get("channel")), text))
                        elif kind == "sunsubscribe":  # the slot moved: subscribe again
                            break
                raise QueueUnavailable(
                    "the hint subscription ended (the node closed it, or the slot moved)"
                )
            except BaseException as exc:
                inbox.put_nowait(exc)

        pumps = [asyncio.create_task(pump(p)) for p in self._pubsubs]
        try:
            while True:
                item = await inbox.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            for task in pumps:
                task.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)


def _standalone(node: ClusterNode) -> dict[str, Any]:
    """A cluster node's connection settings as a plain client takes them."""
    kwargs = node.connection_kwargs
    keep = {
        "host",
        "port",
        "username",
        "password",
        "credential_provider",
        "decode_responses",
        "encoding",
        "encoding_errors",
        "socket_connect_timeout",
        "socket_keepalive",
        "protocol",
        "ssl",
        "ssl_ca_certs",
        "ssl_certfile",
        "ssl_keyfile",
        "ssl_cert_reqs",
        "ssl_check_hostname",
    }
    out = {k: v for k, v in kwargs.items() if k in keep}
    out["health_check_interval"] = 30
    if issubclass(node.connection_class, SSLConnection):
        out["ssl"] = True
    return out


def _entries(reply: Any, stream: str | None = None) -> list[Entry]:
    """The entries of an undecoded XREADGROUP reply (None when nothing came)."""
    return [
        _entry(stream or _text(name), i, fields)
        for name, items in reply or []
        for i, fields in items
        if fields is not None
    ]


async def _all(calls: Iterable[Any]) -> None:
    """Run the calls concurrently; raise the first failure once all are done."""
    results = await asyncio.gather(*calls, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
