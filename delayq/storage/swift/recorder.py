"""The Swift driver's event trail (``delayq.events``): recording a request's events (the
audits read them back through ``trail.py``).

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
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Callable, Iterable
from typing import Any

from swiftclient.exceptions import ClientException

from delayq import events
from delayq.storage import trail as shared
from delayq.storage.swift import layout as lay
from delayq.storage.swift.layout import US, Record
from delayq.storage.swift.objects import Objects, delete_at, is_status, unavailable

LOG = logging.getLogger(__name__)


class Recorder:
    """Writes the event trails of the queues under the driver's prefix."""

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
