"""Connecting to Redis (one server or a cluster), and which failures are a 503.

The driver talks to Redis through redis-py's public clients: one ``redis.asyncio``
client per event loop for every call awaited on it (``Clients``), and a blocking one
(``redis.Redis`` or ``redis.cluster.RedisCluster``) only for the audits' reads, whose
interface blocks (``trail.py``). All speak RESP2, as the scripts' replies are written
for, and parse with hiredis when it is installed (redis-py picks it).
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias, TypedDict
from urllib.parse import unquote

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.retry
from redis.backoff import ExponentialBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.retry import Retry

from delayq import errors
from delayq.storage.base.unavailable import Unavailability
from delayq.storage.redis.fastpath import FastPath, Server
from delayq.storage.redis.options import GROUP
from delayq.storage.redis.per_loop import PerLoop

NAME = "redis"  # the store a 503 names
CONNECT_PAUSE = 0.5  # seconds between attempts to connect while Redis is down

AsyncClient: TypeAlias = "redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster"


class Options(TypedDict):
    """How the driver connects, as its options say (``options.py``)."""

    socket_timeout: float
    connect_timeout: float
    max_connections: int

UNAVAILABLE = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError,
               redis.exceptions.BusyLoadingError, redis.exceptions.ClusterDownError,
               redis.exceptions.TryAgainError, redis.exceptions.ReadOnlyError,
               redis.exceptions.OutOfMemoryError, redis.exceptions.RedisClusterException)
# Replies of a cluster whose slot is moving (resharding): the request may be retried.
MIGRATING = ("TRYAGAIN", "ASK ", "MOVED ", "CROSSSLOT",
             "Script attempted to access a non local key")


def parse_uri(uri: str) -> tuple[bool, str | None, str | None, list[tuple[str, int]], int]:
    """``(tls, username, password, [(host, port), ...], db)`` from a redis:// URI."""
    scheme, sep, rest = uri.partition("://")
    if not sep or scheme not in ("redis", "rediss"):
        # The URI itself may hold a password: do not repeat it.
        raise ValueError(f"[{GROUP}] uri must start with redis:// or rediss://")
    location, _, db = rest.partition("/")
    credentials, _, hosts = location.rpartition("@")
    username, _, password = credentials.partition(":")
    nodes = []
    for host in hosts.split(","):
        host = host.strip()
        if host.startswith("["):  # IPv6: [::1]:6379
            name, _, port = host[1:].partition("]")
            port = port.lstrip(":") or "6379"
        else:
            name, _, port = host.rpartition(":")
            if not name:
                name, port = port, "6379"
        if not name or not port.isdigit():
            raise ValueError(f"[{GROUP}] uri has a malformed host:port")
        nodes.append((name, int(port)))
    return (scheme == "rediss", unquote(username) or None, unquote(password) or None, nodes,
            int(db or 0))


# One quick retry on a dropped connection (Redis restarted, a firewall cut an idle
# connection, a failover), on a new connection. None on a timeout (redis-py's
# TimeoutError is no ConnectionError): the command, a script say, may have run, and a
# silent Redis would hold every request for several socket_timeouts instead of one.
RETRIED = (redis.exceptions.ConnectionError,)
BACKOFF = ExponentialBackoff(cap=0.1, base=0.01)


def _retries(clustered: bool) -> int:
    """How many times a client sends a command again after a broken connection. A
    cluster client retries a timeout too, whatever its retry supports: it gets none,
    and the driver's calls send once more themselves (``calls.py``)."""
    return 0 if clustered else 1


def _options(tls: bool, username: str | None, password: str | None, *, clustered: bool,
             socket_timeout: float, connect_timeout: float, retry: type) -> dict[str, Any]:
    return dict(username=username, password=password, protocol=2,
                retry=retry(BACKOFF, _retries(clustered), supported_errors=RETRIED),
                socket_timeout=socket_timeout, socket_connect_timeout=connect_timeout)


def connect(uri: str, *, socket_timeout: float, connect_timeout: float,
            max_connections: int) -> tuple[redis.Redis | RedisCluster, bool]:
    """A blocking client for *uri* and whether it talks to a cluster (several seeds, or
    detected). At *max_connections* a call waits for a free connection (as long as
    for a reply) rather than failing at once: a burst beyond the cap is served, slower."""
    tls, username, password, nodes, db = parse_uri(uri)
    timeouts = dict(socket_timeout=socket_timeout, connect_timeout=connect_timeout)
    if len(nodes) == 1:
        host, port = nodes[0]
        # from_pool: closing the client closes its pool's connections.
        single = redis.Redis.from_pool(redis.BlockingConnectionPool(
            host=host, port=port, db=db, max_connections=max_connections,
            timeout=socket_timeout, health_check_interval=30,
            connection_class=redis.SSLConnection if tls else redis.Connection,
            **_options(tls, username, password, clustered=False, retry=Retry,
                       **timeouts)))
        try:
            clustered = single.info("cluster").get("cluster_enabled") == 1
        except BaseException:
            single.close()
            raise
        if not clustered:
            return single, False
        single.close()
    if db:
        raise ValueError(f"[{GROUP}] uri: a Redis Cluster has only database 0")
    pool = functools.partial(redis.BlockingConnectionPool, timeout=socket_timeout)
    cluster = RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in nodes],
                           max_connections=max_connections, connection_pool_class=pool,
                           ssl=tls, **_options(tls, username, password, clustered=True,
                                               retry=Retry, **timeouts))
    return cluster, True


