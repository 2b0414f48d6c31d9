"""Connecting to Redis (one server or a cluster), and which failures are a 503."""

from __future__ import annotations

import functools
from urllib.parse import unquote

import redis
from redis.backoff import ExponentialBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.retry import Retry

from delayq.storage.redis.options import GROUP
from delayq.storage.unavailable import Unavailability

NAME = "redis"  # the store a 503 names

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


def connect(uri: str, *, socket_timeout: float, connect_timeout: float,
            max_connections: int) -> tuple[redis.Redis | RedisCluster, bool]:
    """A client for *uri* and whether it talks to a cluster (several seeds, or detected)."""
    tls, username, password, nodes, db = parse_uri(uri)
    # One quick retry on a dropped connection (Redis restarted, a failover). None on a
    # timeout: the command may have run, and a silent Redis would hold every request for
    # several socket_timeouts instead of one.
    retry = Retry(ExponentialBackoff(cap=0.1, base=0.01), 1,
                  supported_errors=(redis.exceptions.ConnectionError,))
    common = dict(username=username, password=password, ssl=tls, retry=retry,
                  socket_timeout=socket_timeout, socket_connect_timeout=connect_timeout)
    if len(nodes) == 1:
        host, port = nodes[0]
        single = redis.Redis(host=host, port=port, db=db, max_connections=max_connections,
                             health_check_interval=30, **common)
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
    # At max_connections a request waits for a free connection (as long as for a reply)
    # rather than failing at once: a burst of requests beyond the cap is served, slower.
    pool = functools.partial(redis.BlockingConnectionPool, timeout=socket_timeout)
    cluster = RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in nodes],
                           max_connections=max_connections, connection_pool_class=pool,
                           **common)
    return cluster, True


def describe_unavailable(exc: BaseException) -> str | None:
    """What failed, when *exc* means Redis is unreachable or a cluster slot is
    migrating (the request may be retried); None for anything else."""
    if isinstance(exc, UNAVAILABLE):
        return f"Redis is unavailable: {exc}"
    if isinstance(exc, redis.exceptions.ResponseError) and any(
            mark in str(exc) for mark in MIGRATING):
        return f"The queue's Redis Cluster slot is being migrated; retry: {exc}"
    return None


unavailable = Unavailability(NAME, describe_unavailable)
