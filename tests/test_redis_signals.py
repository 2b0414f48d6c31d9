"""The Redis driver's signals, between two drivers on one Redis as two processes would
have them: one listens, the other writes.

Each write that may make messages claimable signals ``MESSAGES`` for the queue the
messages land in, each subscription change ``SUBSCRIPTIONS``, and a write that changes
nothing signals nothing; a process hears the ``MESSAGES`` of the queues it follows only
(on a cluster on their slots' nodes, even after a slot moves), and once for each queue
as its subscription takes effect (``Pair.start`` waits for it). A killed pub/sub
connection ends ``listen``, and listening again works.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from delayq import errors
from delayq.claim import Claim
from delayq.message import NewMessage
from delayq.queue import DeadLetterPolicy
from delayq.storage.base.signals import Change, Signal
from delayq.storage.redis.driver import Driver
from delayq.storage.redis.layout import KeyNames
from delayq.subscription import SubscriptionChange
from tests.redis_servers import SERVERS

PROJECT = "p/x y"  # percent-encoded in keys and payloads
CLIENT = "2c4c6f9a-4f8e-4a57-9d0e-6a6d0d1e2f3a"
WAIT = 5.0  # seconds a test waits for what must come soon


def namespace() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=["single", "cluster"])
def uri(request) -> str:
    return SERVERS.single().uri if request.param == "single" else SERVERS.cluster_uri()


def nodes(uri: str) -> list[redis.Redis]:
    """A client of each node (the server alone, or every primary of the cluster)."""
    ports = [int(hostport.rpartition(":")[2])
             for hostport in uri.split("://")[1].split("/")[0].split(",")]
    return [redis.Redis(port=port) for port in ports]


class Heard:
    """The signals a listener received, with a way to wait for one."""

    def __init__(self) -> None:
        self.signals: list[Signal] = []
        self._arrived = asyncio.Event()

    def __call__(self, signal: Signal) -> None:
        self.signals.append(signal)
        self._arrived.set()

    async def wait_for(self, signal: Signal) -> None:
        async with asyncio.timeout(WAIT):
            while signal not in self.signals:
                self._arrived.clear()
                await self._arrived.wait()


class Pair:
    """Two drivers on one Redis: *listener* listens (a task), *writer* writes."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        ns = namespace()
        self.listener = Driver(uri, namespace=ns)
        self.writer = Driver(uri, namespace=ns)
        self.heard = Heard()
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Listen, and return once subscribed to what the listener follows, the wake-up
        each queue gets as its subscription takes effect heard and forgotten."""
        self.listen()
        followed = [queue for _project, queue in self.listener.signals.following()]
        await self.subscribed(*followed)
        for queue in followed:
            await self.heard.wait_for(messages(queue))
        self.heard.signals.clear()

    def listen(self) -> asyncio.Task[None]:
        self.task = asyncio.get_running_loop().create_task(
            self.listener.signals.listen(self.heard))
        return self.task

    async def subscribed(self, *queues: str, shared: bool = True) -> None:
        """Once the listener subscribes to the shared channel (*shared*) and to the
        channels of *queues* (shard channels on a cluster), as Redis counts
        subscribers."""
        key_names = self.listener.key_names
        wanted = [key_names.signal_channel(PROJECT, queue) for queue in queues]
        clients = nodes(self.uri)
        cluster = len(clients) > 1
        async with asyncio.timeout(WAIT):
            while True:
                counts = [dict(client.pubsub_numsub(key_names.signals()))
                          for client in clients]
                ready = not shared or sum(c.get(key_names.signals().encode(), 0)
                                          for c in counts) >= 1
                for channel in wanted:
                    ready = ready and sum(subscribers(client, channel, cluster)
                                          for client in clients) >= 1
                if ready:
                    return
                await asyncio.sleep(0.01)

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, errors.StorageUnavailable):
                await self.task
        await self.listener.close()
        await self.writer.close()


def subscribers(client: redis.Redis, channel: str, cluster: bool) -> int:
    """How many connections to *client*'s node subscribe to the queue channel *channel*
    (sharded on a *cluster*)."""
    counts = client.pubsub_shardnumsub(channel) if cluster else client.pubsub_numsub(channel)
    return dict(counts)[channel.encode()]


@contextlib.asynccontextmanager
async def pair(uri: str, *followed: str, listening: bool = True) -> AsyncIterator[Pair]:
    """A pair whose listener follows *followed*, listening and subscribed unless not
    *listening* (then ``start``)."""
    both = Pair(uri)
    try:
        for queue in followed:
            both.listener.signals.follow(PROJECT, queue)
        if listening:
            await both.start()
        yield both
    finally:
        await both.close()


def run(coroutine: Awaitable[Any]) -> Any:
    return asyncio.run(coroutine)  # type: ignore[arg-type]


async def post(driver: Driver, queue: str, count: int = 1, delay: int = 0) -> list[str]:
    return await driver.messages.post(PROJECT, queue, CLIENT,
                                      [NewMessage({"n": i}, 600, delay) for i in range(count)])


def messages(queue: str) -> Signal:
    return Signal(Change.MESSAGES, PROJECT, queue)


def subscriptions(queue: str) -> Signal:
    return Signal(Change.SUBSCRIPTIONS, PROJECT, queue)


# The writes that signal: each makes its setup, then awaits *ready* (the listener
# listens from then on: the setup's own signals are not heard), then writes, and says
# the signal that write sends.

Ready = Callable[[], Awaitable[None]]
Write = Callable[[Driver, Ready], Awaitable[Signal]]


async def posted(writer: Driver, ready: Ready) -> Signal:
    await ready()
    await post(writer, "q")
    return messages("q")


async def edited(writer: Driver, ready: Ready) -> Signal:
    [message_id] = await post(writer, "q", delay=600)
    await ready()
    await writer.messages.edit(PROJECT, "q", message_id, delay=0)
    return messages("q")


async def two_claimed(writer: Driver) -> Claim:
    """A claim of two messages posted to ``q``."""
    await post(writer, "q", 2)
    claim = await writer.claims.create(PROJECT, "q", ttl=60, grace=60, limit=2,
                                       dead_letter=None)
    assert claim is not None
    return claim


async def released(writer: Driver, ready: Ready) -> Signal:
    claim = await two_claimed(writer)
    await ready()
    await writer.claims.release(PROJECT, "q", claim.id)
    return messages("q")


async def handed_back(writer: Driver, ready: Ready) -> Signal:
    claim = await two_claimed(writer)
    await ready()
    await writer.claims.release_message(PROJECT, "q", claim.messages[0].id, claim.id, 0)
    return messages("q")


async def dead_lettered(writer: Driver, ready: Ready) -> Signal:
    # "dlq" shares no slot with "q" on a cluster: the move lands through move_in.
    policy = DeadLetterPolicy(max_claim_count=1, queue="dlq")
    await writer.queues.create(PROJECT, "dlq", {})
    await post(writer, "q")
    claim = await writer.claims.create(PROJECT, "q", ttl=60, grace=60, limit=1,
                                       dead_letter=policy)
    assert claim is not None
    await writer.claims.release(PROJECT, "q", claim.id)
    await ready()
    # The claim dead-letters the message released above, and claims nothing.
    assert await writer.claims.create(PROJECT, "q", ttl=60, grace=60, limit=1,
                                      dead_letter=policy) is None
    return messages("dlq")


async def redriven(writer: Driver, ready: Ready) -> Signal:
    await writer.queues.create(PROJECT, "dest", {})
    await post(writer, "q")
    await ready()
    assert await writer.messages.redrive(PROJECT, "q", destination="dest", limit=10) == 1
    return messages("dest")


async def subscribed(writer: Driver, ready: Ready) -> Signal:
    await ready()
    await writer.subscriptions.create(PROJECT, "q", "http://127.0.0.1:9/a", 600, {})
    return subscriptions("q")


async def subscription_updated(writer: Driver, ready: Ready) -> Signal:
    subscription_id = await writer.subscriptions.create(PROJECT, "q", "http://127.0.0.1:9/a",
                                                        600, {})
    assert subscription_id is not None
    await ready()
    await writer.subscriptions.update(PROJECT, "q", subscription_id,
                                      SubscriptionChange(ttl=900))
    return subscriptions("q")


async def unsubscribed(writer: Driver, ready: Ready) -> Signal:
    subscription_id = await writer.subscriptions.create(PROJECT, "q", "http://127.0.0.1:9/a",
                                                        600, {})
    assert subscription_id is not None
    await ready()
    await writer.subscriptions.delete(PROJECT, "q", subscription_id)
    return subscriptions("q")


async def subscriptions_purged(writer: Driver, ready: Ready) -> Signal:
    await writer.subscriptions.create(PROJECT, "q", "http://127.0.0.1:9/a", 600, {})
    await ready()
    await writer.subscriptions.purge(PROJECT, "q")
    return subscriptions("q")


WRITES: dict[str, Write] = {write.__name__: write for write in (
    posted, edited, released, handed_back, dead_lettered, redriven, subscribed,
    subscription_updated, unsubscribed, subscriptions_purged)}


@pytest.mark.parametrize("kind", sorted(WRITES))
def test_a_write_through_one_driver_signals_the_other(uri, kind):
    async def scenario() -> None:
        async with pair(uri, "q", "dlq", "dest", listening=False) as both:
            expected = await WRITES[kind](both.writer, both.start)
            await both.heard.wait_for(expected)

    run(scenario())


def test_a_write_that_frees_nothing_signals_nothing():
    """On one server, where every signal comes through one connection in order: the
    writes below change nothing claimable, and the marker after them is the first
    signal heard."""
    async def scenario() -> None:
        uri = SERVERS.single().uri
        async with pair(uri, "q", "d", "marker") as both:
            writer = both.writer
            [message_id] = await post(writer, "q")
            await both.heard.wait_for(messages("q"))
            both.heard.signals.clear()
            await writer.messages.edit(PROJECT, "q", message_id, body={"new": 1})
            claim = await writer.claims.create(PROJECT, "q", ttl=60, grace=60, limit=1,
                                               dead_letter=None)
            assert claim is not None
            await writer.claims.renew(PROJECT, "q", claim.id, 120, 60)
            await writer.messages.delete(PROJECT, "q", message_id, claim.id)
            await writer.claims.release(PROJECT, "q", claim.id)  # holds nothing now
            assert await writer.claims.create(PROJECT, "q", ttl=60, grace=60, limit=1,
                                              dead_letter=None) is None
            await writer.subscriptions.purge(PROJECT, "q")  # has none
            await writer.queues.purge(PROJECT, "q")
            assert await writer.messages.redrive(PROJECT, "q", destination="d",
                                                 limit=10) == 0
            await post(writer, "marker")
            await both.heard.wait_for(messages("marker"))
            assert both.heard.signals == [messages("marker")]

    run(scenario())


def test_a_post_of_several_messages_signals_once():
    async def scenario() -> None:
        async with pair(SERVERS.single().uri, "q", "marker") as both:
            await post(both.writer, "q", 50)
            await post(both.writer, "marker")
            await both.heard.wait_for(messages("marker"))
            assert both.heard.signals == [messages("q"), messages("marker")]

    run(scenario())


def same_node_queues(uri: str, count: int) -> list[str]:
    """*count* queue names whose shard channels live on one cluster node (so their
    signals reach a listener through one connection, in order)."""
    cluster = RedisCluster.from_url(uri.partition(",")[0])
    key_names = KeyNames("ns")  # a channel's slot is its queue's, whatever the namespace
    by_node: dict[str, list[str]] = {}
    try:
        for i in range(1000):
            queue = f"q{i}"
            node = cluster.get_node_from_key(key_names.signal_channel(PROJECT, queue))
            names = by_node.setdefault(node.name, [])
            names.append(queue)
            if len(names) == count:
                return names
    finally:
        cluster.close()
    raise AssertionError("no node holds enough queues")


def test_only_followed_queues_signals_arrive(uri):
    async def scenario() -> None:
        cluster = uri != SERVERS.single().uri
        followed, unfollowed, marker = (same_node_queues(uri, 3) if cluster
                                        else ["followed", "unfollowed", "marker"])
        async with pair(uri, followed, marker) as both:
            await post(both.writer, unfollowed)
            await post(both.writer, followed)
            await post(both.writer, marker)
            await both.heard.wait_for(messages(marker))
            assert both.heard.signals == [messages(followed), messages(marker)]

            # Unfollowed, its channel has no subscriber left.
            both.listener.signals.unfollow(PROJECT, followed)
            channel = both.listener.key_names.signal_channel(PROJECT, followed)
            async with asyncio.timeout(WAIT):
                while sum(subscribers(client, channel, cluster) for client in nodes(uri)):
                    await asyncio.sleep(0.01)
            both.heard.signals.clear()
            await post(both.writer, followed)
            await post(both.writer, marker)
            await both.heard.wait_for(messages(marker))
            assert both.heard.signals == [messages(marker)]

    run(scenario())


def test_a_queue_followed_while_listening_is_heard(uri):
    async def scenario() -> None:
        async with pair(uri) as both:
            both.listener.signals.follow(PROJECT, "late")
            await both.subscribed("late")
            await post(both.writer, "late")
            await both.heard.wait_for(messages("late"))

    run(scenario())


def test_a_killed_pubsub_connection_ends_listen_and_listening_again_works(uri):
    async def scenario() -> None:
        both = Pair(uri)
        try:
            both.listener.signals.follow(PROJECT, "q")
            task = both.listen()
            await both.subscribed("q")
            for client in nodes(uri):
                client.client_kill_filter(_type="pubsub")
            with pytest.raises(errors.StorageUnavailable):
                async with asyncio.timeout(WAIT):
                    await task
            both.listen()
            await both.subscribed("q")
            await post(both.writer, "q")
            await both.heard.wait_for(messages("q"))
        finally:
            await both.close()

    run(scenario())


def empty_slot_queue(uri: str) -> str:
    """A queue whose slot holds no key: the slot can move without migrating any."""
    key_names = KeyNames("ns")
    cluster = RedisCluster.from_url(uri.partition(",")[0])
    try:
        for i in range(1000):
            queue = f"moving{i}"
            channel = key_names.signal_channel(PROJECT, queue)
            owner = redis.Redis(port=cluster.get_node_from_key(channel).port)
            if not owner.cluster("COUNTKEYSINSLOT", cluster.keyslot(channel)):
                return queue
    finally:
        cluster.close()
    raise AssertionError("no empty slot")


def move_slot(slot: int, source: redis.Redis, target: redis.Redis,
              everyone: list[redis.Redis]) -> None:
    """Move *slot*, which holds no key, from node *source* to node *target*."""
    source_id, target_id = source.cluster("MYID"), target.cluster("MYID")
    target.cluster("SETSLOT", slot, "IMPORTING", source_id)
    source.cluster("SETSLOT", slot, "MIGRATING", target_id)
    for node in [target, source, *everyone]:
        node.cluster("SETSLOT", slot, "NODE", target_id)


def test_signals_follow_a_slot_that_moves_to_another_node():
    """The node that loses a slot ends its shard subscriptions (``sunsubscribe``), and
    the listener subscribes again on the slot's new owner."""
    async def scenario() -> None:
        uri = SERVERS.cluster_uri()
        queue = empty_slot_queue(uri)
        cluster = RedisCluster.from_url(uri.partition(",")[0])
        channel = KeyNames("ns").signal_channel(PROJECT, queue)
        slot = cluster.keyslot(channel)
        by_port = {client.connection_pool.connection_kwargs["port"]: client
                   for client in nodes(uri)}
        source = by_port[cluster.get_node_from_key(channel).port]
        target = next(client for port, client in by_port.items() if client is not source)
        async with pair(uri, queue) as both:
            move_slot(slot, source, target, list(by_port.values()))
            try:
                channel = both.listener.key_names.signal_channel(PROJECT, queue)
                async with asyncio.timeout(WAIT):
                    while not dict(target.pubsub_shardnumsub(channel))[channel.encode()]:
                        await asyncio.sleep(0.01)
                await post(both.writer, queue)
                await both.heard.wait_for(messages(queue))
            finally:
                for key in target.cluster("GETKEYSINSLOT", slot, 10_000):
                    target.delete(key)
                move_slot(slot, target, source, list(by_port.values()))
                cluster.close()

    run(scenario())
