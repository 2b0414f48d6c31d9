"""The audit reads of the Redis driver: the event trail, each queue's stream
(``lua/common.lua``, "Event trail", writes it inside the scripts) turned back into
``delayq.events.Event``s, and the live messages of a queue.

They block, as the interface has them (``delayq.storage.base.trail``), on the driver's
blocking client. Not atomic across calls: a snapshot of a busy queue may be a little
ragged at its edges, which audits of history can afford.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from typing import Any

from delayq import events
from delayq.message import Message
from delayq.storage import base
from delayq.storage.redis import layout
from delayq.storage.redis.client import Connection, unavailable
from delayq.storage.redis.layout import US, KeyNames

PAGE = 1000  # stream entries read at a time
MS = 1000  # stream ids count milliseconds
# How far before *after* a read of the events after it starts its stream ids (ms): more
# than any script runs before it reads the clock (events_of says why that is the bound).
ID_SLACK_MS = 60_000


class Trail(base.Trail):
    """The audits' reads of Redis, on *connection*'s blocking client; *clock* is the
    driver's given clock (None: the server's ``TIME``)."""

    def __init__(self, connection: Connection, key_names: KeyNames,
                 clock: Callable[[], float] | None) -> None:
        self.connection = connection
        self.key_names = key_names
        self.clock = clock

    def queues(self, project: str | None) -> list[tuple[str, str]]:
        with unavailable:
            return queues(self.connection.blocking(), self.key_names, project)

    def events(self, project: str, queue: str, *, after: float | None = None
               ) -> Iterator[events.Event]:
        # A given clock's times bear no relation to the stream ids, which stay the
        # server's: only the whole stream is sure to hold every event after *after*.
        ids_follow_times = self.clock is None
        return events_of(self.connection.blocking(), self.key_names, project, queue,
                         after=after, ids_follow_times=ids_follow_times)

    def messages(self, project: str, queue: str) -> Iterator[Message]:
        # Any: redis-py types replies for either decoding; this client's are bytes.
        client: Any = self.connection.blocking()
        key = self.key_names.queue(project, queue)
        prefix = key[:-1]
        with unavailable:
            nonce = client.hget(key, "nonce") or b""
            buckets = client.zrange(prefix + "bi", 0, -1)
            # The claims, read first: one made meanwhile is not seen (its messages show
            # no claim), a ragged edge like the others.
            claims = {int(number): layout.claim_name(int(number), raw)
                      for number, raw in client.hscan_iter(prefix + "cl")}
            as_of = round(self._now(client) * US)
        for bucket in buckets:
            with unavailable:
                records = client.hgetall(f"{prefix}b:{bucket.decode()}")
                seqs = sorted(records)
                pipe = client.pipeline(transaction=False)
                for seq in seqs:
                    pipe.zscore(prefix + "c", seq)
                    pipe.zscore(prefix + "wc", seq)  # claimed, due after the claim
                scores = pipe.execute()
            for seq, in_c, in_wc in zip(seqs, scores[::2], scores[1::2], strict=True):
                claim_expires = in_c if in_c is not None else in_wc
                message = layout.message(nonce, seq, records[seq], as_of, claims)
                if message.expires * US <= as_of:
                    continue
                if claim_expires is not None and message.claim_id is not None:
                    message = dataclasses.replace(message, claim_expires=claim_expires / US)
                yield message

    def _now(self, client: Any) -> float:
        if self.clock is not None:
            return self.clock()
        reply = client.execute_command("TIME")
        if isinstance(reply, dict):  # a cluster answers per node
            reply = next(iter(reply.values()))
        seconds, micros = reply
        return int(seconds) + int(micros) / US


def queues(client: Any, key_names: KeyNames, project: str | None
           ) -> list[tuple[str, str]]:
    """Every ``(project, queue)`` with a catalogue entry or a trail, sorted."""
    found: set[tuple[str, str]] = set()
    projects = ([project] if project is not None else
                [p.decode() for p in client.smembers(key_names.projects())])
    for name in projects:
        found.update((name, queue.decode()) for queue in
                     client.zrange(key_names.catalogue(name), 0, -1))
    # Streams of deleted queues (and of projects no longer catalogued) are found by
    # name: an offline audit can afford a SCAN.
    for key in client.scan_iter(match=key_names.trail_pattern(project), count=1000):
        found.add(key_names.trail_owner(key.decode()))
    return sorted(found)


def events_of(client: Any, key_names: KeyNames, project: str, queue: str, *,
              after: float | None = None, ids_follow_times: bool = True
              ) -> Iterator[events.Event]:
    """The retained events of one queue, oldest first; with *after*, only those whose
    time is strictly greater, the stream read from the ids that may hold them when
    *ids_follow_times* (the events' times are the server's clock, as its ids are)."""
    key = key_names.trail(project, queue)
    start = "-"
    if after is not None and ids_follow_times:
        # An entry's id is the server's clock (ms) when its script started (newer Redis
        # freezes it for a script; older ones read it at the XADD, later still), or its
        # previous entry's if that is ahead; its t is the clock the script read on its
        # way (or an expiry, earlier). So an event with t > after has an id past after
        # less the time a script runs before it reads the clock, far below ID_SLACK_MS.
        start = str(max(0, math.floor(after * MS) - ID_SLACK_MS))
    while True:
        with unavailable:
            entries = client.xrange(key, start, "+", count=PAGE)
        for _entry_id, fields in entries:
            event = trail_event(project, queue, fields)
            if after is None or event.time > after:
                yield event
        if len(entries) < PAGE:
            return
        start = "(" + entries[-1][0].decode()


# Stream entry fields (lua/common.lua, "Event trail") and how each becomes an Event field.
TRAIL_FIELDS: dict[bytes, tuple[str, Callable[[bytes], Any]]] = {
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
