"""The Swift driver's audit reads (``delayq.spark_jobs``): the event trails the recorder
wrote (``recorder.py``) and the live messages, of whole queues.

They use Swift's listings, which may lag a little behind the latest writes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

from delayq.events import Event
from delayq.message import Message
from delayq.storage import base
from delayq.storage.swift import layout as lay
from delayq.storage.swift.layout import US
from delayq.storage.swift.live_messages import LiveMessages
from delayq.storage.swift.objects import LISTING_PAGE, Objects, unavailable

TRAIL_BATCH = 64  # event objects read at once by events
MESSAGES_BATCH = 100  # messages read at once by messages


class Trail(base.Trail):
    """The event trails and the live messages of the queues under the driver's prefix;
    *now_us* is the driver's clock (µs)."""

    def __init__(self, objects: Objects, live: LiveMessages, now_us: Callable[[], int]
                 ) -> None:
        self._objects = objects
        self._live = live
        self._now_us = now_us

    def queues(self, project: str | None) -> list[tuple[str, str]]:
        """Every ``(project, queue)`` holding messages or events, sorted."""
        objects = self._objects
        prefix = objects.prefix
        starts = ([f"{prefix}:"] if project is None else
                  [lay.queue_prefix(prefix, project), lay.events_prefix(prefix, project)])
        with unavailable:
            containers = [name for start in starts for name in objects.account(start)]
            queues = {parsed for parsed in (lay.parse_container(prefix, name)
                                            for name in containers) if parsed}
            trails = [parsed for parsed in (lay.parse_events_container(prefix, name)
                                            for name in containers) if parsed]
            # A deleted queue's events container stays, empty once its events expired.
            firsts = objects.parallel(lambda parsed: objects.names(
                lay.events_container_of_part(prefix, *parsed), "", limit=1), trails)
            held = {parsed: names[0] for parsed, names in zip(trails, firsts, strict=True)
                    if names}
            parts = {part for part, _ in queues | held.keys()}
            projects = {part: project if project is not None else lay.project_of_part(part)
                        for part in parts}
            for (part, queue), first in held.items():
                if projects[part] is None:  # a hashed project part: its events name it
                    projects[part] = self._project_of_trail(part, queue, first)
        named = [(projects[part], queue) for part, queue in queues | held.keys()]
        return sorted((name, queue) for name, queue in named if name is not None)

    def project_of_queue(self, part: str, queue: str) -> str | None:
        """The project of a hashed project part, from the queue's trail, if it has one."""
        first = self._objects.names(
            lay.events_container_of_part(self._objects.prefix, part, queue), "", limit=1)
        return self._project_of_trail(part, queue, first[0]) if first else None

    def _project_of_trail(self, part: str, queue: str, name: str) -> str | None:
        """The project of a hashed project part, from the events object *name*."""
        found = self._objects.get(
            lay.events_container_of_part(self._objects.prefix, part, queue), name)
        trail = lay.decode_events(found[1]) if found else []
        return trail[0].project if trail else None

    def events(self, project: str, queue: str, *, after: float | None = None
               ) -> Iterator[Event]:
        """The retained events of one queue's trail, oldest first; with *after*, only
        those whose time is strictly greater, the objects named before it not listed."""
        objects = self._objects
        container = lay.events_container(objects.prefix, project, queue)
        marker = ""
        if after is not None:
            # An object is named by the time of the request that wrote it, the time of
            # its events but for expired ones, stamped with an earlier expiry: an event
            # after *after* is in an object named after it too. A bare time sorts before
            # every name it begins; one microsecond less absorbs after * US's rounding.
            marker = lay.time_name(max(0, math.floor(after * US) - 1))
        while True:
            with unavailable:
                names = objects.names(container, "", marker=marker, limit=LISTING_PAGE)
            for start in range(0, len(names), TRAIL_BATCH):
                with unavailable:
                    bodies = objects.parallel(lambda name: objects.get(container, name),
                                              names[start:start + TRAIL_BATCH])
                for found in bodies:
                    if found is not None:  # past its retention (X-Delete-At)
                        yield from (event for event in lay.decode_events(found[1])
                                    if after is None or event.time > after)
            if len(names) < LISTING_PAGE:
                return
            marker = names[-1]

    def messages(self, project: str, queue: str) -> Iterator[Message]:
        container = self._objects.container(project, queue)
        after = lay.MESSAGE_PREFIX
        with unavailable:
            now = self._now_us()
        while True:
            with unavailable:
                names = self._objects.names(container, lay.MESSAGE_PREFIX, marker=after,
                                            limit=MESSAGES_BATCH)
                if not names:
                    return
                ids = [name[len(lay.MESSAGE_PREFIX):] for name in names]
                live = self._live.read(project, queue, ids, now)
            yield from live
            after = names[-1]
