"""The Swift driver's event trail (``delayq.events``): recording a request's events, and
reading them back for audits.

Each request that changed messages writes its events as one more object, ``PUT`` right
*after* the change succeeded, into the queue's events container (``layout.py``), which
outlives the queue's; ``X-Delete-At`` is the retention. Swift cannot write both at once,
so a process dying (or Swift failing) in between loses those events; none is recorded
for a change this request did not make: only the winner of a marker records the claim or
move it won, and only the request whose ``DELETE`` found a message records its deletion
or pop. A failed event write is logged, not answered with 503: the change is done, and a
client retrying would post or claim again. Each expired message's ``expired`` event is
written by the winner of its ``expire`` marker, once its DELETE found the message, with
the time it expired.

The audit reads (``trail_queues``, ``read_events``) use Swift's listings, which may lag a
little behind the latest writes.
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from swiftclient.exceptions import ClientException

from delayq import events
from delayq.storage import trail as shared
from delayq.storage.swift import layout as lay
from delayq.storage.swift.layout import US, Record
from delayq.storage.swift.objects import (
    LISTING_PAGE,
    Objects,
    delete_at,
    is_status,
    unavailable,
)

LOG = logging.getLogger(__name__)

TRAIL_BATCH = 64  # event objects read at once by read_events


class Recorder:
    """The event trails of the queues under the driver's prefix."""

    def __init__(self, objects: Objects, settings: events.Settings,
                 endings: Callable[[Iterable[str]], None]) -> None:
        """*settings* turn the trail on or off; *endings* is told the kinds of the
        messages each recorded trail ends, whether the trail is on or not."""
        self._objects = objects
        self._settings = settings
        self._endings = endings
        # Names this process's event objects: random, so no two processes' names collide
        # (its tally objects are named by its writer slot instead).
        self._writer = secrets.token_hex(4)
        self._serial = 0
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self._settings.enabled

    @staticmethod
    def event(project: str, queue: str, kind: str, now: int, **fields: Any) -> events.Event:
        """An event of *kind* at *now* (µs); *fields* as ``events.Event`` has them."""
        return events.Event(project=project, queue=queue, kind=kind, time=now / US, **fields)

    def deleted(self, project: str, queue: str, now: int, message_id: str, record: Record,
                claim_id: str | None = None) -> events.Event:
        return self.event(project, queue, events.DELETED, now, message_id=message_id,
                          claim_id=claim_id, claim_count=record.count)

    def record(self, project: str, queue: str, now: int, trail: list[events.Event]) -> None:
        """Write a request's events as one object, once the change they record is done.

        Swift failing now loses these events, and only them: the change stands, so the
        request must not fail (a client would repeat it). The messages they end go to
        *endings* whether the trail is on or not.
        """
        shared.report_endings((event.kind for event in trail), self._endings)
        if not trail or not self._settings.enabled:
            return
        container = lay.events_container(self._objects.prefix, project, queue)
        with self._lock:
            self._serial += 1
            name = lay.event_object(now, self._serial, self._writer)
        body = lay.encode_events(trail)
        headers = {"X-Delete-At": delete_at(now, self._settings.retention)}
        shared.write_or_log(lambda: self._put_events(container, name, body, headers),
                            len(trail), unavailable)

    def _put_events(self, container: str, name: str, body: bytes, headers: dict[str, str]
                    ) -> None:
        try:
            self._put(container, name, body, headers)
        except ClientException as exc:
            if not is_status(exc, 404):
                raise
            # A queue made before its trail was on: its events container now.
            self._objects.swift.put_container(container)
            self._put(container, name, body, headers)

    def _put(self, container: str, name: str, body: bytes, headers: dict[str, str]) -> None:
        self._objects.swift.put_object(container, name, body,
                                       content_type=lay.EVENTS_CONTENT_TYPE, headers=headers)

    # Reading

    def queues(self, project: str | None) -> list[tuple[str, str]]:
        """Every ``(project, queue)`` holding messages or events, sorted (``trail_queues``)."""
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
        return sorted((projects[part], queue) for part, queue in queues | held.keys()
                      if projects[part] is not None)

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

    def read(self, project: str, queue: str) -> Iterator[events.Event]:
        """The retained events of one queue's trail, oldest first (``read_events``)."""
        objects = self._objects
        container = lay.events_container(objects.prefix, project, queue)
        after = ""
        while True:
            with unavailable:
                names = objects.names(container, "", marker=after, limit=LISTING_PAGE)
            for start in range(0, len(names), TRAIL_BATCH):
                with unavailable:
                    bodies = objects.parallel(lambda name: objects.get(container, name),
                                              names[start:start + TRAIL_BATCH])
                for found in bodies:
                    if found is not None:  # past its retention (X-Delete-At)
                        yield from lay.decode_events(found[1])
            if len(names) < LISTING_PAGE:
                return
            after = names[-1]
