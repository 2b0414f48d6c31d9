"""The Redis driver's signals: pub/sub messages that its scripts publish as they write
(``lua/common.lua``, ``signal``), so a signal goes out with its write or not at all.

A queue's ``MESSAGES`` go to its own channel (``KeyNames.signal_channel``), to which the
processes that follow the queue (``followed``) subscribe: a post to a queue nobody waits
on or pushes costs Redis one lookup and wakes no process. On a cluster the channel is a
shard channel, published in the queue's slot and sent by that slot's node alone, so a
post costs the cluster bus nothing; a process subscribes to it on the node owning the
slot, and again on the new owner when the slot moves (the old one then ends the
subscription with a ``sunsubscribe``). ``SUBSCRIPTIONS`` (rare) go to the shared channel
(``KeyNames.signals``), which every process hears (a cluster sends it to every node).

A listener's connections are its own and never send anything again: a dropped one ends
``listen``, whose caller (``delayq.api.wakeups``) listens again and wakes every followed
queue, since the signals published meanwhile are lost.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, cast

import redis
import redis.asyncio
import redis.asyncio.cluster
from redis.asyncio.client import PubSub
from redis.crc import key_slot

from delayq.storage import base
from delayq.storage.base.signals import Change, Receive, Signal
from delayq.storage.redis import layout
from delayq.storage.redis.client import (
    Connection,
    connect_async,
    detect_cluster,
    listener,
    unavailable,
)
from delayq.storage.redis.layout import KeyNames

# Seconds of silence after which a listener asks its connection for a PING, and the
# PING's own deadline: a connection that died without a word (a host gone) ends the
# listener within twice this.
PING_EVERY = 30.0
SIGNAL_TYPES = frozenset({"message", "smessage"})
SUBSCRIBED_TYPES = frozenset({"subscribe", "ssubscribe"})


class Signals(base.Signals):
    """The signals of one Redis deployment, as one process receives them."""

    def __init__(self, connection: Connection, key_names: KeyNames) -> None:
        super().__init__()
        self.connection = connection
        self.key_names = key_names
        self._listening: _Listening | None = None

    async def listen(self, receive: Receive) -> None:
        with unavailable:
            cluster = await self._cluster()
            listening = _Listening(self, receive, cluster)
            self._listening = listening
            try:
                await listening.run()
            finally:
                if self._listening is listening:
                    self._listening = None
                await listening.close()
                if cluster is not None:
                    await cluster.aclose()

    async def _cluster(self) -> redis.asyncio.cluster.RedisCluster | None:
        """A cluster client of the listener's own, which knows the slots' nodes; None
        on one server. Not the driver's: the listener starts with the worker, and would
        otherwise be the one call that connects the driver while requests that come
        meanwhile are refused (``client.Connection``)."""
        connection = self.connection
        clustered = connection.clustered
        if clustered is None:
            clustered = await detect_cluster(connection.uri, connection.options)
        if not clustered:
            return None
        return cast(redis.asyncio.cluster.RedisCluster,
                    connect_async(connection.uri, True, **connection.options))

    def followed(self, project: str, queue: str, wanted: bool) -> None:
        listening = self._listening
        if listening is not None:
            listening.following_changed()


class _Listening:
    """One run of ``listen``: a connection to each node it subscribes on, each read by
    a task of its own.

    The shared channel goes on one node (a cluster sends its messages to all). The
    followed queues' channels are subscribed and unsubscribed as the queues followed
    change (``_place``, run by ``run`` whenever woken): on one server beside the shared
    channel, on a cluster (*cluster*, the loop's client, which knows the slots) as shard
    channels on their slots' nodes.
    """

    def __init__(self, signals: Signals, receive: Receive,
                 cluster: redis.asyncio.cluster.RedisCluster | None) -> None:
        self.signals = signals
        self.receive = receive
        self.cluster = cluster
        self._nodes: dict[str, tuple[redis.asyncio.Redis, PubSub, asyncio.Task[None]]] = {}
        self._placed: dict[str, str] = {}  # queue channel → the node subscribed on
        self._queue_of: dict[str, tuple[str, str]] = {}  # queue channel → its queue
        self._moved: set[str] = set()  # shard channels whose slot moved to another node
        self._wake = asyncio.Event()
        self._failure: Exception | None = None

    def following_changed(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        shared = self.signals.key_names.signals()
        if self.cluster is None:
            node = None
        else:
            await self.cluster.initialize()
            node = _owner(self.cluster, shared)
        pubsub = await self._node(node)
        await pubsub.subscribe(shared)
        self._wake.set()
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._failure is not None:
                raise self._failure
            if self.cluster is None:
                await self._place_on_server()
            else:
                await self._place(self.cluster)

    async def _node(self, node: tuple[str, int] | None) -> PubSub:
        """The subscriptions of *node* (the server of one: None), connected and read."""
        name = _name(node)
        entry = self._nodes.get(name)
        if entry is not None:
            return entry[1]
        client = listener(self.signals.connection.uri, self.signals.connection.options, node)
        pubsub = client.pubsub()
        try:
            await pubsub.connect()
        except BaseException:
            await pubsub.aclose()
            await client.aclose()
            raise
        reader = asyncio.get_running_loop().create_task(
            self._read(name, pubsub), name=f"delayq-signals-{name or 'redis'}")
        self._nodes[name] = (client, pubsub, reader)
        return pubsub

    def _wanted(self) -> set[str]:
        """The channels of the queues followed now (and the queue of each noted)."""
        key_names = self.signals.key_names
        self._queue_of = {key_names.signal_channel(project, queue): (project, queue)
                          for project, queue in self.signals.following()}
        return set(self._queue_of)

    async def _place_on_server(self) -> None:
        """Subscribe to the channel of each queue followed now, and unsubscribe from
        the others, on the one server."""
        wanted = self._wanted()
        pubsub = await self._node(None)
        gone = [channel for channel in self._placed if channel not in wanted]
        new = [channel for channel in wanted if channel not in self._placed]
        for channel in gone:
            del self._placed[channel]
        if gone:
            await pubsub.unsubscribe(*gone)
        if new:
            await pubsub.subscribe(*new)
            self._placed.update(dict.fromkeys(new, _name(None)))

    async def _place(self, cluster: redis.asyncio.cluster.RedisCluster) -> None:
        """Subscribe to the shard channel of each queue followed now, on the node owning
        its slot, and unsubscribe from the others."""
        wanted = self._wanted()
        for channel, name in list(self._placed.items()):
            if channel not in wanted:
                del self._placed[channel]
                await self._nodes[name][1].sunsubscribe(channel)
        for channel in wanted:
            if channel in self._placed:
                continue
            if channel in self._moved:
                # Its slot's old owner answers MOVED, from which the client learns the
                # new one (a channel's name is a key of its slot).
                await cluster.exists(channel)
            owner = _owner(cluster, channel)
            pubsub = await self._node(owner)
            await pubsub.ssubscribe(channel)
            self._placed[channel] = _name(owner)
        self._moved.clear()

    async def _read(self, name: str, pubsub: PubSub) -> None:
        """Hand every signal *pubsub* receives on, until its connection fails."""
        pinged = False
        try:
            while True:
                try:
                    message = await pubsub.get_message(timeout=PING_EVERY)
                except redis.exceptions.MovedError as exc:
                    # A subscription sent to a node that lost the slot meanwhile.
                    self._lost(name, slot=exc.slot_id)
                    continue
                if message is None:
                    if pinged:
                        raise redis.exceptions.ConnectionError(
                            f"No answer to PING in {PING_EVERY:g}s")
                    await pubsub.ping()
                    pinged = True
                    continue
                pinged = False
                self._handle(name, message)
        except Exception as exc:  # noqa: BLE001 - ends the listener, which says why
            self._failure = exc
            self._wake.set()

    def _handle(self, name: str, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind in SIGNAL_TYPES:
            signal = layout.signal(message["data"])
            if signal is not None:
                self.receive(signal)
        elif kind in SUBSCRIBED_TYPES:
            # What the queue's writes signalled before its subscription took effect is
            # lost: its waiters and pusher look once now.
            queue = self._queue_of.get(message["channel"].decode())
            if queue is not None:
                self.receive(Signal(Change.MESSAGES, *queue))
        elif kind == "sunsubscribe":
            # Not ours when the channel is still placed here: its slot moved away.
            channel = message["channel"].decode()
            self._lost(name, channel=channel)

    def _lost(self, name: str, *, slot: int | None = None, channel: str | None = None
              ) -> None:
        """The shard channels placed on node *name* in *slot*, or *channel*, are no
        longer subscribed there: place them again."""
        for placed, where in list(self._placed.items()):
            if where == name and (placed == channel
                                  or key_slot(placed.encode()) == slot):
                del self._placed[placed]
                self._moved.add(placed)
                self._wake.set()

    async def close(self) -> None:
        nodes, self._nodes = self._nodes, {}
        for _client, _pubsub, reader in nodes.values():
            reader.cancel()
        for client, pubsub, reader in nodes.values():
            with contextlib.suppress(asyncio.CancelledError):
                await reader
            with contextlib.suppress(redis.exceptions.RedisError, OSError):
                await pubsub.aclose()
                await client.aclose()


def _owner(cluster: redis.asyncio.cluster.RedisCluster, key: str) -> tuple[str, int]:
    """(host, port) of the primary that *cluster*'s client says owns *key*'s slot."""
    node = cluster.get_node_from_key(key)
    if node is None:
        raise redis.exceptions.ClusterDownError(f"No node serves the slot of {key}")
    return node.host, int(node.port)


def _name(node: tuple[str, int] | None) -> str:
    return "" if node is None else f"{node[0]}:{node[1]}"
