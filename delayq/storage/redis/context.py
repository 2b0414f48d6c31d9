"""What the controllers of one Redis driver share: the connection and its calls, the
scripts, the key names, the time argument of every script, the project catalogues, the
dead-letter moves across slots and the cache of queue metadata for writes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from redis.crc import key_slot

from delayq import errors
from delayq.storage.redis.calls import Calls
from delayq.storage.redis.catalogue import Catalogue
from delayq.storage.redis.client import NAME, Connection
from delayq.storage.redis.layout import KeyNames
from delayq.storage.redis.moves import Moves
from delayq.storage.redis.scripts import Scripts

METADATA_CACHE_SIZE = 10_000  # queues whose metadata a process keeps for writes


class Context:
    """The state of one Redis driver its controllers work on.

    *now_arg* gives ARGV[1] of every script (``Driver``'s clock); *marker_ttl* is how
    long a dead-letter queue remembers a move received from another slot.
    """

    def __init__(self, connection: Connection, scripts: Scripts, key_names: KeyNames,
                 now_arg: Callable[[], str], marker_ttl: int) -> None:
        self.connection = connection
        self.scripts = scripts
        self.calls: Calls = scripts.calls
        self.key_names = key_names
        self.now_arg = now_arg
        self.catalogue = Catalogue(key_names, scripts, now_arg)
        self.moves = Moves(self, marker_ttl)
        # Queue key → the metadata last read for a write, decoded and raw; posts and
        # claims check the raw text in their script (Queues.for_write), so a stale
        # entry costs a retry, never a rule.
        self.metadata: dict[str, tuple[dict[str, Any], bytes]] = {}

    async def same_slot(self, key: str, other: str) -> bool:
        """True when keys *key* and *other* are in one slot (always, on one server)."""
        clustered = (await self.connection.clients()).clustered
        return not clustered or key_slot(key.encode()) == key_slot(other.encode())

    def metadata_changed(self, key: str) -> errors.MetadataChanged:
        """The refusal of a write whose metadata token is stale; forgets the cached
        metadata of the queue with state key *key*."""
        self.metadata.pop(key, None)
        return errors.MetadataChanged("The queue's metadata changed during the request.",
                                      store=NAME)

    def forget_metadata(self, project: str, name: str) -> None:
        self.metadata.pop(self.key_names.queue(project, name), None)