def connect_async(uri: str, clustered: bool, *, socket_timeout: float,
                  connect_timeout: float, max_connections: int) -> AsyncClient:
    """An asyncio client for *uri*, for one event loop; it connects at its first call,
    awaited. On one server, at *max_connections* a call waits for a free connection;
    a cluster client refuses a call instead, so ``Clients`` bounds the calls a loop
    has in flight."""
    tls, username, password, nodes, db = parse_uri(uri)
    options = _options(tls, username, password, clustered=clustered,
                       retry=redis.asyncio.retry.Retry, socket_timeout=socket_timeout,
                       connect_timeout=connect_timeout)
    if not clustered:
        host, port = nodes[0]
        return redis.asyncio.Redis.from_pool(redis.asyncio.BlockingConnectionPool(
            host=host, port=port, db=db, max_connections=max_connections,
            timeout=socket_timeout, health_check_interval=30,
            connection_class=(redis.asyncio.SSLConnection if tls
                              else redis.asyncio.Connection), **options))
    return redis.asyncio.cluster.RedisCluster(
        startup_nodes=[redis.asyncio.cluster.ClusterNode(h, p) for h, p in nodes],
        max_connections=max_connections, ssl=tls, **options)


def listener(uri: str, options: Options, node: tuple[str, int] | None = None
             ) -> redis.asyncio.Redis:
    """An asyncio client for pub/sub connections to the server of *uri*, or to *node*
    (host, port) of its cluster. It sends nothing again after a broken connection, so
    the connection's end reaches the listener, whose caller listens again and makes up
    for the signals lost meanwhile (``signals.py``)."""
    tls, username, password, nodes, db = parse_uri(uri)
    host, port = nodes[0] if node is None else node
    return redis.asyncio.Redis(
        host=host, port=port, db=db if node is None else 0, username=username,
        password=password, ssl=tls, protocol=2, socket_timeout=options["socket_timeout"],
        socket_connect_timeout=options["connect_timeout"],
        retry=redis.asyncio.retry.Retry(BACKOFF, 0))


async def detect_cluster(uri: str, options: Options) -> bool:
    """Whether *uri* names a cluster: several seeds, or one that says it is."""
    *_, nodes, _db = parse_uri(uri)
    if len(nodes) > 1:
        return True
    probe = listener(uri, options)
    try:
        return bool((await probe.info("cluster")).get("cluster_enabled") == 1)
    finally:
        await probe.aclose()


def fast_path(uri: str, *, socket_timeout: float, connect_timeout: float,
              max_connections: int) -> FastPath:
    """The fast path of script calls awaited on a loop, for one server at *uri*."""
    tls, username, password, nodes, db = parse_uri(uri)
    host, port = nodes[0]
    return FastPath(Server(host, port, db, username, password, tls, socket_timeout,
                           connect_timeout))


class Clients:
    """The asyncio clients of one Redis deployment: one per event loop (``on_loop``),
    made at the loop's first call, since an asyncio client's connections belong to the
    loop that opened them; on one server, ``fast`` makes the script calls
    (``fastpath.py``).

    ``resend`` is True when a call sends itself once more after a broken connection
    (a cluster's clients retry nothing, ``_retries``).
    """

    def __init__(self, uri: str, clustered: bool, *, socket_timeout: float,
                 connect_timeout: float, max_connections: int) -> None:
        self.clustered = clustered
        self.resend = clustered
        options = Options(socket_timeout=socket_timeout, connect_timeout=connect_timeout,
                          max_connections=max_connections)
        self.fast = None if clustered else fast_path(uri, **options)
        limit = max_connections if clustered else 0
        self._loops: PerLoop[tuple[AsyncClient, asyncio.Semaphore | None]] = PerLoop(
            lambda loop: (connect_async(uri, clustered, **options),
                          asyncio.Semaphore(limit) if limit else None))

    def on_loop(self) -> tuple[AsyncClient, asyncio.Semaphore | None]:
        """The running loop's client, and for a cluster the semaphore that keeps its
        calls in flight within the connections it may open to a node."""
        return self._loops.get()

    async def close(self) -> None:
        """Close every loop's client whose loop can still run its closing: awaited on
        the running loop, handed to a loop running in another thread. A loop that is
        neither running nor closed keeps its client until it is garbage: no loop may be
        run from inside another."""
        if self.fast is not None:
            self.fast.close()
        running = asyncio.get_running_loop()
        for loop, (client, _limit) in self._loops.take_all().items():
            if loop is running:
                await client.aclose()
            elif loop.is_running() and not loop.is_closed():
                asyncio.run_coroutine_threadsafe(client.aclose(), loop)


