"""Whether a Redis server's configuration keeps what delayq acknowledged.

A post answered 201, a delete answered 204 and a finished claim are only as durable as
the Redis server makes them: with no append-only file a restart empties every queue; with
``appendfsync everysec`` a crash of ``redis-server`` can lose the last couple of seconds of
acknowledged writes (Redis holds its AOF writes back while a background fsync runs, yet
answers); with any eviction policy Redis may drop delayq's keys when memory runs out. The
operator guide's "Persistence and memory policy" has the figures.

The settings are read once per process, when it connects, and each shortfall is logged as
a warning naming the server. They are not enforced: the operator may accept the risk, and
a managed Redis may not let anyone change them. Where ``CONFIG`` is disabled or renamed
(common on managed services) nothing can be read, which is logged at INFO.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import redis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

from delayq.storage.redis.client import AsyncClient

LOG = logging.getLogger(__name__)

PARAMETERS = ("appendonly", "appendfsync", "maxmemory-policy")
GUIDE = "docs/redis.md, 'Persistence and memory policy'"


def shortfalls(config: Mapping[str, str]) -> list[str]:
    """What *config* (``CONFIG GET`` of ``PARAMETERS``) risks, one sentence each."""
    found = []
    if config.get("appendonly") != "yes":
        found.append("appendonly is not yes: a restart of redis-server loses every "
                     "acknowledged message, delete and claim since the last snapshot")
    elif config.get("appendfsync") != "always":
        found.append(f"appendfsync is {config.get('appendfsync')}, not always: a crash of "
                     "redis-server can lose the last seconds of acknowledged writes")
    policy = config.get("maxmemory-policy")
    if policy is not None and policy != "noeviction":
        found.append(f"maxmemory-policy is {policy}, not noeviction: at its memory limit "
                     "Redis drops keys, and with them messages")
    return found


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def read_config(client: AsyncClient, node: Any = None) -> dict[str, str]:
    """``PARAMETERS`` as one server reports them (names and values as text): *client*'s,
    or its cluster's *node*."""
    options = {} if node is None else {"target_nodes": node}
    reply: dict[Any, Any] = await client.config_get(*PARAMETERS, **options)
    return {_text(name): _text(value) for name, value in reply.items()}


def servers(client: AsyncClient) -> list[tuple[str, Any]]:
    """Each server to check, by address, and the node to target on a cluster: the one
    server, or every cluster primary."""
    if isinstance(client, AsyncRedisCluster):
        return [(node.name, node) for node in client.get_primaries()]
    kwargs = client.connection_pool.connection_kwargs
    return [(f"{kwargs.get('host')}:{kwargs.get('port')}", None)]


async def check(client: AsyncClient) -> None:
    """Log a warning for each setting of each server that risks acknowledged writes."""
    if isinstance(client, AsyncRedisCluster):
        await client.initialize()  # it knows its primaries once it has read the slots
    for address, node in servers(client):
        try:
            config = await read_config(client, node)
        except redis.exceptions.ResponseError as exc:
            LOG.info("Could not read the persistence settings of Redis at %s (%s); "
                     "see %s.", address, exc, GUIDE)
            continue
        for shortfall in shortfalls(config):
            LOG.warning("Redis at %s: %s. See %s.", address, shortfall, GUIDE)
