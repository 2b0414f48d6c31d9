"""The Redis driver.

Every transition is one Lua script (``lua/``), so it is atomic across every API process;
time comes from the Redis server's ``TIME``, so API hosts with skewed clocks agree on when
a message is due.

Each queue's keys share one hash tag, hence one cluster slot. A message is in exactly one
of three sorted sets — free (by availability), delayed (by due time), claimed (by claim
expiry) — so a claim reads the head of each and costs O(log n + limit) however many
messages are delayed or claimed. A claim under a retry policy that makes a message due
after the claim ends files it among the delayed by that due time, its claim's expiry in
a fourth set beside (so stats still count it as claimed while the claim lives); a claim
never reads that set. Records live in hashes of 64 consecutive messages, which
Redis stores as compact listpacks; ``docs/redis.md`` has the sizing figures.

A dead-letter move to a queue in the same slot (always, on a single server) happens inside
the claim script. A move to another cluster slot goes through the source queue's outbox:
the claim script moves the message there; ``moves.py`` copies it into the
dead-letter queue (``move_in``, which remembers the move's token, so doing it twice
applies it once) and then deletes it from the outbox. A process dying between the steps
leaves the outbox entry, which the next operation on the source queue (or the reaper)
completes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import redis
import redis.asyncio.cluster
from oslo_config import cfg
from redis.cluster import RedisCluster
from redis.crc import key_slot

from delayq import errors, events
from delayq.conf import events_settings
from delayq.storage import base
from delayq.storage.redis import persistence
from delayq.storage.redis.calls import Calls
from delayq.storage.redis.claims import Claims
from delayq.storage.redis.client import NAME, AsyncClient, Connection, unavailable
from delayq.storage.redis.context import Context
from delayq.storage.redis.layout import US, KeyNames
from delayq.storage.redis.messages import Messages
from delayq.storage.redis.options import GROUP
from delayq.storage.redis.queues import Queues
from delayq.storage.redis.scripts import READ_REAP_BUDGET, Scripts
from delayq.storage.redis.signals import Signals
from delayq.storage.redis.subscriptions import Subscriptions
from delayq.storage.redis.trail import Trail

LOG = logging.getLogger(__name__)


class Driver(base.Driver):
    """Queues, messages and claims in Redis (one server or a cluster).

    Made outside an event loop (a server's start, the audits, the tests), it connects
    at once, on a loop of its own, so that a wrong address or an unreachable Redis is
    logged at start; made on a loop, it connects at its first call. Either way each
    loop that awaits it then opens its own connections (``client.Clients``).
    """

    name = NAME

    def __init__(self, uri: str, *, namespace: str = "dq", socket_timeout: float = 5.0,
                 connect_timeout: float = 2.0, max_connections: int = 64,
                 reap_interval: int = 0, move_marker_ttl: int = 3600,
                 clock: Callable[[], float] | None = None,
                 events_settings: events.Settings = events.ON,
                 endings: base.Endings = base.ignore_endings) -> None:
        super().__init__(endings=endings, reap_interval=reap_interval)
        self.key_names = KeyNames(namespace)
        self._clock = clock
        self.connection = Connection(uri, self._prepare, socket_timeout=socket_timeout,
                                     connect_timeout=connect_timeout,
                                     max_connections=max_connections)
        self._scripts = Scripts(Calls(self.connection), events_settings.retention,
                                self.endings, signals=self.key_names.signals())
        # ARGV[1] of every script: without a clock "" (what str() returns, with no Python
        # call), so the script reads the server's clock.
        self._now_arg: Callable[[], str] = str if clock is None else _in_micros(clock)
        self.context = Context(self.connection, self._scripts, self.key_names, self._now_arg,
                               move_marker_ttl)
        self.queues = Queues(self.context)
        self.messages = Messages(self.context)
        self.claims = Claims(self.context)
        self.subscriptions = Subscriptions(self.context)
        self.trail = Trail(self.connection, self.key_names, clock)
        self.signals = Signals(self.connection, self.key_names)
        if not _on_a_loop():
            self._connect_at_start()

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts, *,
                  endings: base.Endings = base.ignore_endings) -> Driver:
        group = conf[GROUP]
        return cls(group.uri, namespace=group.namespace, socket_timeout=group.socket_timeout,
                   connect_timeout=group.connect_timeout,
                   max_connections=group.max_connections, reap_interval=group.reap_interval,
                   move_marker_ttl=group.move_marker_ttl,
                   events_settings=events_settings(conf), endings=endings)

    def _connect_at_start(self) -> None:
        """Connect on a loop of its own, left as soon as connected: the thread's current
        loop, if it has one set, stays as it is."""
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(self.connection.clients())
        except errors.StorageUnavailable as exc:
            LOG.warning("%s; connecting again at the next request.", exc.description)
        finally:
            loop.close()

    async def _prepare(self, client: AsyncClient) -> None:
        """Before the first call: the scripts loaded (signalling by shard on a
        cluster), the persistence settings checked."""
        self._scripts.shard_signals(isinstance(client, redis.asyncio.cluster.RedisCluster))
        await self._scripts.load(client)
        await persistence.check(client)

    @property
    def _client(self) -> redis.Redis | RedisCluster:
        """The blocking client, for tests and tools outside any loop."""
        return self.connection.blocking()

    @property
    def cluster(self) -> bool:
        """True when Redis is a cluster (queues then live in different slots); connected
        first, blocking, when the driver is not yet: never on a loop."""
        clustered = self.connection.clustered
        if clustered is None:
            clustered = isinstance(self._client, RedisCluster)
        return clustered

    def same_slot(self, key: str, other: str) -> bool:
        return not self.cluster or key_slot(key.encode()) == key_slot(other.encode())

    async def now(self) -> float:
        if self._clock is not None:
            return self._clock()
        with unavailable:
            reply = await self.context.calls.command("TIME")
        if isinstance(reply, dict):  # a cluster answers per node
            reply = next(iter(reply.values()))
        seconds, micros = reply
        return seconds + micros / US

    async def ping(self) -> bool:
        try:
            return bool(await self.context.calls.command("PING"))
        except (redis.exceptions.RedisError, errors.StorageUnavailable):
            return False

    async def close(self) -> None:
        await super().close()
        await self.connection.close()

    async def reap_queue(self, project: str, queue: str, rounds: int = 16) -> bool:
        """Remove a queue's expired messages (bounded); True when none is left."""
        context = self.context
        key = context.key_names.queue(project, queue)
        for _ in range(rounds):
            finished, outbox = await context.scripts.reap.call(
                [key], [context.now_arg(), READ_REAP_BUDGET, context.moves.marker_ttl])
            if outbox:
                await context.moves.complete(project, queue)
            if finished:
                return True
        return False

    async def reap_lease(self, seconds: float) -> bool:
        client = await self.context.calls.client()
        return bool(await client.set(self.key_names.reaper(), str(time.time()), nx=True,
                                     px=int(seconds * 1000)))

    async def reap(self) -> None:
        """One pass over every queue of every project, and over the deleted queues that
        ever had subscriptions (which outlive them), the reaper's work."""
        client = await self.context.calls.client()
        subscribed = {self.key_names.subscribed_owner(entry.decode()) async for entry, _version
                      in client.hscan_iter(self.key_names.subscribed_versions())}
        projects_key = self.key_names.projects()
        async for raw_project in client.sscan_iter(projects_key):
            project = raw_project.decode()
            catalogue = self.key_names.catalogue(project)
            async for name, _score in client.zscan_iter(catalogue):
                await self.reap_queue(project, name.decode())
                subscribed.discard((project, name.decode()))
            if await client.zcard(catalogue) == 0:
                # Forget the project; a queue created meanwhile puts it back.
                await client.srem(projects_key, project)
                if await client.zcard(catalogue):
                    await client.sadd(projects_key, project)
        for project, name in sorted(subscribed):
            await self.reap_queue(project, name)


def _in_micros(clock: Callable[[], float]) -> Callable[[], str]:
    """ARGV[1] of every script with a clock given (tests): its time in microseconds."""
    return lambda: str(round(clock() * US))


def _on_a_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