class Connection:
    """The driver's way to Redis: the asyncio ``Clients``, made at the first call
    awaited (connecting, detecting a cluster and running *prepare* with a client of
    its own before any other call), and a blocking client for the audits' reads, made
    at their first.

    While Redis is down, one call at a time tries to connect, at most once per
    CONNECT_PAUSE seconds; every other call fails at once with the last error instead
    of queueing behind the attempt.
    """

    def __init__(self, uri: str, prepare: Callable[[AsyncClient], Awaitable[None]], *,
                 socket_timeout: float, connect_timeout: float,
                 max_connections: int) -> None:
        # A malformed URI stops the server at start, not at each request.
        parse_uri(uri)
        self.uri = uri
        self.options = Options(socket_timeout=socket_timeout,
                               connect_timeout=connect_timeout,
                               max_connections=max_connections)
        self._prepare = prepare
        self._clients: Clients | None = None
        self._blocking: redis.Redis | RedisCluster | None = None
        self._lock = threading.Lock()
        self._blocking_lock = threading.Lock()
        self._failed_at = 0.0
        self._error = ""

    @property
    def clustered(self) -> bool | None:
        """Whether Redis is a cluster; None until connected."""
        return None if self._clients is None else self._clients.clustered

    async def clients(self) -> Clients:
        """The clients, connecting first if need be."""
        clients = self._clients
        if clients is not None:
            return clients
        if not self._lock.acquire(blocking=False):
            raise unavailable.error("Connecting to Redis; retry.")
        try:
            if self._clients is None:
                if time.monotonic() - self._failed_at < CONNECT_PAUSE:
                    raise unavailable.error(self._error)
                try:
                    with unavailable:
                        self._clients = await self._connect()
                except errors.StorageUnavailable as exc:
                    self._failed_at = time.monotonic()
                    self._error = exc.detail
                    raise
            return self._clients
        finally:
            self._lock.release()

    async def _connect(self) -> Clients:
        """Detect a cluster (several seeds, or one that says so) and prepare it, each
        with a client of its own, closed after: the clients calls use belong to their
        loops."""
        *_, nodes, db = parse_uri(self.uri)
        clustered = len(nodes) > 1
        if not clustered:
            probe = connect_async(self.uri, False, **self.options)
            try:
                clustered = (await probe.info("cluster")).get("cluster_enabled") == 1
                if not clustered:
                    await self._prepare(probe)
            finally:
                await probe.aclose()
        if clustered:
            if db:
                raise ValueError(f"[{GROUP}] uri: a Redis Cluster has only database 0")
            probe = connect_async(self.uri, True, **self.options)
            try:
                await self._prepare(probe)
            finally:
                await probe.aclose()
        return Clients(self.uri, clustered, **self.options)

    def blocking(self) -> redis.Redis | RedisCluster:
        """The blocking client, connecting first if need be: only for reads whose
        interface blocks (the audits'), never on an event loop."""
        client = self._blocking
        if client is None:
            with self._blocking_lock, unavailable:
                if self._blocking is None:
                    self._blocking, _clustered = connect(self.uri, **self.options)
                client = self._blocking
        return client

    async def close(self) -> None:
        """Close every client; the next call connects again."""
        clients, self._clients = self._clients, None
        if clients is not None:
            await clients.close()
        blocking, self._blocking = self._blocking, None
        if blocking is not None:
            blocking.close()


def describe_unavailable(exc: BaseException) -> str | None:
    """What failed, when *exc* means Redis is unreachable or a cluster slot is
    migrating (the request may be retried); None for anything else."""
    if isinstance(exc, UNAVAILABLE):
        return f"Redis is unavailable: {exc}{_system_reason(exc)}"
    if isinstance(exc, redis.exceptions.ResponseError) and any(
            mark in str(exc) for mark in MIGRATING):
        return f"The queue's Redis Cluster slot is being migrated; retry: {exc}"
    return None


def _system_reason(exc: BaseException) -> str:
    """The operating system's words for the failure behind *exc* (" (Connection
    refused)"), which asyncio's message of a failed connect leaves out; "" when the
    message has them already or there are none."""
    cause = exc.__cause__
    if isinstance(cause, OSError) and cause.errno:
        reason = os.strerror(cause.errno)
        if reason not in str(exc):
            return f" ({reason})"
    return ""


unavailable = Unavailability(NAME, describe_unavailable)
