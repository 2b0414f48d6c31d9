"""The event trail in Redis, read for the audits: each queue's stream (``lua/common.lua``,
"Event trail", writes it inside the scripts) turned back into ``delayq.events.Event``s.

Not atomic across calls: a snapshot of a busy queue may be a little ragged at its edges,
which audits of history can afford.
"""

from __future__ import annotations

from collections.abc import Iterator

import redis
from redis.cluster import RedisCluster

from delayq import events
from delayq.storage.redis.client import unavailable
from delayq.storage.redis.layout import US, Keys

PAGE = 1000  # stream entries read at a time


def queues(client: redis.Redis | RedisCluster, keys: Keys, project: str | None
           ) -> list[tuple[str, str]]:
    """Every ``(project, queue)`` with a catalogue entry or a trail, sorted."""
    found: set[tuple[str, str]] = set()
    projects = ([project] if project is not None else
                [p.decode() for p in client.smembers(keys.projects())])
    for name in projects:
        found.update((name, queue.decode()) for queue in
                     client.zrange(keys.catalogue(name), 0, -1))
    # Streams of deleted queues (and of projects no longer catalogued) are found by
    # name: an offline audit can afford a SCAN.
    for key in client.scan_iter(match=keys.trail_pattern(project), count=1000):
        found.add(keys.trail_owner(key.decode()))
    return sorted(found)


def events_of(client: redis.Redis | RedisCluster, keys: Keys, project: str, queue: str
              ) -> Iterator[events.Event]:
    """The retained events of one queue, oldest first."""
    key = keys.trail(project, queue)
    start = "-"
    while True:
        with unavailable:
            entries = client.xrange(key, start, "+", count=PAGE)
        for _entry_id, fields in entries:
            yield trail_event(project, queue, fields)
        if len(entries) < PAGE:
            return
        start = "(" + entries[-1][0].decode()


# Stream entry fields (lua/common.lua, "Event trail") and how each becomes an Event field.
TRAIL_FIELDS = {
    b"m": ("message_id", bytes.decode),
    b"cl": ("claim_id", bytes.decode),
    b"c": ("claim_count", int),
    b"d": ("due", lambda raw: int(raw) / US),
    b"ttl": ("ttl", int),
    b"e": ("expires", lambda raw: int(raw) / US),
    b"src": ("source", bytes.decode),
    b"dst": ("target", bytes.decode),
    b"b": ("body", bytes.decode),
}


def trail_event(project: str, queue: str, fields: dict[bytes, bytes]) -> events.Event:
    """The Event of one stream entry of a queue's trail."""
    values = {name: convert(fields[raw]) for raw, (name, convert) in TRAIL_FIELDS.items()
              if raw in fields}
    return events.Event(project=project, queue=queue, kind=fields[b"k"].decode(),
                        time=int(fields[b"t"]) / US, **values)
